// Package statustest has assertions for tests of objects that use package
// statusutil, for unit and envtest tests.
//
// Assertions report through testing.TB with a cmp.Diff of the condition and
// ignore LastTransitionTime, which no test can predict:
//
//	statustest.AssertCondition(t, widget, metav1.Condition{
//		Type: statusutil.ConditionReady, Status: metav1.ConditionTrue, Reason: "Succeeded",
//	})
//
// Waits for end-to-end tests built on sigs.k8s.io/e2e-framework are in
// package github.com/opkit-dev/opkit/statusutil/e2estatus, and assertions of
// what kstatus itself computes for an object in
// github.com/opkit-dev/opkit/statusutil/kstatustest: modules of their own,
// so that e2e-framework and cli-utils reach only the modules that import
// them.
package statustest

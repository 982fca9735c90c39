// Package statustest has test helpers for objects that use package
// statusutil: assertions on conditions for unit and envtest tests, and
// sigs.k8s.io/e2e-framework wait conditions for end-to-end tests.
//
// Assertions report through testing.TB with a cmp.Diff of the condition and
// ignore LastTransitionTime, which no test can predict:
//
//	statustest.AssertCondition(t, widget, metav1.Condition{
//		Type: statusutil.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Succeeded",
//	})
//
// The wait conditions poll an object through e2e-framework's
// resources.Resources until a condition has the wanted status for the
// object's current generation:
//
//	err := wait.For(statustest.HasCondition(cfg.Client().Resources(), widget, "Ready", metav1.ConditionTrue),
//		wait.WithTimeout(time.Minute), wait.WithInterval(time.Second))
//
// Footgun: resources.New builds its client from client-go's global scheme,
// which does not know custom resources. Register your API types with
// r.GetScheme() (for example myv1.AddToScheme(r.GetScheme())) before
// waiting; HasCondition returns an error at once, rather than timing out,
// when the type is not registered.
package statustest

// Package statusutil reads and writes the status of custom resources the way
// Kubernetes tooling expects: metav1.Condition lists, kstatus conditions and
// status.observedGeneration.
//
// # Conditions
//
// A condition is a typed, timestamped observation (Type, Status True, False
// or Unknown, a CamelCase Reason and a human Message). An API type opts in by
// implementing Setter on a status that holds []metav1.Condition:
//
//	func (w *Widget) GetConditions() []metav1.Condition  { return w.Status.Conditions }
//	func (w *Widget) SetConditions(c []metav1.Condition) { w.Status.Conditions = c }
//
// Set and the MarkTrue, MarkFalse and MarkUnknown shorthands build on
// k8s.io/apimachinery/pkg/api/meta and add what a controller needs to avoid
// writes that change nothing and writes the API server rejects:
//
//   - every condition records the metadata.generation it was computed for;
//   - LastTransitionTime moves only when Status changes and is truncated to
//     whole seconds, so an object read back from the API server compares
//     equal to the one written;
//   - reasons are made valid and messages are bounded by MaxMessageLength;
//   - the slice is kept sorted (Ready first, then by type), so the same set of
//     conditions always serialises the same way;
//   - every setter reports whether anything changed, so the caller can skip
//     the status update.
//
// # kstatus
//
// opkit follows the kstatus conventions of sigs.k8s.io/cli-utils, which
// kubectl wait, Flux, Argo CD and cli-utils' status poller understand:
//
//   - Reconciling (MarkReconciling / ClearReconciling) is True while the
//     controller works towards the spec;
//   - Stalled (MarkStalled / ClearStalled) is True while it cannot make
//     progress without outside help;
//   - both are abnormal-true: they are removed, not set to False, when the
//     situation ends, and marking one removes the other;
//   - Ready summarises everything; SetSummary derives it from Stalled,
//     Reconciling and the conditions the controller owns;
//   - status.observedGeneration (SetObservedGeneration) says which spec the
//     conditions describe.
//
// # Typical pass
//
//	statusutil.MarkReconciling(obj, "Progressing", "creating the StatefulSet")
//	if err := ensureChildren(ctx, obj); err != nil {
//		statusutil.MarkFalse(obj, "ChildrenReady", "CreateFailed", err.Error())
//	} else {
//		statusutil.MarkTrue(obj, "ChildrenReady", "Created", "")
//		statusutil.ClearReconciling(obj)
//	}
//	statusutil.SetSummary(obj, statusutil.WithConditions("ChildrenReady"))
//	statusutil.SetObservedGeneration(obj)
//	// one status write, only if something changed
//
// # Footguns
//
//   - The setters change the object in memory only. Writing it back with
//     client.Status().Update sends every condition: if another controller
//     wrote a condition since you read the object, the update fails with a
//     Conflict (the resourceVersion is stale) rather than losing it. Re-read
//     the object, re-apply your conditions with Set, and update again (for
//     example with k8s.io/client-go/util/retry.RetryOnConflict). Never copy
//     the conditions slice from a stale object over a fresh one.
//   - Set ignores the ObservedGeneration in the condition passed to it and
//     uses obj.GetGeneration(): set conditions on the object you read in
//     this pass, not on a copy with an older generation.
//   - Call SetObservedGeneration only when a pass completed for that
//     generation; see its documentation.
//   - Reasons are rewritten when invalid and messages are truncated (see
//     SanitizeReason and MaxMessageLength): compare against the stored
//     values, not the ones you passed in.
//   - Type and Status are not checked; use Validate or ValidateConditions in
//     a unit test.
//
// The statustest sub-package has test assertions built on this package;
// the e2e-framework wait conditions are in statusutil/e2estatus, a module
// of its own.
package statusutil

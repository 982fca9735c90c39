// Package reconcile provides Reconciler[T], a controller-runtime reconciler
// that owns the whole lifecycle of one kind, so that an operator author writes
// only domain logic: a Hooks value whose Reconcile drives the world toward the
// spec, records what it saw in the status in memory, and returns a Result
// (Done, RequeueAfter, Waiting, WaitingForChange, Retry, Terminal).
//
// Each pass reads the object, runs Finalize when it is being deleted, honours
// AnnotationPaused, keeps the finalizer, runs Default, Validate and Reconcile,
// derives Ready, Reconciling and Stalled, and writes the status once, only if
// it changed, as a server-side apply of the fields it owns. Children and
// Workflow write children only when a field set differs (the child*.go
// files: EnsureChild reads, decides, then writes).
//
// docs/reconciler.md is the reference: the pass step by step, events, options,
// the requirements on the kind, RBAC, and how it relates to newer
// controller-runtime pieces.
//
// Footguns:
//   - Reconcile must not write its own object; set status fields in memory
//     and let the Reconciler write them once.
//   - Finalize must be idempotent; it runs again after any failure.
//   - SetupWithManager's default predicates drop status-only updates and
//     resyncs of the kind. A controller that reacts to another controller's
//     status on its own object needs WithPredicates.
//   - The status's conditions must be a map list keyed by type, or other
//     controllers' conditions are replaced (SetupWithManager checks the CRD:
//     ErrStatusSchema).
//   - Do not strip metadata.managedFields in a cache transform; use
//     KeepManagedFieldsOf.
package reconcile

// Package ownership manages the two kinds of metadata an operator uses to tie
// objects together and to clean up after them: owner references and
// finalizers.
//
// # Owner references
//
// An owner reference on a dependent names an owner by API group, kind, name
// and UID. The garbage collector deletes a dependent once all its owners are
// gone. At most one reference may be the controller (controller=true): the
// object whose controller manages the dependent. SetControllerReference,
// SetOwnerReference, HasOwnerReference, RemoveOwnerReference and
// IsControlledBy work on the dependent in memory; persist it yourself with
// Create, Update or Patch. References match by group, kind, name and UID, so
// an owner deleted and recreated under the same name is a different owner.
//
// The API server does not check that an owner exists, so a bad reference is
// accepted and the garbage collector later deletes the dependent. This
// package therefore refuses the two invalid shapes before anything is
// written:
//
//   - a namespaced owner of a dependent in another namespace
//     (ErrCrossNamespace);
//   - a namespaced owner of a cluster-scoped dependent
//     (ErrClusterScopedDependent).
//
// Scope is read from the objects, without a RESTMapper: an owner with a
// namespace is namespaced, a dependent without one is cluster-scoped.
// Footgun: set the dependent's namespace before calling, or a namespaced
// dependent is taken for a cluster-scoped one. Cluster-scoped owners may own
// anything.
//
// An object controlled by someone else yields an *AlreadyControlledError
// (use errors.As); reconcile.EnsureChild reports an existing object without
// a controller, which it does not adopt unless asked, as a
// *NotControlledError. IsConflict tells either apart from other errors.
// Adopt persists a controller reference on an orphan whose labels match a
// selector, the way built-in controllers adopt the Pods they select.
//
// # Finalizers
//
// A finalizer holds an object that is being deleted (deletionTimestamp set)
// until every finalizer is removed. EnsureFinalizer and RemoveFinalizer
// persist the change at once with a JSON merge patch carrying the object's
// resourceVersion. A merge patch replaces the whole finalizers list, so
// without that optimistic lock a writer working from an old copy would drop
// a finalizer someone else added meanwhile. On a conflict they re-read the
// object and retry (client-go retry.DefaultRetry). Both are idempotent: an
// object already in the desired state costs no request. On success the
// object passed in is replaced with the server's copy, so its
// resourceVersion is fresh for a later status update.
//
// Cleanup itself belongs to the reconciler: with reconcile.Reconciler it is
// the hooks' Finalize method, which the Reconciler calls once the object is
// being deleted and before it removes the finalizer (the Reconciler calls
// EnsureFinalizer and RemoveFinalizer itself). A hand-written reconciler
// uses the pieces like this:
//
//	if obj.GetDeletionTimestamp().IsZero() {
//		if _, err := ownership.EnsureFinalizer(ctx, c, obj, finalizer); err != nil {
//			return ctrl.Result{}, err
//		}
//		// ... normal reconcile ...
//		return ctrl.Result{}, nil
//	}
//	if err := cleanUp(ctx, obj); err != nil {
//		return ctrl.Result{}, err // retried: cleanUp must be idempotent
//	}
//	_, err := ownership.RemoveFinalizer(ctx, c, obj, finalizer)
//	return ctrl.Result{}, err
//
// Footguns:
//
//   - The helpers need an object read from the API server: without a
//     resourceVersion there is no lock and they return an error.
//   - With a cache-backed client the re-read after a conflict can be stale,
//     so retries may all conflict; requeue on the returned Conflict error.
//   - Cleanup runs again after any failure, including the parts that
//     already succeeded; make it idempotent.
//   - envtest runs no garbage collector: owner references can be checked
//     there, but cascading deletion cannot.
package ownership

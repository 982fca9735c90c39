package reconcile

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// KeepManagedFieldsOf returns a cache transform for the Reconciler's own
// kind (cache.ByObject.Transform) that keeps, of each cached object's
// metadata.managedFields, only the entries of fieldOwner.
//
// The Reconciler reads one thing from managedFields: which conditions its
// field owner applied to the status, so that each status write sends them
// all again and never sends another controller's. Every other entry is
// memory the cache holds for nothing: one per client that wrote the object
// (a person's kubectl, a GitOps tool, other controllers), each with the set
// of fields that client owns. cache.TransformStripManagedFields drops them
// all, and must not be used for the Reconciler's kind.
//
// Pass the Reconciler's field owner (WithFieldOwner, or "opkit-<kind>" by
// default; Reconciler.FieldOwner returns it).
//
// Footgun: with any other name the Reconciler reads that it owns no
// condition, and its next status write drops every condition it does not
// change in that pass (server-side apply removes the fields a manager
// stops sending). Changing the field owner means changing both.
//
// Objects other than metav1.Object (the informer's tombstones of deleted
// objects) pass through unchanged.
func KeepManagedFieldsOf(fieldOwner string) toolscache.TransformFunc {
	return func(in any) (any, error) {
		obj, ok := in.(metav1.Object)
		if !ok {
			return in, nil
		}
		entries := obj.GetManagedFields()
		var kept []metav1.ManagedFieldsEntry
		for _, e := range entries {
			if e.Manager == fieldOwner {
				kept = append(kept, e)
			}
		}
		if len(kept) != len(entries) {
			obj.SetManagedFields(kept)
		}
		return in, nil
	}
}

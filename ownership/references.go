package ownership

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// SetControllerReference makes owner the controller of obj: it adds (or
// updates) an owner reference to owner with controller=true and
// blockOwnerDeletion=true. It changes obj in memory only; persist obj with
// Create, Update or Patch.
//
// It returns an *AlreadyControlledError when obj already has a controller
// reference to another object, including an earlier incarnation of owner
// with the same name but a different UID. It returns an error wrapping
// ErrCrossNamespace, ErrClusterScopedDependent or ErrOwnerNotPersisted when
// the reference would be invalid (see the package documentation for how
// scope is decided), and an error when scheme does not know owner's type.
// On error obj is unchanged.
//
// Footgun: blockOwnerDeletion=true requires the operator to have "update"
// permission on the owner's "finalizers" subresource on clusters that enable
// the OwnerReferencesPermissionEnforcement admission plugin.
func SetControllerReference(owner, obj client.Object, scheme *runtime.Scheme) error {
	ref, err := referenceTo(owner, obj, scheme)
	if err != nil {
		return fmt.Errorf("setting controller reference: %w", err)
	}
	if existing := metav1.GetControllerOfNoCopy(obj); existing != nil && !sameObject(*existing, ref) {
		return &AlreadyControlledError{Object: obj, Owner: *existing}
	}
	ref.Controller = new(true)
	ref.BlockOwnerDeletion = new(true)
	upsert(obj, ref)
	return nil
}

// SetOwnerReference adds (or updates) a non-controller owner reference to
// owner on obj. When obj already references owner, the reference's
// apiVersion and kind are refreshed and its controller and
// blockOwnerDeletion flags are kept, so calling SetOwnerReference never
// demotes an existing controller reference. It changes obj in memory only.
//
// It returns the same validation errors as SetControllerReference; on error
// obj is unchanged.
func SetOwnerReference(owner, obj client.Object, scheme *runtime.Scheme) error {
	ref, err := referenceTo(owner, obj, scheme)
	if err != nil {
		return fmt.Errorf("setting owner reference: %w", err)
	}
	if i := indexOf(obj.GetOwnerReferences(), ref); i >= 0 {
		old := obj.GetOwnerReferences()[i]
		ref.Controller, ref.BlockOwnerDeletion = old.Controller, old.BlockOwnerDeletion
	}
	upsert(obj, ref)
	return nil
}

// HasOwnerReference reports whether obj has an owner reference (controller
// or not) to owner. A reference matches when its API group, kind, name and
// UID equal owner's; the version is ignored, because references written
// with an older version of owner's API still point at the same object.
//
// It returns an error when owner has no name or UID (ErrOwnerNotPersisted)
// or scheme does not know owner's type. Namespaces are not checked.
func HasOwnerReference(owner, obj client.Object, scheme *runtime.Scheme) (bool, error) {
	ref, err := ownerRef(owner, scheme)
	if err != nil {
		return false, fmt.Errorf("looking up owner reference: %w", err)
	}
	return indexOf(obj.GetOwnerReferences(), ref) >= 0, nil
}

// RemoveOwnerReference removes every owner reference to owner from obj,
// matching as HasOwnerReference does, and reports whether it removed any. It
// changes obj in memory only. It returns an error when owner has no name or
// UID (ErrOwnerNotPersisted) or scheme does not know owner's type.
func RemoveOwnerReference(owner, obj client.Object, scheme *runtime.Scheme) (removed bool, err error) {
	ref, err := ownerRef(owner, scheme)
	if err != nil {
		return false, fmt.Errorf("removing owner reference: %w", err)
	}
	refs := obj.GetOwnerReferences()
	kept := slices.DeleteFunc(slices.Clone(refs), func(r metav1.OwnerReference) bool { return sameObject(r, ref) })
	if len(kept) == len(refs) {
		return false, nil
	}
	if len(kept) == 0 {
		kept = nil
	}
	obj.SetOwnerReferences(kept)
	return true, nil
}

// IsControlledBy reports whether obj's controller reference points at owner,
// comparing UIDs only (UIDs are unique across kinds and time). It is false
// when obj has no controller or owner has no UID.
func IsControlledBy(obj, owner client.Object) bool {
	ctrl := metav1.GetControllerOfNoCopy(obj)
	return ctrl != nil && owner.GetUID() != "" && ctrl.UID == owner.GetUID()
}

// referenceTo validates that owner may own obj and returns a plain reference
// to owner (no controller or blockOwnerDeletion flags).
func referenceTo(owner, obj client.Object, scheme *runtime.Scheme) (metav1.OwnerReference, error) {
	ref, err := ownerRef(owner, scheme)
	if err != nil {
		return ref, err
	}
	if err := checkScope(owner, obj); err != nil {
		return ref, err
	}
	return ref, nil
}

// ownerRef builds a reference to owner, resolving its GVK through scheme.
func ownerRef(owner client.Object, scheme *runtime.Scheme) (metav1.OwnerReference, error) {
	if owner.GetName() == "" || owner.GetUID() == "" {
		return metav1.OwnerReference{}, fmt.Errorf("%s %s: %w", kindOf(owner), describe(owner), ErrOwnerNotPersisted)
	}
	gvk, err := apiutil.GVKForObject(owner, scheme)
	if err != nil {
		return metav1.OwnerReference{}, fmt.Errorf("resolving owner's kind (add its type to the scheme): %w", err)
	}
	return metav1.OwnerReference{
		APIVersion: gvk.GroupVersion().String(),
		Kind:       gvk.Kind,
		Name:       owner.GetName(),
		UID:        owner.GetUID(),
	}, nil
}

// checkScope applies the namespace rules for owner references. Scope is
// read from the namespace fields: an owner with a namespace is namespaced,
// a dependent without one is cluster-scoped.
func checkScope(owner, obj client.Object) error {
	ownerNS := owner.GetNamespace()
	if ownerNS == "" {
		return nil // cluster-scoped owners may own anything
	}
	switch objNS := obj.GetNamespace(); objNS {
	case ownerNS:
		return nil
	case "":
		return fmt.Errorf("%s %s owned by %s %s: %w", kindOf(obj), describe(obj), kindOf(owner), describe(owner), ErrClusterScopedDependent)
	default:
		return fmt.Errorf("%s %s owned by %s %s: %w", kindOf(obj), describe(obj), kindOf(owner), describe(owner), ErrCrossNamespace)
	}
}

// sameObject reports whether two references point at the same object:
// equal API group, kind, name and UID.
func sameObject(a, b metav1.OwnerReference) bool {
	if a.Kind != b.Kind || a.Name != b.Name || a.UID != b.UID {
		return false
	}
	ga, err := schema.ParseGroupVersion(a.APIVersion)
	if err != nil {
		return false
	}
	gb, err := schema.ParseGroupVersion(b.APIVersion)
	if err != nil {
		return false
	}
	return ga.Group == gb.Group
}

func indexOf(refs []metav1.OwnerReference, ref metav1.OwnerReference) int {
	return slices.IndexFunc(refs, func(r metav1.OwnerReference) bool { return sameObject(r, ref) })
}

// upsert replaces obj's reference to the same object as ref, or appends ref.
// It writes a new slice so that callers sharing the old one are unaffected.
func upsert(obj client.Object, ref metav1.OwnerReference) {
	refs := slices.Clone(obj.GetOwnerReferences())
	if i := indexOf(refs, ref); i >= 0 {
		refs[i] = ref
	} else {
		refs = append(refs, ref)
	}
	obj.SetOwnerReferences(refs)
}

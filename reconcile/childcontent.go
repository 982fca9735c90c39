package reconcile

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// matches reports whether current carries every field desired sets.
// Metadata is compared for labels, annotations and owner references (each
// of desired's, by UID, must be on current: someone removing a second
// owner that keeps the child from the garbage collector is undone), and
// status not at all.
func matches(desired, current client.Object) bool {
	if !equality.Semantic.DeepDerivative(desired.GetLabels(), current.GetLabels()) ||
		!equality.Semantic.DeepDerivative(desired.GetAnnotations(), current.GetAnnotations()) {
		return false
	}
	for _, want := range desired.GetOwnerReferences() {
		if !slices.ContainsFunc(current.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == want.UID }) {
			return false
		}
	}
	if du, ok := desired.(*unstructured.Unstructured); ok {
		cu, ok := current.(*unstructured.Unstructured)
		if !ok {
			return false
		}
		return equality.Semantic.DeepDerivative(bodyOf(du.Object), bodyOf(cu.Object))
	}
	// Typed objects: DeepDerivative's "unset" rules (nil pointers, empty
	// strings) need the Go types. Compare every top-level field but
	// metadata and status, in place.
	dv, cv := reflect.ValueOf(desired), reflect.ValueOf(current)
	if dv.Kind() != reflect.Pointer || dv.Type() != cv.Type() || dv.Elem().Kind() != reflect.Struct {
		return false
	}
	dv, cv = dv.Elem(), cv.Elem()
	t := dv.Type()
	for i := range t.NumField() {
		switch t.Field(i).Name {
		case "TypeMeta", "ObjectMeta", "Status":
			continue
		}
		if !t.Field(i).IsExported() {
			continue
		}
		if !equality.Semantic.DeepDerivative(dv.Field(i).Interface(), cv.Field(i).Interface()) {
			return false
		}
	}
	return true
}

// newLike returns a new, empty object of obj's type.
func newLike(obj client.Object) (client.Object, error) {
	if _, ok := obj.(*unstructured.Unstructured); ok {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
		return u, nil
	}
	t := reflect.TypeOf(obj)
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("%T is not a pointer to a struct", obj)
	}
	o, ok := reflect.New(t.Elem()).Interface().(client.Object)
	if !ok {
		return nil, fmt.Errorf("%T is not a client.Object", obj)
	}
	return o, nil
}

// bodyOf returns unstructured content without metadata, status and type
// fields.
func bodyOf(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch k {
		case "metadata", "status", "apiVersion", "kind":
		default:
			out[k] = v
		}
	}
	return out
}

// applyContent converts desired into the unstructured content of an apply
// request: no status, no server-set metadata, no nulls, and no digest
// label (a desired object EnsureChild returned carries it; the caller sets
// the new one). desired is left as it was: an unstructured one is copied.
func applyContent(desired client.Object, apiVersion, kind string) (*unstructured.Unstructured, error) {
	var m map[string]any
	if u, ok := desired.(runtime.Unstructured); ok {
		// ToUnstructured would return the content itself, not a copy.
		// Its maps and lists are copied, its other values shared: a
		// hand-built content may hold Go values DeepCopyJSON refuses.
		m = prunedCopy(u.UnstructuredContent()).(map[string]any)
	} else {
		var err error
		if m, err = runtime.DefaultUnstructuredConverter.ToUnstructured(desired); err != nil {
			return nil, fmt.Errorf("converting %s: %w", desired.GetName(), err)
		}
		pruneNulls(m)
	}
	delete(m, "status")
	if meta, ok := m["metadata"].(map[string]any); ok {
		for _, k := range []string{"creationTimestamp", "resourceVersion", "uid", "generation", "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"} {
			delete(meta, k)
		}
		if labels, ok := meta["labels"].(map[string]any); ok {
			if _, tagged := labels[LabelAppliedDigest]; tagged {
				delete(labels, LabelAppliedDigest)
				if len(labels) == 0 {
					delete(meta, "labels")
				}
			}
		}
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	return u, nil
}

// appliedDigest returns a short digest of the desired object, without the
// digest label itself (encoding/json writes struct fields in order and sorts
// map keys, so equal objects give equal digests). The digest is 24 hex
// digits, a valid label value.
func appliedDigest(desired client.Object) (string, error) {
	if labels := desired.GetLabels(); labels != nil {
		if old, ok := labels[LabelAppliedDigest]; ok {
			delete(labels, LabelAppliedDigest)
			defer func() { labels[LabelAppliedDigest] = old }()
		}
	}
	b, err := json.Marshal(desired)
	if err != nil {
		return "", fmt.Errorf("hashing %s: %w", desired.GetName(), err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12]), nil
}

// prunedCopy returns v with its maps and lists copied and their null
// values left out (as pruneNulls); every other value is shared.
func prunedCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			if e != nil {
				out[k] = prunedCopy(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = prunedCopy(e)
		}
		return out
	}
	return v
}

// pruneNulls removes null values, which typed structs produce for unset
// times (creationTimestamp: null) and which apply would otherwise claim.
func pruneNulls(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if e == nil {
				delete(t, k)
				continue
			}
			pruneNulls(e)
		}
	case []any:
		for _, e := range t {
			pruneNulls(e)
		}
	}
}

// copyInto makes dst a copy of src, which must be of the same type.
func copyInto(src, dst client.Object) error {
	sv, dv := reflect.ValueOf(src), reflect.ValueOf(dst)
	if sv.Type() != dv.Type() || sv.Kind() != reflect.Pointer {
		return fmt.Errorf("copying %T into %T: types differ", src, dst)
	}
	dv.Elem().Set(sv.Elem())
	return nil
}

package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// writeStatus writes obj's status if it differs from before's, and reports
// whether it sent a request.
//
// The write is a server-side apply of the status subresource with the
// Reconciler's field owner and forced ownership. It sends only what this
// controller changed in this pass or already owns (read from
// metadata.managedFields): top-level status fields, and conditions by type.
// A field or condition another writer owns is never sent, so a pass on a
// stale read neither takes it over nor reverts it; and no resourceVersion
// is sent, so a concurrent write of labels, spec or another writer's status
// causes no conflict and no lost update.
//
// This relies on the conditions list being a map list keyed by type
// (+listType=map, +listMapKey=type, as API conventions require); with an
// atomic list, the apply would replace other controllers' conditions.
func (r *Reconciler[T]) writeStatus(ctx context.Context, before, after T) (bool, error) {
	if statusEqual(before, after) {
		return false, nil
	}

	newStatus, err := statusMap(after)
	if err != nil {
		return false, err
	}

	ownedFields, owned := ownedStatus(after.GetManagedFields(), r.opts.fieldOwner)
	for t := range changedConditionTypes(before.GetConditions(), after.GetConditions()) {
		owned[t] = true
	}
	// No managedFields at all means a cache transform stripped them:
	// omitting a field owned unseen would delete it, so send them all.
	stripped := len(after.GetManagedFields()) == 0
	apply := make(map[string]any, len(newStatus))
	var oldStatus map[string]any // converted only for a field not owned
	for k, v := range newStatus {
		if k == "conditions" {
			continue
		}
		if !stripped && !ownedFields[k] {
			if oldStatus == nil {
				if oldStatus, err = statusMap(before); err != nil {
					return false, err
				}
			}
			if equality.Semantic.DeepEqual(v, oldStatus[k]) {
				continue
			}
		}
		apply[k] = v
	}
	var conds []any
	for _, c := range after.GetConditions() {
		if owned[c.Type] {
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&c)
			if err != nil {
				return false, fmt.Errorf("converting condition %s: %w", c.Type, err)
			}
			conds = append(conds, m)
		}
	}
	if len(conds) > 0 {
		apply["conditions"] = conds
	}

	u := &unstructured.Unstructured{Object: map[string]any{"status": apply}}
	u.SetGroupVersionKind(r.gvk)
	u.SetName(after.GetName())
	u.SetNamespace(after.GetNamespace())
	err = r.client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner(r.opts.fieldOwner), client.ForceOwnership)
	if err != nil {
		if apierrors.IsNotFound(err) {
			// Deleted during the pass: there is no status left to write.
			return true, nil
		}
		return true, statusSchemaError(err, r.gvk, client.ObjectKeyFromObject(after))
	}
	// Keep what later steps read current: the resourceVersion (read-your-
	// writes) and managedFields (which conditions are ours). The rest of the
	// response is what we sent.
	after.SetResourceVersion(u.GetResourceVersion())
	after.SetManagedFields(u.GetManagedFields())
	return true, nil
}

// statusEqual reports whether a and b have semantically equal status
// fields. Typed objects are compared field by field without conversion; an
// object without a Status field is compared through its unstructured form.
func statusEqual(a, b runtime.Object) bool {
	av, bv := reflect.ValueOf(a), reflect.ValueOf(b)
	if av.Kind() == reflect.Pointer && bv.Kind() == reflect.Pointer && av.Type() == bv.Type() && av.Elem().Kind() == reflect.Struct {
		if as, bs := av.Elem().FieldByName("Status"), bv.Elem().FieldByName("Status"); as.IsValid() && bs.IsValid() {
			return equality.Semantic.DeepEqual(as.Interface(), bs.Interface())
		}
	}
	am, err1 := statusMap(a)
	bm, err2 := statusMap(b)
	return err1 == nil && err2 == nil && equality.Semantic.DeepEqual(am, bm)
}

// statusMap returns obj's status as unstructured content (nil when absent).
func statusMap(obj runtime.Object) (map[string]any, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %T: %w", obj, err)
	}
	s, _ := m["status"].(map[string]any)
	return s, nil
}

// changedConditionTypes returns the types whose condition was added, removed
// or changed between before and after.
func changedConditionTypes(before, after []metav1.Condition) map[string]bool {
	changed := map[string]bool{}
	old := make(map[string]metav1.Condition, len(before))
	for _, c := range before {
		old[c.Type] = c
	}
	for _, c := range after {
		if o, ok := old[c.Type]; !ok || !conditionEqual(o, c) {
			changed[c.Type] = true
		}
		delete(old, c.Type)
	}
	for t := range old {
		changed[t] = true
	}
	return changed
}

func conditionEqual(a, b metav1.Condition) bool {
	return a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message &&
		a.ObservedGeneration == b.ObservedGeneration && a.LastTransitionTime.Equal(&b.LastTransitionTime)
}

// ownedStatus returns the top-level status fields other than conditions,
// and the condition types, that manager owns on the status subresource
// according to managedFields.
func ownedStatus(entries []metav1.ManagedFieldsEntry, manager string) (fields, conditions map[string]bool) {
	fields, conditions = map[string]bool{}, map[string]bool{}
	for _, e := range entries {
		if e.Manager != manager || e.Subresource != "status" || e.FieldsV1 == nil {
			continue
		}
		var set struct {
			Status map[string]json.RawMessage `json:"f:status"`
		}
		if err := json.Unmarshal(e.FieldsV1.GetRawBytes(), &set); err != nil {
			continue
		}
		for k, v := range set.Status {
			name, ok := strings.CutPrefix(k, "f:")
			if !ok {
				continue
			}
			if name != "conditions" {
				fields[name] = true
				continue
			}
			var conds map[string]json.RawMessage
			if json.Unmarshal(v, &conds) != nil {
				continue
			}
			for ck := range conds {
				key, ok := strings.CutPrefix(ck, "k:")
				if !ok {
					continue
				}
				var id struct {
					Type string `json:"type"`
				}
				if json.Unmarshal([]byte(key), &id) == nil && id.Type != "" {
					conditions[id.Type] = true
				}
			}
		}
	}
	return fields, conditions
}

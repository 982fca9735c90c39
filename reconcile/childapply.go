package reconcile

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// EnsureChildApplied is EnsureChild for a client-go apply configuration, such
// as appsv1ac.Deployment(name, namespace).WithSpec(...): only the fields
// ac sets are applied and owned, where a typed struct also sends (and
// owns) its zero-valued fields without omitempty. The child is read from
// the cache as its typed kind, and returned live as that kind.
//
// ac must carry apiVersion, kind, name and, if namespaced, the owner's
// namespace, as the generated constructors set them.
func (c *Children) EnsureChildApplied(ctx context.Context, owner client.Object, ac runtime.ApplyConfiguration, opts ...EnsureOption) (client.Object, ChildWrite, error) {
	u, typed, err := c.fromApplyConfiguration(ac)
	if err != nil {
		return nil, ChildUnchanged, err
	}
	op, err := c.EnsureChild(ctx, owner, u, append(opts, func(o *childOptions) { o.readAs = typed })...)
	if err != nil {
		return nil, op, err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, typed); err != nil {
		return nil, op, fmt.Errorf("reading %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return typed, op, nil
}

// fromApplyConfiguration returns ac as unstructured content and a new
// typed object of its kind.
func (c *Children) fromApplyConfiguration(ac runtime.ApplyConfiguration) (*unstructured.Unstructured, client.Object, error) {
	if ac == nil {
		return nil, nil, fmt.Errorf("reconcile.EnsureChildApplied: apply configuration is nil")
	}
	b, err := json.Marshal(ac)
	if err != nil {
		return nil, nil, fmt.Errorf("reconcile.EnsureChildApplied: encoding %T: %w", ac, err)
	}
	// UnmarshalJSON, not json.Unmarshal: integers must be int64, as
	// in the cached object converted for the comparison.
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		return nil, nil, fmt.Errorf("reconcile.EnsureChildApplied: %T needs apiVersion and kind (build it with its generated constructor): %w", ac, err)
	}
	gvk := u.GroupVersionKind()
	obj, err := c.scheme.New(gvk)
	if err != nil {
		return nil, nil, fmt.Errorf("reconcile.EnsureChildApplied: %w", err)
	}
	typed, ok := obj.(client.Object)
	if !ok {
		return nil, nil, fmt.Errorf("reconcile.EnsureChildApplied: %v is not a client.Object", gvk)
	}
	return u, typed, nil
}

// getAs reads key into typed through r and stores it in current as
// unstructured content of kind gvk.
func getAs(ctx context.Context, r client.Reader, key client.ObjectKey, typed client.Object, current *unstructured.Unstructured, gvk schema.GroupVersionKind) error {
	if err := r.Get(ctx, key, typed); err != nil {
		return err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(typed)
	if err != nil {
		return fmt.Errorf("converting %s: %w", key, err)
	}
	current.SetUnstructuredContent(m)
	current.SetGroupVersionKind(gvk)
	return nil
}

package reconcile

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/opkit-dev/opkit/ownership"
)

// ErrChildReplaced is returned (wrapped) by DeleteChild when the object of
// the UID given was replaced by another of its name: nothing was deleted,
// and a decision made on the old one should be made again.
var ErrChildReplaced = errors.New("child replaced since it was read")

// DeleteChild deletes obj (identified by its name and namespace) if it exists
// and owner controls it. It reads through the cache first, so deleting a child
// that is already gone sends no request. Set obj's UID to the one the
// decision was made on: without it, a replacement created since under the
// same name is deleted; with it, that is left and ErrChildReplaced
// returned. An object controlled by another
// owner is left alone and reported with *ownership.AlreadyControlledError,
// one without a controller with *ownership.NotControlledError
// (ownership.IsConflict reports either).
func (c *Children) DeleteChild(ctx context.Context, owner, obj client.Object) (ChildWrite, error) {
	seen := obj.GetUID()
	if err := c.client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		if apierrors.IsNotFound(err) {
			return ChildUnchanged, nil
		}
		return ChildUnchanged, fmt.Errorf("reading %s: %w", obj.GetName(), err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return ChildUnchanged, nil
	}
	if seen != "" && obj.GetUID() != seen {
		return ChildUnchanged, fmt.Errorf("%w: %s has UID %s, not %s", ErrChildReplaced, obj.GetName(), obj.GetUID(), seen)
	}
	if !ownership.IsControlledBy(obj, owner) {
		if ctl := metav1.GetControllerOf(obj); ctl != nil {
			return ChildUnchanged, &ownership.AlreadyControlledError{Object: obj, Owner: *ctl}
		}
		return ChildUnchanged, &ownership.NotControlledError{Object: obj}
	}
	if gvk, err := apiutil.GVKForObject(obj, c.scheme); err == nil {
		c.applied.forget(childKey{gvk: gvk, key: client.ObjectKeyFromObject(obj)})
	}
	uid := obj.GetUID()
	err := c.client.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if seen != "" && apierrors.IsConflict(err) {
		// The cache still showed the object seen; the server has its
		// replacement.
		return ChildUnchanged, fmt.Errorf("%w: %s: %w", ErrChildReplaced, obj.GetName(), err)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		kind := obj.GetObjectKind().GroupVersionKind().Kind
		if gvk, gerr := apiutil.GVKForObject(obj, c.scheme); gerr == nil {
			kind = gvk.Kind
		}
		return ChildUnchanged, &ChildWriteError{Write: ChildDeleted, Kind: kind, Key: client.ObjectKeyFromObject(obj), Err: err}
	}
	return ChildDeleted, nil
}

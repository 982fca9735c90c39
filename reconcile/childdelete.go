package reconcile

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/opkit-dev/opkit/ownership"
)

// ErrChildReplaced is returned (wrapped) by DeleteChild and EvictChild when
// the object of the UID given was replaced by another of its name: nothing
// was deleted, and a decision made on the old one should be made again.
var ErrChildReplaced = errors.New("child replaced since it was read")

// ErrNoDisruptionAllowed is returned (wrapped) by EvictChild when a
// disruption budget of the pod allows no eviction now (HTTP 429): the pod
// is left; try again later.
var ErrNoDisruptionAllowed = errors.New("the disruption budget allows no eviction now")

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
	if gone, err := c.readOwned(ctx, owner, obj); gone || err != nil {
		return ChildUnchanged, err
	}
	uid := obj.GetUID()
	err := c.client.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	return c.written(obj, ChildDeleted, seen, err)
}

// EvictChild evicts pod through the Eviction API if it exists and owner
// controls it, so that the pod's disruption budget decides, as it does for
// a node drain. It reads and checks pod as DeleteChild does. A budget
// without room gives ErrNoDisruptionAllowed; so does a replacement the
// server finds (UID precondition) if it is unready under a budget, and
// ErrChildReplaced otherwise. Footguns, from the API server (see
// docs/reconciler.md): a 429 with Retry-After keeps client-go retrying
// for up to 100 s; a Ready pod replaced behind a stale cache still uses
// up a disruption for up to 2 minutes; a pod two budgets select is never
// evicted (500).
func (c *Children) EvictChild(ctx context.Context, owner client.Object, pod *corev1.Pod) (ChildWrite, error) {
	seen := pod.GetUID()
	if gone, err := c.readOwned(ctx, owner, pod); gone || err != nil {
		return ChildUnchanged, err
	}
	uid := pod.GetUID()
	eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}}
	err := c.client.SubResource("eviction").Create(ctx, pod, eviction)
	if apierrors.IsTooManyRequests(err) {
		return ChildUnchanged, fmt.Errorf("%w: evicting %s: %w", ErrNoDisruptionAllowed, pod.Name, err)
	}
	return c.written(pod, ChildEvicted, seen, err)
}

// readOwned reads obj by its name, and reports it gone if it is absent
// or being deleted. It refuses an object of another UID than obj's
// (when set) or that owner does not control.
func (c *Children) readOwned(ctx context.Context, owner, obj client.Object) (gone bool, err error) {
	seen := obj.GetUID()
	if err := c.client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("reading %s: %w", obj.GetName(), err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return true, nil
	}
	if seen != "" && obj.GetUID() != seen {
		return false, fmt.Errorf("%w: %s has UID %s, not %s", ErrChildReplaced, obj.GetName(), obj.GetUID(), seen)
	}
	if !ownership.IsControlledBy(obj, owner) {
		if ctl := metav1.GetControllerOf(obj); ctl != nil {
			return false, &ownership.AlreadyControlledError{Object: obj, Owner: *ctl}
		}
		return false, &ownership.NotControlledError{Object: obj}
	}
	if gvk, err := apiutil.GVKForObject(obj, c.scheme); err == nil {
		c.applied.forget(childKey{gvk: gvk, key: client.ObjectKeyFromObject(obj)})
	}
	return false, nil
}

// written is the result of write, sent on obj (read, of UID seen when
// that was given): a precondition's conflict is a replacement, a missing
// object one already gone.
func (c *Children) written(obj client.Object, write ChildWrite, seen types.UID, err error) (ChildWrite, error) {
	switch {
	case err == nil:
		return write, nil
	case apierrors.IsNotFound(err):
		return write, nil
	case seen != "" && apierrors.IsConflict(err):
		// The cache still showed the object seen; the server has its
		// replacement.
		return ChildUnchanged, fmt.Errorf("%w: %s: %w", ErrChildReplaced, obj.GetName(), err)
	}
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	if gvk, gerr := apiutil.GVKForObject(obj, c.scheme); gerr == nil {
		kind = gvk.Kind
	}
	return ChildUnchanged, &ChildWriteError{Write: write, Kind: kind, Key: client.ObjectKeyFromObject(obj), Err: err}
}

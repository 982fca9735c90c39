package reconcile

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/opkit-dev/opkit/ownership"
)

// EnsureChildCreated makes the child described by desired exist and be
// controlled by owner, creating it once and never changing it afterwards:
// for a Job, or any object whose spec is immutable or whose re-application
// would redo work. On return desired holds the live object when the cache
// has it. It refuses an object of that name that owner does not control,
// as EnsureChild does (no adoption).
//
// Footgun: a child deleted later (a Job's ttlSecondsAfterFinished) is
// created again by the next call. To run something once, record that it
// finished in the owner's status and stop calling (Dependent.Wanted).
func (c *Children) EnsureChildCreated(ctx context.Context, owner, desired client.Object) (ChildWrite, error) {
	if desired.GetName() == "" {
		return ChildUnchanged, fmt.Errorf("reconcile.EnsureChildCreated: desired %T has no metadata.name", desired)
	}
	if err := ownership.SetControllerReference(owner, desired, c.scheme); err != nil {
		return ChildUnchanged, fmt.Errorf("reconcile.EnsureChildCreated %s: %w", desired.GetName(), err)
	}
	gvk, err := apiutil.GVKForObject(desired, c.scheme)
	if err != nil {
		return ChildUnchanged, fmt.Errorf("reconcile.EnsureChildCreated %s: %w", desired.GetName(), err)
	}
	fieldOwner, err := c.fieldOwnerFor(ctx)
	if err != nil {
		return ChildUnchanged, fmt.Errorf("reconcile.EnsureChildCreated %s %s: %w", gvk.Kind, desired.GetName(), err)
	}
	current, err := newLike(desired)
	if err != nil {
		return ChildUnchanged, err
	}
	key := client.ObjectKeyFromObject(desired)
	ck := childKey{gvk: gvk, key: key}
	err = c.client.Get(ctx, key, current)
	switch {
	case err == nil:
		c.applied.seen(ck, current)
	case !apierrors.IsNotFound(err):
	case unseenCreatesFrom(ctx).unseen(ck):
		return ChildUnchanged, nil // ours, not in the cache yet (childunseen.go)
	case c.applied.wasCreated(ck) && c.uncached != nil:
		// Ours and not cached yet, or deleted since: a GET tells.
		err = c.uncached.Get(ctx, key, current)
	}
	if apierrors.IsNotFound(err) {
		digest, derr := appliedDigest(desired)
		if derr != nil {
			return ChildUnchanged, derr
		}
		op, cerr := c.create(ctx, desired, ck, digest, fieldOwner)
		if !apierrors.IsAlreadyExists(cerr) {
			return op, cerr
		}
		// It exists, unseen by the cache: whose is it?
		var reader client.Reader = c.client
		if c.uncached != nil {
			reader = c.uncached
		}
		err = reader.Get(ctx, key, current)
		if apierrors.IsNotFound(err) {
			return ChildUnchanged, nil
		}
	}
	if err != nil {
		return ChildUnchanged, fmt.Errorf("reading %s %s: %w", gvk.Kind, desired.GetName(), err)
	}
	if ctl := metav1.GetControllerOf(current); ctl == nil {
		return ChildUnchanged, &ownership.NotControlledError{Object: current}
	} else if ctl.UID != owner.GetUID() {
		return ChildUnchanged, &ownership.AlreadyControlledError{Object: current, Owner: *ctl}
	}
	return ChildUnchanged, copyInto(current, desired)
}

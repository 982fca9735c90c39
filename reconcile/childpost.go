package reconcile

import (
	"context"
	"fmt"
	"maps"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/csaupgrade"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// create POSTs desired, with the digest label, as fieldOwner, and on
// success makes desired the server's response. An existing object of
// that name is reported with the API server's AlreadyExists error,
// unwrapped, and nothing is written.
func (c *Children) create(ctx context.Context, desired client.Object, ck childKey, digest, fieldOwner string) (ChildWrite, error) {
	obj, ok := desired.DeepCopyObject().(client.Object)
	if !ok {
		return ChildUnchanged, fmt.Errorf("copying %T: not a client.Object", desired)
	}
	content, err := applyContent(desired, ck.gvk.GroupVersion().String(), ck.gvk.Kind)
	if err != nil {
		return ChildUnchanged, err
	}
	shape, err := fieldsShape(content.Object)
	if err != nil {
		return ChildUnchanged, err
	}
	labels := maps.Clone(obj.GetLabels())
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelAppliedDigest] = digestLabel(digest, shape)
	stampSlot(ctx, labels)
	obj.SetLabels(labels)
	unseen := unseenCreatesFrom(ctx)
	token := unseen.begin(ck)
	if err := c.client.Create(ctx, obj, client.FieldOwner(fieldOwner)); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return ChildUnchanged, err
		}
		return ChildUnchanged, &ChildWriteError{Write: ChildCreated, Kind: ck.gvk.Kind, Key: ck.key, Err: err}
	}
	unseen.created(ck, token)
	var response client.Object
	if token != 0 { // only a watched kind's create is ever trusted
		response, _ = obj.DeepCopyObject().(client.Object)
	}
	c.applied.recordCreate(ck, obj.GetUID(), digest, response)
	if err := copyInto(obj, desired); err != nil {
		return ChildCreated, err
	}
	return ChildCreated, nil
}

// upgradeManagedFields makes the fields fieldOwner set by a POST (an
// Update entry of managedFields) part of its apply entry before current is
// applied: fields owned by an update entry are kept when an apply stops
// setting them, so a field the desired child no longer sets would stay.
// It sends a JSON patch of managedFields once per child created by POST,
// before the first update whose shape differs from the POST's
// (childshape.go; client-go's csaupgrade), and reports moved: the apply
// that follows marks the child (movedMark), so that no later update
// comes here. Without an uncached reader EnsureChild never POSTs, and
// there is nothing to upgrade (moved is false). A current without
// managedFields (a cache that strips them) is read again through the
// uncached reader.
func (c *Children) upgradeManagedFields(ctx context.Context, current client.Object, fieldOwner string) (moved bool, err error) {
	if c.uncached == nil {
		return false, nil
	}
	live := current
	if len(current.GetManagedFields()) == 0 {
		fresh, err := newLike(current)
		if err != nil {
			return false, err
		}
		if err := c.uncached.Get(ctx, client.ObjectKeyFromObject(current), fresh); err != nil {
			return false, fmt.Errorf("reading managedFields: %w", err)
		}
		live = fresh
	}
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(live, sets.New(fieldOwner), fieldOwner)
	if err != nil {
		return false, err
	}
	if patch == nil {
		return true, nil
	}
	if err := c.client.Patch(ctx, live, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return false, fmt.Errorf("moving the fields of %s's create to its apply: %w", fieldOwner, err)
	}
	return true, nil
}

package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/internal/workscope"
)

// Handoff wraps inner so that it reconciles only the objects of the
// slots cl's cache holds (Ring.NewCache): a request for another slot's
// object is dropped (one the member caches with a slot label not of its
// name is labelled with its name's), and one for its own runs while the cache holds the
// slot, which it releases only after the passes it admitted ended. A
// pass's context ends when the member's Lease may have run out (renewals
// move that on), so a member that stalled stops before another takes its
// slots.
//
// A request for an object missing from the cache reaches inner only if
// the API server has none either: an object not labelled yet, or of a
// slot just released, is not deleted. That costs a GET of its metadata
// (RBAC: get on the kind), so map functions of other watches should
// return only keys the member holds. obj is the kind's prototype.
func Handoff(cl cluster.Cluster, obj client.Object, inner reconcile.Reconciler) reconcile.Reconciler {
	c := cl.GetClient()
	sc, scOK := cl.GetCache().(*slotCache)
	gvk, gvkErr := apiutil.GVKForObject(obj, cl.GetScheme())
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		if !scOK {
			return reconcile.Result{}, ErrNoSlotCache
		}
		r := sc.ring
		slot := r.Slot(req.NamespacedName)
		leave, err := sc.enter(slot)
		switch {
		case errors.Is(err, errFenced):
			return reconcile.Result{RequeueAfter: r.leaseDuration() / 10}, nil
		case err != nil:
			return reconcile.Result{}, relabel(ctx, c, r, req, obj, slot)
		}
		defer leave()
		ctx, cancel := sc.untilFenced(ctx)
		defer cancel()
		ctx = WithSlot(ctx, r.SlotLabel(), strconv.Itoa(slot))
		ctx = workscope.With(ctx, slotScope{sc, slot})
		o := obj.DeepCopyObject().(client.Object)
		err = c.Get(ctx, req.NamespacedName, o)
		switch {
		case err == nil:
			return inner.Reconcile(ctx, req)
		case !apierrors.IsNotFound(err):
			return reconcile.Result{}, err
		case gvkErr != nil:
			return reconcile.Result{}, gvkErr
		}
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(gvk)
		switch err := cl.GetAPIReader().Get(ctx, req.NamespacedName, meta); {
		case err == nil:
			return reconcile.Result{}, nil // the cache brings it once labelled
		case !apierrors.IsNotFound(err):
			return reconcile.Result{}, fmt.Errorf("shard: %s missing from the cache: %w", req, err)
		}
		return inner.Reconcile(ctx, req)
	})
}

// relabel gives an object this member caches but whose slot it does not
// hold (its label copied from another object's) the slot of its name:
// the member holding that slot caches it then. Every member writes the
// same value.
func relabel(ctx context.Context, c client.Client, r Ring, req reconcile.Request, obj client.Object, slot int) error {
	o := obj.DeepCopyObject().(client.Object)
	if err := c.Get(ctx, req.NamespacedName, o); err != nil {
		return client.IgnoreNotFound(err)
	}
	want := strconv.Itoa(slot)
	if o.GetLabels()[r.SlotLabel()] == want {
		return nil
	}
	patch := client.MergeFrom(o.DeepCopyObject().(client.Object))
	labels := o.GetLabels()
	labels[r.SlotLabel()] = want
	o.SetLabels(labels)
	if err := c.Patch(ctx, o, patch); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("shard: labelling %s with slot %d, of its name: %w", req, slot, err))
	}
	return nil
}

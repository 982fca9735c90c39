package shard

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Handoff wraps inner, the reconciler of member identity, so that it
// hands objects over. A request for an object labelled to drain is
// answered by removing the object's shard and drain labels instead of
// calling inner: inner is not running for that object (a controller
// never runs one key twice at once), and the Sharder gives the object to
// its next member only once the labels are gone. The answer returns when
// cl's cache has moved past the drained version, so that no stale copy
// reaches inner afterwards.
//
// A request for an object missing from the cache reaches inner only if
// the API server has none either: a move, drained or not, is no
// deletion. That costs a GET of its metadata (RBAC: get on the kind), so
// map functions of other watches should return only keys the member
// holds. obj is the kind's prototype, copied per request; cl's cache
// holds the member's objects (Ring.Selector).
func Handoff(r Ring, identity string, cl cluster.Cluster, obj client.Object, inner reconcile.Reconciler) reconcile.Reconciler {
	c := cl.GetClient()
	gvk, gvkErr := apiutil.GVKForObject(obj, cl.GetScheme())
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		o := obj.DeepCopyObject().(client.Object)
		if err := c.Get(ctx, req.NamespacedName, o); err != nil {
			if !apierrors.IsNotFound(err) {
				return reconcile.Result{}, err
			}
			if gvkErr != nil {
				return reconcile.Result{}, gvkErr
			}
			meta := &metav1.PartialObjectMetadata{}
			meta.SetGroupVersionKind(gvk)
			switch err := cl.GetAPIReader().Get(ctx, req.NamespacedName, meta); {
			case err == nil:
				return reconcile.Result{}, nil // moved; the cache brings it back if it returns
			case !apierrors.IsNotFound(err):
				return reconcile.Result{}, fmt.Errorf("shard: %s left the cache: %w", req, err)
			}
			return inner.Reconcile(ctx, req)
		}
		labels := o.GetLabels()
		switch {
		case labels[r.Label()] != identity:
			return reconcile.Result{}, nil // not ours (any more)
		case labels[r.DrainLabel()] == "":
			return inner.Reconcile(WithMember(ctx, r.Label(), identity), req)
		}
		drained := o.GetResourceVersion()
		patch := client.MergeFromWithOptions(o.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
		delete(labels, r.Label())
		delete(labels, r.DrainLabel())
		o.SetLabels(labels)
		if err := c.Patch(ctx, o, patch); err != nil {
			return reconcile.Result{}, fmt.Errorf("shard: handing %s over: %w", req, err)
		}
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			cur := obj.DeepCopyObject().(client.Object)
			err := c.Get(ctx, req.NamespacedName, cur)
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return err == nil && cur.GetResourceVersion() != drained, err
		})
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("shard: %s handed over, waiting for the cache to follow: %w", req, err)
		}
		return reconcile.Result{}, nil
	})
}

package shard

import (
	"context"
	"fmt"
	"maps"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// leaseWatch is an informer of a ring's Leases. It times each renewal
// when its event arrives, not at a member's next look, and wakes the
// member when another came, went or changed its slots.
type leaseWatch struct {
	store toolscache.Store
	wake  chan struct{}
}

// watchLeases starts h's leaseWatch and waits up to two leases until it
// has listed the Leases; it stops with ctx.
func (h *holder) watchLeases(ctx context.Context) (*leaseWatch, error) {
	selector := RingLabel + "=" + h.ring.Name
	leases := h.leases.Leases(h.ring.Namespace)
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return leases.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return leases.Watch(ctx, o)
		},
	}
	inf := toolscache.NewSharedIndexInformerWithOptions(lw, &coordinationv1.Lease{}, toolscache.SharedIndexInformerOptions{})
	w := &leaseWatch{store: inf.GetStore(), wake: make(chan struct{}, 1)}
	own := h.ring.leaseName(h.identity)
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.changed(h.view, obj.(*coordinationv1.Lease).Name != own) },
		DeleteFunc: func(any) { w.changed(h.view, true) },
		UpdateFunc: func(before, after any) {
			b, a := before.(*coordinationv1.Lease), after.(*coordinationv1.Lease)
			w.changed(h.view, a.Name != own &&
				(ptr.Deref(b.Spec.HolderIdentity, "") != ptr.Deref(a.Spec.HolderIdentity, "") || !maps.Equal(b.Annotations, a.Annotations)))
		},
	}); err != nil {
		return nil, err
	}
	go inf.RunWithContext(ctx)
	// A member that cannot list them would never renew its Lease.
	wait := 2 * h.ring.leaseDuration()
	syncCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if !toolscache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("shard: the Leases of ring %s not listed within %v: the member needs list and watch on Leases in namespace %s", h.ring.Name, wait, h.ring.Namespace)
	}
	return w, nil
}

// changed times the Leases, and wakes the member if wake.
func (w *leaseWatch) changed(v *View, wake bool) {
	v.observe(w.leases(), time.Now())
	if !wake {
		return
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// leases are the Leases the informer holds.
func (w *leaseWatch) leases() []coordinationv1.Lease {
	objs := w.store.List()
	out := make([]coordinationv1.Lease, len(objs))
	for i, o := range objs {
		out[i] = *o.(*coordinationv1.Lease)
	}
	return out
}

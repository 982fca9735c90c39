package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// floorFieldOwner is the field manager of the floor's status writes.
const floorFieldOwner = "scale-floor"

// floorStatus plays the one part of an operator the cluster cannot do
// without for the floor contender: when a floor Deployment has rolled out
// at a size, it writes its Memcached's status once, Ready at that size, by
// server-side apply like opkit. It reads nothing from the API server: the
// Deployment events come from the benchmark's cache, which watches them
// for every contender anyway.
//
// The benchmark gives a floor Memcached size 1 at generation 1 and size 2
// at generation 2 (its one resize), so the size is the generation the
// status reports.
type floorStatus struct {
	c   client.Client
	ns  string
	sem chan struct{} // bounds the writes in flight

	mu      sync.Mutex
	written map[string]int32 // name: the size last written
	failed  error            // the first write that failed
	wg      sync.WaitGroup
}

func newFloorStatus(c client.Client, ns string, workers int) *floorStatus {
	return &floorStatus{c: c, ns: ns, sem: make(chan struct{}, max(workers, 1)), written: map[string]int32{}}
}

// handler is the Deployment informer's event handler.
func (f *floorStatus) handler(ctx context.Context) toolscache.ResourceEventHandler {
	on := func(obj any) {
		if d, ok := obj.(*appsv1.Deployment); ok {
			f.observe(ctx, d)
		}
	}
	return toolscache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, obj any) { on(obj) }}
}

// observe writes d's Memcached's status if d has rolled out at a size not
// written yet.
func (f *floorStatus) observe(ctx context.Context, d *appsv1.Deployment) {
	size := ptr.Deref(d.Spec.Replicas, 1)
	if d.Namespace != f.ns || !rolledOut(d, size) {
		return
	}
	f.mu.Lock()
	if f.written[d.Name] == size {
		f.mu.Unlock()
		return
	}
	f.written[d.Name] = size
	f.wg.Add(1)
	f.mu.Unlock()
	go func() {
		defer f.wg.Done()
		f.sem <- struct{}{}
		defer func() { <-f.sem }()
		if err := f.write(ctx, d.Name, size); err != nil {
			f.mu.Lock()
			if f.failed == nil {
				f.failed = err
			}
			f.mu.Unlock()
		}
	}()
}

// write applies the status of the Memcached name: Ready with size pods.
func (f *floorStatus) write(ctx context.Context, name string, size int32) error {
	m := memcachedRef(f.ns, name)
	m.Object["status"] = map[string]any{
		"observedGeneration": int64(size),
		"readyReplicas":      int64(size),
		"conditions": []any{map[string]any{
			"type": "Ready", "status": "True", "reason": "AllAvailable", "message": "",
			"observedGeneration": int64(size),
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		}},
	}
	err := f.c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(m), client.FieldOwner(floorFieldOwner), client.ForceOwnership)
	if err != nil {
		return fmt.Errorf("writing the status of floor Memcached %s: %w", name, err)
	}
	return nil
}

// err waits for the writes in flight and returns the first failure. Call
// it once the handler is removed, so that no write starts meanwhile.
func (f *floorStatus) err() error {
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// rolledOut is the test the operators apply before they report Ready, and
// the benchmark before it counts a Deployment done.
func rolledOut(d *appsv1.Deployment, pods int32) bool {
	st := d.Status
	return st.ObservedGeneration >= d.Generation && ptr.Deref(d.Spec.Replicas, 1) == pods &&
		st.UpdatedReplicas == pods && st.Replicas == pods && st.AvailableReplicas == pods
}

// startFloorStatus starts writing the floor's statuses from the benchmark's
// Deployment informer; stop removes the handler, waits for the writes in
// flight and returns the first that failed.
func (b *bench) startFloorStatus(ctx context.Context) (stop func() error, err error) {
	inf, err := b.e.cache.GetInformer(ctx, &appsv1.Deployment{})
	if err != nil {
		return nil, fmt.Errorf("the Deployment informer: %w", err)
	}
	f := newFloorStatus(b.e.client, b.cur.ns, b.cfg.Workers)
	reg, err := inf.AddEventHandler(f.handler(ctx))
	if err != nil {
		return nil, fmt.Errorf("watching the floor's Deployments: %w", err)
	}
	return func() error {
		rerr := inf.RemoveEventHandler(reg)
		return errors.Join(f.err(), rerr)
	}, nil
}

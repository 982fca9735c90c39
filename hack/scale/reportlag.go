package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The keys of a create or resize step's Extra that readyTracker fills in
// for a contender whose objects are Memcacheds.
const (
	// extraRolledOut is when the step's last Deployment had rolled out,
	// in seconds into the step.
	extraRolledOut = "deploymentsRolledOutSeconds"
	// extraLagMedian, extraLagP90 and extraLagMax are how long after its
	// own Deployment had rolled out each Memcached was first seen Ready:
	// the time the operator took to report what the control plane had
	// done.
	extraLagMedian = "readyAfterRolloutMedianSeconds"
	extraLagP90    = "readyAfterRolloutP90Seconds"
	extraLagMax    = "readyAfterRolloutMaxSeconds"
)

// readyTracker is the done count of a Memcached contender's create or
// resize step (Memcacheds Ready with pods ready pods) that also records,
// per object, when its Deployment was first seen rolled out and when the
// Memcached was first seen Ready. The difference tells the control plane's
// part of a step from the operator's reporting of it. Rollouts come from
// the benchmark's Deployment informer's events, as they arrive, so that
// the tracker lists nothing more than the step's count did before it;
// Ready times are as fine as the step's polling (100 ms).
type readyTracker struct {
	b    *bench
	want map[string]bool
	pods int

	mu     sync.Mutex
	start  time.Time
	rolled map[string]float64
	ready  map[string]float64
}

// trackReady starts tracking the named objects' step; stop removes its
// handler from the Deployment informer.
func (b *bench) trackReady(ctx context.Context, objNames []string, pods int) (t *readyTracker, stop func() error, err error) {
	t = &readyTracker{b: b, want: nameSet(objNames), pods: pods, rolled: map[string]float64{}, ready: map[string]float64{}}
	inf, err := b.e.cache.GetInformer(ctx, &appsv1.Deployment{})
	if err != nil {
		return nil, nil, fmt.Errorf("the Deployment informer: %w", err)
	}
	on := func(obj any) {
		if d, ok := obj.(*appsv1.Deployment); ok {
			t.observe(d)
		}
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, obj any) { on(obj) }})
	if err != nil {
		return nil, nil, fmt.Errorf("watching the step's Deployments: %w", err)
	}
	return t, func() error { return inf.RemoveEventHandler(reg) }, nil
}

// elapsed is the time since the step's first count, starting the clock if
// the step has not counted yet.
func (t *readyTracker) elapsed() float64 {
	if t.start.IsZero() {
		t.start = time.Now()
	}
	return time.Since(t.start).Seconds()
}

// observe records when d, one of the step's Deployments, is first seen
// rolled out.
func (t *readyTracker) observe(d *appsv1.Deployment) {
	if !t.b.cur.has(d.Namespace) || !t.want[d.Name] || !rolledOut(d, int32(t.pods)) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, seen := t.rolled[d.Name]; !seen {
		t.rolled[d.Name] = t.elapsed()
	}
}

// count returns how many of the named Memcacheds are Ready now, recording
// the first time each was. The step's clock starts at the first call.
func (t *readyTracker) count() (int, error) {
	l := memcachedList()
	if err := t.b.e.cache.List(context.Background(), l, t.b.cur.inNamespaces(), client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	el := t.elapsed()
	n := 0
	for i := range l.Items {
		name := l.Items[i].GetName()
		if !t.want[name] || !memcachedReady(&l.Items[i], int64(t.pods)) {
			continue
		}
		n++
		if _, ok := t.ready[name]; !ok {
			t.ready[name] = el
		}
	}
	return n, nil
}

// extra returns what the tracker measured, as a phase's Extra keys: when
// the last Deployment had rolled out, and the median, 90th percentile and
// largest time from an object's rollout to its Ready. Objects not seen
// both ways count in neither.
func (t *readyTracker) extra() map[string]float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var lags []float64
	var last float64
	for name, r := range t.rolled {
		last = max(last, r)
		if ready, ok := t.ready[name]; ok {
			lags = append(lags, max(ready-r, 0))
		}
	}
	if len(lags) == 0 {
		return nil
	}
	slices.Sort(lags)
	return map[string]float64{
		extraRolledOut: last,
		extraLagMedian: quantile(lags, 0.5),
		extraLagP90:    quantile(lags, 0.9),
		extraLagMax:    lags[len(lags)-1],
	}
}

// quantile returns the q-quantile of sorted (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// reportLagTable renders, for the create and resize steps, when each
// contender's last Deployment had rolled out and when its last object was
// done, and for Memcached contenders how long after its own Deployment
// each Memcached was Ready: the operator's part of the step, apart from
// the control plane's. Runs measured before the tracker have no table.
func reportLagTable(w func(string, ...any), r *runResult) {
	steps := []struct {
		what string
		get  func(*contenderResult) phase
	}{
		{"create", func(c *contenderResult) phase { return c.Create }},
		{"resize", func(c *contenderResult) phase { return c.Resize }},
	}
	cols := columns(r)
	if !slices.ContainsFunc(cols, func(name string) bool { return r.Contenders[name].Create.Extra[extraRolledOut] > 0 }) {
		return
	}
	w("Rolled out, then reported (N=%d, round 1): when the step's last Deployment had rolled out, when its last object was done (a Memcached Ready, or for direct the Deployment itself), and how long after its own Deployment had rolled out each Memcached was first seen Ready, the operator's part (rollouts from the benchmark's Deployment informer as they arrive, Ready polled every 100 ms):\n\n", r.N)
	w("| step | last Deployment rolled out | last done | Ready after its Deployment: median | 90th percentile | max |\n|---|---:|---:|---:|---:|---:|\n")
	for _, step := range steps {
		for _, name := range cols {
			p := step.get(r.Contenders[name])
			if name == contDirect {
				w("| %s: %s | %.1f s | %.1f s | - | - | - |\n", name, step.what, p.Seconds, p.Seconds)
				continue
			}
			if p.Extra[extraRolledOut] == 0 {
				continue
			}
			w("| %s: %s | %.1f s | %.1f s | %.1f s | %.1f s | %.1f s |\n", name, step.what, p.Extra[extraRolledOut], p.Seconds,
				p.Extra[extraLagMedian], p.Extra[extraLagP90], p.Extra[extraLagMax])
		}
	}
	w("\n")
}

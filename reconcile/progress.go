package reconcile

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// progressDeferrals remembers, per object, since when a generation has been
// waiting with its status write deferred (WithProgressDelay).
type progressDeferrals struct {
	mu sync.Mutex
	m  map[types.NamespacedName]deferral
}

type deferral struct {
	uid   types.UID
	gen   int64
	since time.Time
}

// remaining returns how much of delay is left for generation gen of the
// object (uid) at key, starting the clock on the first call for it.
func (p *progressDeferrals) remaining(key types.NamespacedName, uid types.UID, gen int64, delay time.Duration, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[types.NamespacedName]deferral{}
	}
	d, ok := p.m[key]
	if !ok || d.uid != uid || d.gen != gen {
		d = deferral{uid: uid, gen: gen, since: now}
		p.m[key] = d
	}
	return delay - now.Sub(d.since)
}

// forget drops the record of key.
func (p *progressDeferrals) forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	drop(&p.m, key)
}

// has says whether key has a record.
func (p *progressDeferrals) has(key types.NamespacedName) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.m[key]
	return ok
}

// deferProgress reports whether the status write of this pass is deferred
// (see WithProgressDelay), and the requeue delay that brings the write
// back if nothing else does.
func (r *Reconciler[T]) deferProgress(key types.NamespacedName, before, after T, res Result) (time.Duration, bool) {
	if r.opts.progressDelay <= 0 {
		return 0, false
	}
	gen := after.GetGeneration()
	// A resumed object must lose Paused at once.
	if res.kind != OutcomeWaiting || before.GetObservedGeneration() >= gen || wasPaused(before) {
		r.progress.forget(key)
		return 0, false
	}
	left := r.progress.remaining(key, after.GetUID(), gen, r.opts.progressDelay, time.Now())
	if left <= 0 {
		r.progress.forget(key)
		return 0, false
	}
	if res.after > 0 && res.after < left {
		left = res.after
	}
	return left, true
}

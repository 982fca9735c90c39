package reconcile

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// defaultMaxProgressDelays is how many progress delays one generation's
// status is deferred for at most, unless WithMaxProgressDelay says.
const defaultMaxProgressDelays = 5

// progressDeferrals remembers, per object, the generation whose status
// write is deferred (WithProgressDelay): since when, and its last progress.
type progressDeferrals struct {
	mu sync.Mutex
	m  map[types.NamespacedName]deferral
}

type deferral struct {
	uid   types.UID
	gen   int64
	since time.Time // the first deferred pass of the generation
	// The last progress: when a pass's Waiting reason or message last
	// differed from the pass before, and what it said.
	moved  time.Time
	reason string
	msg    string
}

// remaining returns how long the status write of generation gen of the
// object (uid) at key may still be deferred: the delay left since its last
// progress (res's reason or message differing from the last pass's), or
// the time left before limit, whichever is less. The first call for a
// generation starts both clocks.
func (p *progressDeferrals) remaining(key types.NamespacedName, uid types.UID, gen int64, res Result, delay, limit time.Duration, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[types.NamespacedName]deferral{}
	}
	d, ok := p.m[key]
	if !ok || d.uid != uid || d.gen != gen {
		d = deferral{uid: uid, gen: gen, since: now, moved: now}
	}
	if d.reason != res.reason || d.msg != res.message {
		d.moved, d.reason, d.msg = now, res.reason, res.message
	}
	p.m[key] = d
	return min(delay-now.Sub(d.moved), limit-now.Sub(d.since))
}

// forget drops the record of key.
func (p *progressDeferrals) forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, key)
}

// deferProgress reports whether the status write of this pass is deferred
// (see WithProgressDelay), and the requeue delay that brings the write
// back if nothing else does.
func (r *Reconciler[T]) deferProgress(key types.NamespacedName, before, after T, res Result) (time.Duration, bool) {
	delay := r.opts.progressDelay
	if delay <= 0 {
		return 0, false
	}
	gen := after.GetGeneration()
	if res.kind != KindWaiting || before.GetObservedGeneration() >= gen {
		r.progress.forget(key)
		return 0, false
	}
	limit := r.opts.progressMax
	if limit <= 0 {
		limit = defaultMaxProgressDelays * delay
	}
	left := r.progress.remaining(key, after.GetUID(), gen, res, delay, limit, r.clock.Now())
	if left <= 0 {
		r.progress.forget(key)
		return 0, false
	}
	if res.after > 0 && res.after < left {
		left = res.after
	}
	return left, true
}

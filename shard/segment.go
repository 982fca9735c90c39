package shard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Hold starts caching slots and opens their gates; it returns once the
// new segment's informers synced. Slots already held are skipped.
func (c *slotCache) Hold(ctx context.Context, slots ...int) error {
	held := c.Slots()
	var want []int
	for _, s := range slots {
		if s < 0 || s >= c.ring.slots() {
			return fmt.Errorf("shard: slot %d of ring %s: want 0 to %d", s, c.ring.Name, c.ring.slots()-1)
		}
		if !slices.Contains(held, s) && !slices.Contains(want, s) {
			want = append(want, s)
		}
	}
	if len(want) == 0 {
		return nil
	}
	select {
	case <-c.started:
	default:
		return errNotStarted
	}
	slices.Sort(want)
	// Open before the handlers see the objects added: a pass they queue
	// must be admitted.
	c.setGates(want, true)
	seg, err := c.add(ctx, want, false)
	if err != nil {
		return errors.Join(err, c.giveUp(ctx, want))
	}
	c.mu.Lock()
	onHold := c.onHold
	c.mu.Unlock()
	for _, f := range onHold {
		f(want)
	}
	if !seg.cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("shard: waiting for slots %v: %w", want, ctx.Err())
	}
	seg.synced.Store(true)
	return nil
}

// add starts a segment for slots and adds it, with every informer and
// handler known; restarting marks it as restarting slots another holds.
func (c *slotCache) add(ctx context.Context, slots []int, restarting bool) (*segment, error) {
	c.build.Lock()
	defer c.build.Unlock()
	seg, err := c.start(ctx, slots)
	if err != nil {
		return nil, err
	}
	seg.restarting.Store(restarting)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, i := range c.informers {
		if err := i.attach(ctx, seg); err != nil {
			for _, i := range c.informers {
				i.detach(seg, nil)
			}
			seg.cancel()
			<-seg.done
			return nil, err
		}
	}
	c.segments = append(c.segments, seg)
	return seg, nil
}

// start starts the cache of a segment, with the indexes known so far.
func (c *slotCache) start(ctx context.Context, slots []int) (*segment, error) {
	opts := c.opts
	req := c.ring.slotsRequirement(slots)
	add := func(sel labels.Selector) labels.Selector {
		if sel == nil {
			sel = c.opts.DefaultLabelSelector
		}
		if sel == nil {
			sel = labels.Everything()
		}
		return sel.DeepCopySelector().Add(req)
	}
	opts.ByObject = map[client.Object]cache.ByObject{}
	for obj, by := range c.opts.ByObject {
		if _, sharded, err := c.sharded(obj); err != nil || !sharded {
			continue
		}
		by.Label = add(by.Label)
		by.Namespaces = maps.Clone(by.Namespaces)
		for ns, cfg := range by.Namespaces {
			if cfg.LabelSelector != nil {
				cfg.LabelSelector = add(cfg.LabelSelector)
				by.Namespaces[ns] = cfg
			}
		}
		opts.ByObject[obj] = by
	}
	opts.DefaultLabelSelector = add(c.opts.DefaultLabelSelector)
	opts.DefaultNamespaces = maps.Clone(c.opts.DefaultNamespaces)
	for ns, cfg := range opts.DefaultNamespaces {
		if cfg.LabelSelector != nil {
			cfg.LabelSelector = add(cfg.LabelSelector)
			opts.DefaultNamespaces[ns] = cfg
		}
	}
	sc, err := cache.New(c.config, opts)
	if err != nil {
		return nil, fmt.Errorf("shard: the cache of slots %v: %w", slots, err)
	}
	c.mu.Lock()
	indexes := slices.Clone(c.indexes)
	c.mu.Unlock()
	for _, ix := range indexes { // c.build keeps IndexField out meanwhile
		if err := sc.IndexField(ctx, ix.obj, ix.field, ix.extract); err != nil {
			return nil, err
		}
	}
	sctx, cancel := context.WithCancel(c.ctx)
	s := &segment{slots: slots, cache: sc, ctx: sctx, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = sc.Start(sctx)
	}()
	// Until it started, its reads fail rather than wait.
	if !sc.WaitForCacheSync(ctx) {
		cancel()
		<-s.done
		return nil, fmt.Errorf("shard: starting the cache of slots %v: %w", slots, ctx.Err())
	}
	return s, nil
}

// setGates opens or closes the gates of slots; closing one waits for
// the passes it admitted.
func (c *slotCache) setGates(slots []int, open bool) {
	for _, n := range slots {
		if n >= 0 && n < c.ring.slots() {
			c.gates[n].Lock()
			c.active[n].Store(open)
			if open {
				c.openWork(n)
			}
			c.gates[n].Unlock()
		}
	}
}

// giveUp closes the gates of slots and ends their work: it waits for
// the passes admitted, cancels the work they started and waits for it
// too, or for ctx to end (the fence then ends what still runs before
// another member may hold the slots).
func (c *slotCache) giveUp(ctx context.Context, slots []int) error {
	c.setGates(slots, false)
	var failed error
	for _, n := range slots {
		if n >= 0 && n < c.ring.slots() {
			failed = errors.Join(failed, c.closeWork(ctx, n))
		}
	}
	return failed
}

// Why enter refused a pass.
var (
	errNotHeld = errors.New("shard: slot not held")
	errFenced  = errors.New("shard: the member's Lease may have run out")
)

// enter admits a pass over an object of slot if the slot is held and
// the member's Lease live; the pass calls leave when it ends. Release
// waits for the passes admitted.
func (c *slotCache) enter(slot int) (leave func(), err error) {
	if slot < 0 || slot >= c.ring.slots() {
		return nil, errNotHeld
	}
	g := &c.gates[slot]
	g.RLock()
	if !c.active[slot].Load() {
		g.RUnlock()
		return nil, errNotHeld
	}
	if d := c.fence.Load(); d != nil && !time.Now().Before(*d) {
		g.RUnlock()
		return nil, errFenced
	}
	return g.RUnlock, nil
}

// holds says whether slot's gate is open, without waiting for a
// Release under way.
func (c *slotCache) holds(slot int) bool {
	return slot >= 0 && slot < c.ring.slots() && c.active[slot].Load()
}

// whenHeld calls f with the slots of each Hold once their gates opened;
// f must not block.
func (c *slotCache) whenHeld(f func(slots []int)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onHold = append(c.onHold, f)
}

// fenceAt admits passes until t only.
func (c *slotCache) fenceAt(t time.Time) { c.fence.Store(&t) }

// untilFenced returns ctx ended, with cause errFenced, once the fence
// passes: a renewal that moves the fence on moves the end too. No fence
// set (slots held by hand) never ends it.
func (c *slotCache) untilFenced(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		for {
			d := c.fence.Load()
			if d == nil {
				<-ctx.Done()
				return
			}
			wait := time.Until(*d)
			if wait <= 0 {
				cancel(errFenced)
				return
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// Release closes the gates of slots, waits for the passes they
// admitted and the work those started, and stops caching them: each
// handler sees every object of those slots deleted. A segment that held
// other slots too is replaced, once the new one synced, by one of those,
// whose handlers see their objects added again; if that fails, those
// slots are given up too, and the error returned.
func (c *slotCache) Release(ctx context.Context, slots ...int) error {
	failed := c.giveUp(ctx, slots)
	for _, old := range c.held() {
		keep := minus(old.slots, slots)
		if len(keep) == len(old.slots) {
			continue
		}
		if len(keep) > 0 {
			if err := c.restart(ctx, keep); err != nil {
				failed = errors.Join(failed, err, c.giveUp(ctx, keep))
				keep = nil
			}
		}
		c.remove(old, func(o any) bool {
			m, err := apimeta.Accessor(o)
			if err != nil {
				return false
			}
			n, ok := c.ring.slotOf(m.GetLabels())
			return !ok || !slices.Contains(keep, n)
		})
	}
	return failed
}

// restart adds a segment for slots, which another holds too, and waits
// for it to sync: the other goes only then, so that reads never wait on
// a segment that may be replaced before it synced.
func (c *slotCache) restart(ctx context.Context, slots []int) error {
	seg, err := c.add(ctx, slots, true)
	if err != nil {
		return err
	}
	if !seg.cache.WaitForCacheSync(ctx) {
		c.remove(seg, nil)
		return fmt.Errorf("shard: restarting the cache of slots %v: %w", slots, ctx.Err())
	}
	seg.synced.Store(true)
	seg.restarting.Store(false)
	return nil
}

// remove stops seg and forgets it; each handler then sees the objects
// of seg that released says are deleted (none if nil).
func (c *slotCache) remove(seg *segment, released func(any) bool) {
	c.mu.Lock()
	c.segments = slices.DeleteFunc(c.segments, func(s *segment) bool { return s == seg })
	var gone []func()
	for _, i := range c.informers {
		gone = append(gone, i.detach(seg, released))
	}
	c.mu.Unlock()
	seg.cancel()
	<-seg.done
	for _, f := range gone {
		f()
	}
}

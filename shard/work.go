package shard

import (
	"context"
	"sync"
)

// slotWork is what passes of one slot started to outlive them (package
// operation's runs): Release cancels it and waits for it, so that the
// next holder of the slot never runs beside it.
type slotWork struct {
	mu     sync.Mutex
	open   bool
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// openWork lets passes of slot start work.
func (c *slotCache) openWork(slot int) {
	w := &c.work[slot]
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.open {
		w.open = true
		w.ctx, w.cancel = context.WithCancel(context.Background())
	}
}

// closeWork cancels the work of slot and waits for it to return, or for
// ctx to end.
func (c *slotCache) closeWork(ctx context.Context, slot int) error {
	w := &c.work[slot]
	w.mu.Lock()
	if w.open {
		w.open = false
		w.cancel()
	}
	w.mu.Unlock()
	done := make(chan struct{})
	go func() {
		w.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// slotScope is a workscope.Scope: the work of one slot of c.
type slotScope struct {
	c    *slotCache
	slot int
}

// Go runs f while the slot is held and the member's Lease live.
func (s slotScope) Go(f func(ctx context.Context)) bool {
	w := &s.c.work[s.slot]
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.open {
		return false
	}
	w.wg.Add(1)
	ctx, cancel := s.c.untilFenced(w.ctx)
	go func() {
		defer w.wg.Done()
		defer cancel()
		f(ctx)
	}()
	return true
}

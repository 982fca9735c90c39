package operation

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opkit-dev/opkit/internal/workscope"
)

// ErrActive is returned by Start while the Record holds an operation that
// is Pending or Running.
var ErrActive = errors.New("an operation is active")

// Start records operation id of type typ in r as Pending. It runs nothing:
// Step launches it once the record was written.
func Start(r *Record, typ, id string, now time.Time) error {
	if typ == "" || id == "" {
		return errors.New("operation.Start: the type and the ID are required")
	}
	if r.Active() {
		return fmt.Errorf("%w: %s %s is %s", ErrActive, r.Type, r.ID, r.Phase)
	}
	*r = Record{ID: id, Type: typ, Phase: Pending, StartTime: &metav1.Time{Time: now}}
	return nil
}

// Operation is one type of long operation.
type Operation struct {
	// Type names it in Records.
	Type string
	// Run does the work of operation id, reporting progress as it goes.
	// It runs in a goroutine of its own, with a context cancelled by
	// Cancel, when the Runner stops, or when the slot of the pass that
	// launched it leaves the member (shard.Handoff), which waits for
	// Run to return before another member holds it. An interrupted Run may run again
	// (see MaxAttempts): make its effect atomic, or say in Done that it
	// is complete.
	Run func(ctx context.Context, id string, progress func(string)) error
	// Done reports whether operation id completed, for a Record found
	// Running after a restart: a backup whose manifest is in the store.
	// Nil: an interrupted operation is taken as not done.
	Done func(ctx context.Context, id string) (bool, error)
	// MaxAttempts bounds the attempts of one operation, interrupted ones
	// included (default 3); 1 runs it at most once.
	MaxAttempts int32
	// Poll is how soon Step asks for the next pass while Run runs
	// (default 2 s).
	Poll time.Duration
}

// Runner runs the operations of one controller. Add it to the manager
// (it is a Runnable, run by the leader): its runs are cancelled when the
// manager stops.
type Runner struct {
	mu       sync.Mutex
	base     context.Context
	now      func() time.Time
	armed    map[key]int32
	runs     map[key]*run
	canceled map[key]bool
	wg       sync.WaitGroup
	// going counts the runs not yet returned; idle is closed when it
	// falls to 0 (Wait).
	going int
	idle  chan struct{}
}

type key struct {
	owner types.UID
	typ   string
	id    string
}

type run struct {
	attempt  int32
	cancel   context.CancelFunc
	done     bool
	err      error
	progress string
}

// NewRunner returns a Runner reading the time from now (nil: time.Now).
func NewRunner(now func() time.Time) *Runner {
	if now == nil {
		now = time.Now
	}
	return &Runner{base: context.Background(), now: now, armed: map[key]int32{}, runs: map[key]*run{}, canceled: map[key]bool{}}
}

// Start runs until ctx ends, then cancels every run and waits for them to
// return.
func (rn *Runner) Start(ctx context.Context) error {
	rn.mu.Lock()
	rn.base = ctx
	rn.mu.Unlock()
	<-ctx.Done()
	rn.mu.Lock()
	for _, r := range rn.runs {
		r.cancel()
	}
	rn.mu.Unlock()
	rn.wg.Wait()
	return nil
}

// Wait blocks until no run is going, or ctx ends: for tests that step
// passes by hand and want what one pass launched finished before the
// next. A Step meanwhile may launch another.
func (rn *Runner) Wait(ctx context.Context) error {
	rn.mu.Lock()
	if rn.going == 0 {
		rn.mu.Unlock()
		return nil
	}
	if rn.idle == nil {
		rn.idle = make(chan struct{})
	}
	idle := rn.idle
	rn.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Cancel cancels owner's operations and forgets them: call it when owner
// is deleted. A later Step of a Record of owner records it Failed with
// ReasonCanceled.
func (rn *Runner) Cancel(owner metav1.Object) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	for k, r := range rn.runs {
		if k.owner == owner.GetUID() {
			r.cancel()
			delete(rn.runs, k)
			rn.canceled[k] = true
		}
	}
	for k := range rn.armed {
		if k.owner == owner.GetUID() {
			delete(rn.armed, k)
			rn.canceled[k] = true
		}
	}
}

// CancelOperation cancels owner's operation id of type typ and forgets
// it, leaving owner's others running: for a Record the caller drops, so
// no later Step reports it.
func (rn *Runner) CancelOperation(owner metav1.Object, typ, id string) {
	k := key{owner.GetUID(), typ, id}
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if r, ok := rn.runs[k]; ok {
		r.cancel()
		delete(rn.runs, k)
	}
	delete(rn.armed, k)
}

// Step advances owner's operation r of op's type and returns how soon it
// wants the next pass (0: not at all). Call it in every pass of owner and
// write r back with the status: each change Step makes must be written
// before the next step, which is why launching takes two passes.
func (rn *Runner) Step(ctx context.Context, owner metav1.Object, r *Record, op Operation) time.Duration {
	if r.Type != op.Type || r.ID == "" {
		return 0
	}
	k := key{owner.GetUID(), r.Type, r.ID}
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if rn.canceled[k] && r.Active() {
		delete(rn.canceled, k)
		rn.finish(r, Failed, ReasonCanceled, "canceled")
		return 0
	}
	switch r.Phase {
	case Pending:
		return rn.arm(k, r)
	case Running:
		if run := rn.runs[k]; run != nil && run.attempt == r.Attempts {
			if !run.done {
				r.Progress = run.progress
				return poll(op)
			}
			// Forgotten now: a caller may stop calling Step once the
			// Record is final.
			delete(rn.runs, k)
			if run.err == nil {
				rn.finish(r, Succeeded, "", "")
				return 0
			}
			if reason, ok := permanent(run.err); ok {
				rn.finish(r, Failed, reason, run.err.Error())
				return 0
			}
			if r.Attempts < maxAttempts(op) {
				r.Message = run.err.Error()
				return rn.arm(k, r)
			}
			rn.finish(r, Failed, ReasonFailed, run.err.Error())
			return 0
		}
		if a, ok := rn.armed[k]; ok && a == r.Attempts {
			if rn.launch(ctx, k, r, op) {
				delete(rn.armed, k)
			}
			return poll(op)
		}
		return rn.interrupted(ctx, k, r, op)
	default:
		delete(rn.runs, k)
		delete(rn.armed, k)
		delete(rn.canceled, k)
		return 0
	}
}

// arm records the next attempt; it launches once that record is read back.
func (rn *Runner) arm(k key, r *Record) time.Duration {
	r.Phase = Running
	r.Attempts++
	r.Progress = ""
	rn.armed[k] = r.Attempts
	// A run of an earlier attempt still going (a record written late by
	// an earlier leader) must not overlap the next one.
	if old := rn.runs[k]; old != nil {
		old.cancel()
		delete(rn.runs, k)
	}
	return time.Second
}

// launch starts r's attempt, in the scope of the pass (its shard slot)
// if ctx names one: it reports false if that scope has ended.
func (rn *Runner) launch(ctx context.Context, k key, r *Record, op Operation) bool {
	runCtx, cancel := context.WithCancel(rn.base)
	ru := &run{attempt: r.Attempts, cancel: cancel}
	id := r.ID
	body := func(scope context.Context) {
		defer rn.wg.Done()
		defer cancel()
		stop := context.AfterFunc(scope, cancel)
		defer stop()
		err := op.Run(runCtx, id, func(p string) {
			rn.mu.Lock()
			ru.progress = p
			rn.mu.Unlock()
		})
		rn.mu.Lock()
		ru.done, ru.err = true, err
		if rn.going--; rn.going == 0 && rn.idle != nil {
			close(rn.idle)
			rn.idle = nil
		}
		rn.mu.Unlock()
	}
	rn.wg.Add(1)
	if s := workscope.From(ctx); s != nil {
		if !s.Go(body) {
			rn.wg.Done()
			cancel()
			return false
		}
	} else {
		go body(context.Background())
	}
	rn.runs[k] = ru
	rn.going++
	return true
}

// interrupted handles a Running record no run of this Runner answers for:
// the operator restarted (or leadership moved) during the attempt.
func (rn *Runner) interrupted(ctx context.Context, k key, r *Record, op Operation) time.Duration {
	if op.Done != nil {
		// Unlocked: Done reads a store, which may be slow, and runs
		// report progress meanwhile. Step of one owner is not concurrent
		// (one worker per object), so nothing else changes r.
		rn.mu.Unlock()
		done, err := op.Done(ctx, r.ID)
		rn.mu.Lock()
		if err != nil {
			r.Progress = "checking whether the interrupted attempt completed: " + err.Error()
			return poll(op)
		}
		if done {
			rn.finish(r, Succeeded, "", "")
			return 0
		}
	}
	if r.Attempts < maxAttempts(op) {
		return rn.arm(k, r)
	}
	msg := fmt.Sprintf("attempt %d of %d was interrupted (started or about to); it did not complete", r.Attempts, maxAttempts(op))
	if op.Done == nil {
		msg = fmt.Sprintf("attempt %d of %d was interrupted (started or about to); it may have completed", r.Attempts, maxAttempts(op))
	}
	rn.finish(r, Failed, ReasonInterrupted, msg)
	return 0
}

func (rn *Runner) finish(r *Record, p Phase, reason, msg string) {
	r.Phase, r.Reason, r.Message, r.Progress = p, reason, msg, ""
	r.EndTime = &metav1.Time{Time: rn.now()}
}

func maxAttempts(op Operation) int32 {
	if op.MaxAttempts > 0 {
		return op.MaxAttempts
	}
	return 3
}

func poll(op Operation) time.Duration {
	if op.Poll > 0 {
		return op.Poll
	}
	return 2 * time.Second
}

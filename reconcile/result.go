package reconcile

import (
	"errors"
	"fmt"
	"time"
)

// Outcome tells what a Result asks the Reconciler to do next.
type Outcome int

// The outcomes of a Result, from the constructors of the same names.
const (
	// OutcomeDone: the pass succeeded; wait for the next change.
	OutcomeDone Outcome = iota
	// OutcomeRequeueAfter: the pass succeeded; look again after a delay.
	OutcomeRequeueAfter
	// OutcomeWaiting: progress depends on something that takes time (pods
	// starting, a rollout); Reconciling=True with the reason, requeued.
	OutcomeWaiting
	// OutcomeRetry: a transient failure; retried with the controller's
	// rate-limited backoff.
	OutcomeRetry
	// OutcomeTerminal: a failure that retrying cannot fix; Stalled=True, not
	// retried until the object changes.
	OutcomeTerminal
)

// String returns the outcome's name as used in metrics and logs.
func (k Outcome) String() string {
	switch k {
	case OutcomeDone:
		return "done"
	case OutcomeRequeueAfter:
		return "requeue_after"
	case OutcomeWaiting:
		return "waiting"
	case OutcomeRetry:
		return "retry"
	case OutcomeTerminal:
		return "terminal"
	default:
		return fmt.Sprintf("Outcome(%d)", int(k))
	}
}

// Result is the outcome of a Reconcile or Finalize hook. It carries the error,
// if any, so that a requeue request can never be returned alongside an error
// (controller-runtime ignores a Result returned with a non-nil error).
//
// Build one with Done, RequeueAfter, Waiting, WaitingForChange, Retry or
// Terminal. The zero Result is Done.
type Result struct {
	kind    Outcome
	after   time.Duration
	reason  string
	message string
	err     error
	invalid bool // Terminal produced by a Validator
}

// Done reports a successful pass: nothing to do until the object or one of its
// children changes.
func Done() Result { return Result{kind: OutcomeDone} }

// RequeueAfter reports a successful pass that wants to look again after d, for
// example to poll an external system. A d <= 0 is the same as Done. From
// Finalize it means cleanup under way: the finalizer stays.
func RequeueAfter(d time.Duration) Result {
	if d <= 0 {
		return Done()
	}
	return Result{kind: OutcomeRequeueAfter, after: d}
}

// Waiting reports that the desired state is applied but not reached yet:
// Reconciling=True with reason and message, Ready=Unknown (False while a
// condition WithSummary names is False), and a requeue after
// d. Changes to owned children also trigger a pass, so d is a safety net,
// not a poll interval. A d <= 0 requeues nothing, as for RequeueAfter: it
// is WaitingForChange.
//
// The reason should be CamelCase (e.g. "PodsStarting"); invalid characters
// are replaced as statusutil does.
func Waiting(reason, message string, d time.Duration) Result {
	return Result{kind: OutcomeWaiting, after: max(d, 0), reason: reason, message: message}
}

// WaitingForChange is Waiting with no delay: Reconciling=True with
// reason and message, Ready as for Waiting, and no requeue. The next pass comes
// from a watch event: the object, one of its children (WithOwns) or another
// watched object changes.
//
// Use it when every change that ends the wait reaches the controller as a
// watch event, such as a rollout of an owned Deployment: the deployment
// controller writes the Deployment's status as pods become available, and
// again when the rollout fails or exceeds its progress deadline. Waiting's
// requeue would only find what the watch already delivered, and it costs a
// pass per waiting object per delay: N objects rolling out for two minutes
// are 4N passes at a 30 s delay.
//
// Footgun: a wait on something no watch reports (an external system, a
// member's health, an object the cache does not hold) must use Waiting with
// a delay. With WaitingForChange it stalls until an unrelated change: the
// cache's periodic resyncs start no pass (SetupWithManager's predicates
// drop them). In Finalize, the finalizer does not keep the children:
// foreground deletion lets the garbage collector delete them while
// Finalize runs, and deleting the namespace deletes them at once. Hold the
// children Finalize needs with package guard.
//
// With WithProgressDelay, a pass whose status write is deferred is still
// requeued when the delay runs out, so the deferred status is written even
// if no event comes.
func WaitingForChange(reason, message string) Result {
	return Result{kind: OutcomeWaiting, reason: reason, message: message}
}

// Retry reports a transient failure. The pass is retried with the
// controller's rate-limited exponential backoff; Ready=False shows the error.
// A nil err is treated as an error too ("retry requested"), never as success.
func Retry(err error) Result {
	if err == nil {
		err = errors.New("retry requested")
	}
	return Result{kind: OutcomeRetry, err: err}
}

// Terminal reports a failure that retrying cannot fix without a change to the
// object, such as a reference to something that does not exist by design.
// Stalled=True and Ready=False carry reason and err's message; the object is
// not requeued (see RecheckAfter for a failure fixed outside the object). A
// new generation (a spec change) starts a fresh pass.
func Terminal(reason string, err error) Result {
	if err == nil {
		err = errors.New("terminal failure")
	}
	return Result{kind: OutcomeTerminal, reason: reason, err: err}
}

// RecheckAfter returns a Terminal result that is looked at again after d:
// still Stalled=True with the reason and message, but requeued instead of
// waiting for the object to change. Use it when the fix is outside the
// object and no watch reports it, such as a Secret the spec names that the
// controller may only get, not list or watch. A re-check finding the same
// failure writes nothing and emits no event. With d <= 0 the result stays
// as it is.
//
// Only a Terminal result can be rechecked. On any other kind RecheckAfter
// returns a Retry whose error wraps ErrRecheckNotTerminal, so that the
// mistake shows in Ready, an event and the log instead of being dropped.
func (r Result) RecheckAfter(d time.Duration) Result {
	if r.kind != OutcomeTerminal {
		what := r.kind.String()
		if m := r.Message(); m != "" {
			if r.reason != "" {
				m = r.reason + ": " + m
			}
			what += " (" + m + ")"
		}
		fix := "Waiting and RequeueAfter take their delay as an argument"
		if r.kind == OutcomeRetry {
			fix = "a Retry's backoff belongs to the controller"
		}
		return Retry(fmt.Errorf("%w: RecheckAfter(%v) on %s; %s", ErrRecheckNotTerminal, d, what, fix))
	}
	if d > 0 {
		r.after = d
	}
	return r
}

// RequeueBy returns r with the next pass due within d: the place to merge
// a schedule's next run (time.Until(next)) into what the hooks return. Done
// becomes RequeueAfter(d); RequeueAfter, Waiting and Terminal keep their
// kind and take the sooner of their delay and d (a WaitingForChange or a
// Terminal without a recheck takes d). A Retry is unchanged: its backoff
// comes sooner, and controller-runtime drops a delay returned with an
// error. A d below one second is one second, so that a schedule already
// due cannot spin the pass.
func (r Result) RequeueBy(d time.Duration) Result {
	d = max(d, time.Second)
	switch r.kind {
	case OutcomeRetry:
		return r
	case OutcomeDone:
		return RequeueAfter(d)
	}
	if r.after <= 0 || d < r.after {
		r.after = d
	}
	return r
}

// ErrRecheckNotTerminal is wrapped by the Retry that RecheckAfter returns
// when called on a Result that is not Terminal.
var ErrRecheckNotTerminal = errors.New("reconcile: RecheckAfter on a result that is not Terminal")

// Outcome returns what the result asks for.
func (r Result) Outcome() Outcome { return r.kind }

// Err returns the error of a Retry or Terminal result, otherwise nil.
func (r Result) Err() error { return r.err }

// After returns the requeue delay of a RequeueAfter or Waiting result, or
// of a Terminal one made with RecheckAfter; 0 for WaitingForChange.
func (r Result) After() time.Duration { return r.after }

// Reason returns the reason of a Waiting or Terminal result.
func (r Result) Reason() string { return r.reason }

// Message returns the message of a Waiting result, or the error message of a
// Retry or Terminal result.
func (r Result) Message() string {
	if r.err != nil {
		return r.err.Error()
	}
	return r.message
}

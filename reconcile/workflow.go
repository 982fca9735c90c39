package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/ownership"
	"github.com/opkit-dev/opkit/statusutil"
)

// Reasons a Workflow sets on its Result and on dependents' conditions.
const (
	// ReasonWaitingForDependent: a child is not ready yet, or a dependency
	// holds it back.
	ReasonWaitingForDependent = "WaitingForDependent"
	// ReasonChildConflict: an object with a child's name exists and is not
	// the parent's (no controller, or another one); nothing is written to
	// it. The Workflow looks again after ChildConflictRequeue, since the
	// cache may not see such an object go.
	ReasonChildConflict     = "ChildConflict"
	ReasonDependentReady    = "DependentReady"
	ReasonDependentNotReady = "DependentNotReady"
	ReasonNotWanted         = "NotWanted"
	// ReasonDependentFailed: building or applying the child failed; the
	// condition's message is the error.
	ReasonDependentFailed = "DependentFailed"
	// ReasonTearingDown: Teardown waits for a child to go before it
	// deletes the ones it depends on.
	ReasonTearingDown = "TearingDown"
)

// ChildConflictRequeue is how often a Workflow blocked by an object that is
// not the parent's looks again.
const ChildConflictRequeue = 30 * time.Second

// ErrInvalidWorkflow is returned by NewWorkflow for a list of dependents
// that cannot be ordered: a name missing or used twice, a DependsOn naming
// no dependent, or a cycle.
var ErrInvalidWorkflow = errors.New("reconcile: invalid workflow")

// Workflow applies the declared children of a P in dependency order. Call
// Reconcile from the hooks' Reconcile; give the Workflow to
// SetupWithManager with WithDependents so that every child kind is
// watched.
type Workflow[P Object] struct {
	children *Children
	deps     []DependentOf[P] // in dependency order
}

// NewWorkflow returns a Workflow writing through children. It orders deps
// so that each comes after what it depends on (keeping the given order
// otherwise) and fails with ErrInvalidWorkflow when that cannot be done.
func NewWorkflow[P Object](children *Children, deps ...DependentOf[P]) (*Workflow[P], error) {
	if children == nil {
		return nil, fmt.Errorf("%w: children is nil", ErrInvalidWorkflow)
	}
	byName := map[string]DependentOf[P]{}
	for i, d := range deps {
		if d.name() == "" {
			return nil, fmt.Errorf("%w: dependent %d has no Name", ErrInvalidWorkflow, i)
		}
		if _, dup := byName[d.name()]; dup {
			return nil, fmt.Errorf("%w: two dependents are named %q", ErrInvalidWorkflow, d.name())
		}
		if _, err := d.childType(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidWorkflow, err)
		}
		if err := d.validate(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidWorkflow, err)
		}
		byName[d.name()] = d
	}
	for _, d := range deps {
		for _, on := range d.dependsOn() {
			if _, ok := byName[on]; !ok {
				return nil, fmt.Errorf("%w: dependent %q depends on %q, which is not declared", ErrInvalidWorkflow, d.name(), on)
			}
		}
	}
	// Depth-first, in declaration order; a hand-written sort because the
	// lists are short and the order must be stable.
	const (
		unvisited = iota
		visiting
		done
	)
	state := map[string]int{}
	var ordered []DependentOf[P]
	var visit func(d DependentOf[P], path []string) error
	visit = func(d DependentOf[P], path []string) error {
		switch state[d.name()] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("%w: dependency cycle %s", ErrInvalidWorkflow, strings.Join(append(path, d.name()), " -> "))
		}
		state[d.name()] = visiting
		for _, on := range d.dependsOn() {
			if err := visit(byName[on], append(path, d.name())); err != nil {
				return err
			}
		}
		state[d.name()] = done
		ordered = append(ordered, d)
		return nil
	}
	for _, d := range deps {
		if err := visit(d, nil); err != nil {
			return nil, err
		}
	}
	return &Workflow[P]{children: children, deps: ordered}, nil
}

// workflowPass is one Reconcile of a Workflow: the parent and what was
// found of each dependent so far.
type workflowPass[P Object] struct {
	parent   P
	children *Children
	states   map[string]dependentState
}

// blocked returns the first of names that is wanted and not ready, and
// why.
func (wp *workflowPass[P]) blocked(names []string) (string, string) {
	for _, n := range names {
		if st := wp.states[n]; st.wanted && !st.ready {
			msg := st.message
			if st.err != nil {
				msg = st.err.Error()
			}
			if msg == "" {
				msg = "not ready"
			}
			return n, msg
		}
	}
	return "", ""
}

// Reconcile applies every wanted child whose dependencies are ready,
// deletes every unwanted one, and sets the dependents' conditions. It
// returns Done when every wanted child is ready; WaitingForChange while
// one is not (its watch event brings the next pass); Waiting with
// ReasonChildConflict when an object of a child's name is not the
// parent's; Retry on any other error. Children not held back by a failed
// one are still applied.
func (w *Workflow[P]) Reconcile(ctx context.Context, parent P) Result {
	wp := &workflowPass[P]{parent: parent, children: w.children, states: make(map[string]dependentState, len(w.deps))}
	var errs []error
	conflict := false
	reason, message := "", ""
	for _, d := range w.deps {
		st := d.reconcile(ctx, wp)
		wp.states[d.name()] = st
		switch {
		case st.err != nil:
			errs = append(errs, st.err)
			conflict = conflict || ownership.IsConflict(st.err)
		case st.wanted && !st.ready && reason == "":
			reason, message = d.waitReason(), d.name()+": "+st.message
		}
	}
	switch {
	case len(errs) > 0 && conflict && len(errs) == 1:
		return Waiting(ReasonChildConflict, errs[0].Error(), ChildConflictRequeue)
	case len(errs) > 0:
		return Retry(errors.Join(errs...))
	case reason != "":
		return WaitingForChange(reason, message)
	}
	return Done()
}

// Teardown deletes the parent's children in the reverse of the order
// Reconcile applies them, each once the children after it are gone, so
// that a child others depend on outlives them (a database after the
// application using it). Call it from Finalize: it returns
// WaitingForChange while a child is going (its deletion event brings the
// next pass) and Done once none is left. Another's object of a child's
// name is left alone.
//
// Footgun: under foreground deletion, and a namespace's, the garbage
// collector and the namespace controller delete the children at once,
// in no order; hold the ones that must wait with package guard.
func (w *Workflow[P]) Teardown(ctx context.Context, parent P) Result {
	wp := &workflowPass[P]{parent: parent, children: w.children, states: map[string]dependentState{}}
	for i := len(w.deps) - 1; i >= 0; i-- {
		d := w.deps[i]
		gone, _, err := d.remove(ctx, wp)
		if err != nil {
			return Retry(fmt.Errorf("tearing down %s: %w", d.name(), err))
		}
		if !gone {
			return WaitingForChange(ReasonTearingDown, "waiting for "+d.name()+" to go")
		}
	}
	return Done()
}

func (d *Dependent[P, C]) waitReason() string {
	if d.WaitReason != "" {
		return d.WaitReason
	}
	return ReasonWaitingForDependent
}

// setCondition sets d.Condition on parent, if d has one.
func (d *Dependent[P, C]) setCondition(parent P, status metav1.ConditionStatus, reason, message string) {
	if d.Condition == "" {
		return
	}
	statusutil.Set(parent, metav1.Condition{Type: d.Condition, Status: status, Reason: reason, Message: message})
}

// childTypes returns a new object of each child kind, once per kind.
func (w *Workflow[P]) childTypes() []client.Object {
	seen := map[string]bool{}
	var out []client.Object
	for _, d := range w.deps {
		o, _ := d.childType() // checked by NewWorkflow
		if k := fmt.Sprintf("%T", o); !seen[k] {
			seen[k] = true
			out = append(out, o)
		}
	}
	return out
}

// WithDependents makes SetupWithManager watch the child kinds of w (as
// WithOwns does), so that a child's change ends a Workflow's wait.
func WithDependents[P Object](w *Workflow[P]) SetupOption {
	return setupOnlyOption(func(o *setupOptions) { o.owns = append(o.owns, w.childTypes()...) })
}

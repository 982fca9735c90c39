package reconcile

import (
	"context"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/ownership"
)

// Dependent declares one child of a P, once: how it is built, what it
// waits for, when it is ready and when it is wanted at all. A Workflow
// applies a list of them; WithDependents registers their watches.
type Dependent[P Object, C client.Object] struct {
	// Name identifies the dependent in DependsOn and in messages.
	Name string
	// Build returns the desired child of parent: its name, namespace and
	// the fields the operator sets, as for EnsureChild. It is called for an
	// unwanted child too, to learn the name of the object to delete, unless
	// ObjectKey is set.
	Build func(ctx context.Context, parent P) (C, error)
	// Apply, instead of Build, returns the child as a client-go apply
	// configuration: only the fields it sets are applied and owned (see
	// Children.EnsureChildApplied). Set one of Build and Apply.
	Apply func(ctx context.Context, parent P) (runtime.ApplyConfiguration, error)
	// DependsOn names the dependents that must be ready before this one is
	// applied. One that is not wanted does not hold it back.
	DependsOn []string
	// Ready reports whether the live child is ready, and if not, why. nil
	// means ready once applied.
	Ready func(child C) (ready bool, message string)
	// Wanted reports whether parent wants the child; nil means always. An
	// unwanted child that exists and that parent controls is deleted;
	// another's object of its name is left alone.
	Wanted func(parent P) bool
	// ObjectKey, if set, names the child's object without building it:
	// an unwanted child is found by it, so that Build need not work
	// without the inputs only a wanted child has. nil calls Build.
	ObjectKey func(parent P) client.ObjectKey
	// CreateOnly creates the child once and never changes it
	// (Children.EnsureChildCreated): for a Job or another one-shot object.
	CreateOnly bool
	// Adopt lets the Workflow take over an existing object of the child's
	// name that has no controller (WithOrphanAdoption); without it such an
	// object is refused.
	Adopt bool
	// Applied, if set, is called after each apply with the live child, the
	// child as the cache held it before (nil when it was created) and what
	// the apply did: the place for events and for status read from the
	// child.
	Applied func(ctx context.Context, parent P, live, old C, op ChildWrite)
	// Condition, if set, is a condition type of the parent that tracks the
	// child: True once ready, False while not (with Ready's message, or
	// reason Failed and the error when building or applying it failed),
	// Unknown while a dependency holds it back, True with reason NotWanted
	// when unwanted. Name it in WithSummary to make Ready follow it.
	Condition string
	// WaitReason is the reason of the Waiting result while this child is
	// not ready (default ReasonWaitingForDependent).
	WaitReason string
}

// DependentOf is a Dependent of any child type; only *Dependent
// implements it.
type DependentOf[P Object] interface {
	name() string
	dependsOn() []string
	childType() (client.Object, error)
	validate() error
	waitReason() string
	reconcile(ctx context.Context, wp *workflowPass[P]) dependentState
	remove(ctx context.Context, wp *workflowPass[P]) (gone, foreign bool, err error)
}

func (d *Dependent[P, C]) name() string        { return d.Name }
func (d *Dependent[P, C]) dependsOn() []string { return d.DependsOn }

// childType returns a new C, for a watch of the child kind.
func (d *Dependent[P, C]) childType() (client.Object, error) {
	t := reflect.TypeFor[C]()
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct || t == reflect.TypeFor[*unstructured.Unstructured]() {
		return nil, fmt.Errorf("dependent %q: child type %v must be a pointer to a typed struct, such as *appsv1.Deployment", d.Name, t)
	}
	return reflect.New(t.Elem()).Interface().(client.Object), nil
}

func (d *Dependent[P, C]) validate() error {
	switch {
	case (d.Build == nil) == (d.Apply == nil):
		return fmt.Errorf("dependent %q: set one of Build and Apply", d.Name)
	case d.CreateOnly && (d.Apply != nil || d.Adopt):
		return fmt.Errorf("dependent %q: CreateOnly takes Build, and adopts nothing", d.Name)
	}
	return nil
}

// desired returns the child d declares for parent, and its apply
// configuration when d has Apply; for Apply, the child carries only the
// name and namespace.
func (d *Dependent[P, C]) desired(ctx context.Context, wp *workflowPass[P]) (C, runtime.ApplyConfiguration, error) {
	var zero C
	if d.Build != nil {
		c, err := d.Build(ctx, wp.parent)
		return c, nil, err
	}
	ac, err := d.Apply(ctx, wp.parent)
	if err != nil {
		return zero, nil, err
	}
	u, typed, err := wp.children.fromApplyConfiguration(ac)
	if err != nil {
		return zero, nil, err
	}
	c, ok := typed.(C)
	if !ok {
		return zero, nil, fmt.Errorf("apply configuration of kind %s, want %T", u.GetKind(), zero)
	}
	c.SetName(u.GetName())
	c.SetNamespace(u.GetNamespace())
	return c, ac, nil
}

// dependentState is what one pass found of a dependent.
type dependentState struct {
	wanted, ready bool
	message       string
	err           error
}

func (d *Dependent[P, C]) reconcile(ctx context.Context, wp *workflowPass[P]) dependentState {
	parent := wp.parent
	if d.Wanted != nil && !d.Wanted(parent) {
		return d.unwanted(ctx, wp)
	}
	desired, ac, err := d.desired(ctx, wp)
	if err != nil {
		return d.failed(parent, fmt.Errorf("building %s: %w", d.Name, err))
	}
	if blocker, msg := wp.blocked(d.DependsOn); blocker != "" {
		msg = fmt.Sprintf("waiting for %s: %s", blocker, msg)
		d.setCondition(parent, "Unknown", ReasonWaitingForDependent, msg)
		return dependentState{wanted: true, message: msg}
	}
	var old C
	if d.Applied != nil {
		if o, err := d.childType(); err == nil {
			if err := wp.children.client.Get(ctx, client.ObjectKeyFromObject(desired), o); err == nil {
				old = o.(C)
			}
		}
	}
	var opts []EnsureOption
	if d.Adopt {
		opts = append(opts, WithOrphanAdoption())
	}
	var op ChildWrite
	switch {
	case d.CreateOnly:
		op, err = wp.children.EnsureChildCreated(ctx, parent, desired)
	case ac != nil:
		var live client.Object
		if live, op, err = wp.children.EnsureChildApplied(ctx, parent, ac, opts...); err == nil {
			desired = live.(C)
		}
	default:
		op, err = wp.children.EnsureChild(ctx, parent, desired, opts...)
	}
	if err != nil {
		return d.failed(parent, fmt.Errorf("applying %s: %w", d.Name, err))
	}
	if d.Applied != nil {
		d.Applied(ctx, parent, desired, old, op)
	}
	st := dependentState{wanted: true, ready: true}
	if d.Ready != nil {
		st.ready, st.message = d.Ready(desired)
	}
	if st.ready {
		d.setCondition(parent, "True", ReasonDependentReady, "")
	} else {
		d.setCondition(parent, "False", ReasonDependentNotReady, st.message)
	}
	return st
}

// failed reports err, the failure of a wanted child, in d's condition.
func (d *Dependent[P, C]) failed(parent P, err error) dependentState {
	d.setCondition(parent, "False", ReasonDependentFailed, err.Error())
	return dependentState{wanted: true, err: err}
}

// unwanted deletes d's child if parent controls it. Another's object of
// its name is not the child: left alone, it holds nothing back.
func (d *Dependent[P, C]) unwanted(ctx context.Context, wp *workflowPass[P]) dependentState {
	msg := "not wanted by the spec"
	if _, foreign, err := d.remove(ctx, wp); err != nil {
		return dependentState{err: err}
	} else if foreign {
		msg += "; an object of its name that is not the parent's is left alone"
	}
	d.setCondition(wp.parent, "True", ReasonNotWanted, msg)
	return dependentState{ready: true}
}

// remove deletes d's child if the parent controls it, and reports whether
// it is gone, or the object of its name is another's (foreign).
func (d *Dependent[P, C]) remove(ctx context.Context, wp *workflowPass[P]) (gone, foreign bool, err error) {
	var obj client.Object
	if d.ObjectKey != nil {
		o, err := d.childType()
		if err != nil {
			return false, false, err
		}
		key := d.ObjectKey(wp.parent)
		o.SetName(key.Name)
		o.SetNamespace(key.Namespace)
		obj = o
	} else {
		desired, _, err := d.desired(ctx, wp)
		if err != nil {
			return false, false, fmt.Errorf("building %s to learn its name (set ObjectKey to name it without building): %w", d.Name, err)
		}
		obj = desired
	}
	obj.SetUID("") // whatever holds the name goes, not a UID Build copied
	if _, err := wp.children.DeleteChild(ctx, wp.parent, obj); ownership.IsConflict(err) {
		return true, true, nil
	} else if err != nil {
		return false, false, fmt.Errorf("deleting %s: %w", d.Name, err)
	}
	// DeleteChild read the object into obj: gone unless it was there and
	// is still going (a finalizer of its own).
	if obj.GetUID() == "" {
		return true, false, nil
	}
	err = wp.children.client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	if apierrors.IsNotFound(err) {
		return true, false, nil
	}
	return false, false, err
}

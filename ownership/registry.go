package ownership

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CleanupFunc is one cleanup step run while an object is being finalized.
// It must be idempotent: after a partial failure Finalizers.Run runs every
// step again on the next reconcile, including the steps that succeeded, and
// a step may also be re-run after the operator restarts mid-cleanup. A step
// whose external resource is already gone must return nil.
type CleanupFunc func(ctx context.Context, obj client.Object) error

// Finalizers is an ordered registry of named, independent cleanup steps that
// together make up an object's finalization. A typical controller keeps one
// finalizer on the object (EnsureFinalizer) and, once the object is being
// deleted, calls Run and removes the finalizer (RemoveFinalizer) only when
// Run returns nil.
//
// Run has CleanupFunc's signature, so a generic reconciler's finalize hook
// can be f.Run itself, and one registry can be a step of another.
//
// The zero value is an empty registry ready to use. Register steps during
// setup; Register and Run are safe to call concurrently, and Run sees the
// steps registered before it started.
type Finalizers struct {
	mu    sync.RWMutex
	steps []cleanupStep
}

type cleanupStep struct {
	name string
	fn   CleanupFunc
}

// NewFinalizers returns an empty registry.
func NewFinalizers() *Finalizers { return &Finalizers{} }

// Register appends a cleanup step. name identifies the step in errors and
// must be non-empty and unique within f; fn must not be nil. Otherwise
// Register returns an error wrapping ErrInvalidStep and f is unchanged.
func (f *Finalizers) Register(name string, fn CleanupFunc) error {
	if name == "" {
		return fmt.Errorf("%w: name is empty: give every step a unique name", ErrInvalidStep)
	}
	if fn == nil {
		return fmt.Errorf("%w %q: function is nil: pass the cleanup function", ErrInvalidStep, name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.steps {
		if s.name == name {
			return fmt.Errorf("%w %q: name is already registered: choose another name", ErrInvalidStep, name)
		}
	}
	f.steps = append(f.steps, cleanupStep{name: name, fn: fn})
	return nil
}

// Names returns the registered step names in registration (and run) order.
func (f *Finalizers) Names() []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	names := make([]string, len(f.steps))
	for i, s := range f.steps {
		names[i] = s.name
	}
	return names
}

// Run runs every step in registration order and returns nil only when all
// of them succeeded.
//
// Failure policy: the steps are independent, so a failing step does not stop
// the ones after it; each failure is wrapped in a *StepError naming the step
// and all are joined with errors.Join. The only early stop is a done ctx:
// Run then runs no further step and adds an error wrapping ctx.Err() that
// names the skipped steps. When a step must not run unless an earlier one
// succeeded, make them a single step.
//
// Run does not touch the object's finalizers; remove yours with
// RemoveFinalizer after Run returns nil.
func (f *Finalizers) Run(ctx context.Context, obj client.Object) error {
	f.mu.RLock()
	steps := make([]cleanupStep, len(f.steps))
	copy(steps, f.steps)
	f.mu.RUnlock()

	var errs []error
	for i, s := range steps {
		if err := ctx.Err(); err != nil {
			skipped := make([]string, 0, len(steps)-i)
			for _, r := range steps[i:] {
				skipped = append(skipped, r.name)
			}
			errs = append(errs, fmt.Errorf("cleanup steps %q not run: %w", skipped, err))
			break
		}
		if err := s.fn(ctx, obj); err != nil {
			errs = append(errs, &StepError{Step: s.name, Err: err})
		}
	}
	return errors.Join(errs...)
}

package webhook

import (
	"context"
	"reflect"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/opkit-dev/opkit/reconcile"
)

// validator serves the hooks' checks as controller-runtime's
// admission.Validator.
type validator[T reconcile.Object] struct {
	gk     schema.GroupKind
	create reconcile.Validator[T]
	admit  reconcile.AdmissionValidator[T]
	warner reconcile.Warner[T]
}

var _ admission.Validator[reconcile.Object] = &validator[reconcile.Object]{}

// newValidator returns nil for hooks with no check to serve.
func newValidator[T reconcile.Object](gk schema.GroupKind, hooks reconcile.Hooks[T]) *validator[T] {
	v := &validator[T]{gk: gk}
	v.create, _ = hooks.(reconcile.Validator[T])
	v.admit, _ = hooks.(reconcile.AdmissionValidator[T])
	v.warner, _ = hooks.(reconcile.Warner[T])
	if v.create == nil && v.admit == nil && v.warner == nil {
		return nil
	}
	return v
}

func (v *validator[T]) ValidateCreate(ctx context.Context, obj T) (admission.Warnings, error) {
	var none T
	return v.check(ctx, none, obj)
}

func (v *validator[T]) ValidateUpdate(ctx context.Context, old, obj T) (admission.Warnings, error) {
	// Metadata-only writes must pass on an object stored while invalid,
	// or its finalizer could never be removed.
	if obj.GetDeletionTimestamp() != nil || !specChanged(old, obj) {
		return nil, nil
	}
	return v.check(ctx, old, obj)
}

func (v *validator[T]) ValidateDelete(context.Context, T) (admission.Warnings, error) {
	return nil, nil
}

// check runs the checks; old is nil on create.
func (v *validator[T]) check(ctx context.Context, old, obj T) (admission.Warnings, error) {
	var errs field.ErrorList
	if v.create != nil {
		errs = append(errs, v.create.Validate(ctx, obj)...)
	}
	if v.admit != nil {
		errs = append(errs, v.admit.ValidateAdmission(ctx, old, obj)...)
	}
	var warnings admission.Warnings
	if v.warner != nil {
		warnings = v.warner.Warnings(ctx, old, obj)
	}
	if len(errs) > 0 {
		return warnings, apierrors.NewInvalid(v.gk, obj.GetName(), errs)
	}
	return warnings, nil
}

// specChanged reports whether old and obj differ outside metadata and
// status.
func specChanged[T reconcile.Object](old, obj T) bool {
	a, errA := runtime.DefaultUnstructuredConverter.ToUnstructured(old)
	b, errB := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if errA != nil || errB != nil {
		return true // validate what cannot be compared
	}
	for _, m := range []map[string]any{a, b} {
		for _, k := range []string{"metadata", "status", "apiVersion", "kind"} {
			delete(m, k)
		}
	}
	return !equality.Semantic.DeepEqual(a, b)
}

// newObject returns a new T, the pointer type of a kind.
func newObject[T reconcile.Object]() T {
	return reflect.New(reflect.TypeFor[T]().Elem()).Interface().(T)
}

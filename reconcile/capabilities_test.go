package reconcile_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/reconcile"
)

// valueHooks has Reconcile on the value and Finalize on the pointer: a
// valueHooks value passed as hooks has no Finalize.
type valueHooks struct{}

func (valueHooks) Reconcile(context.Context, *testv1.Widget) reconcile.Result {
	return reconcile.Done()
}
func (*valueHooks) Finalize(context.Context, *testv1.Widget) reconcile.Result {
	return reconcile.Done()
}

// listValidator's Validate returns []error, not field.ErrorList.
type listValidator struct{ valueHooks }

func (*listValidator) Validate(context.Context, *testv1.Widget) []error { return nil }

// voidDefaulter has opkit's Default of before v0.1, which returned nothing.
type voidDefaulter struct{ valueHooks }

func (*voidDefaulter) Default(context.Context, *testv1.Widget) {}

// oneObjectAdmissionValidator's ValidateAdmission lacks the old object.
type oneObjectAdmissionValidator struct{ valueHooks }

func (*oneObjectAdmissionValidator) ValidateAdmission(context.Context, *testv1.Widget) field.ErrorList {
	return nil
}

// stringWarner's Warnings returns one string.
type stringWarner struct{ valueHooks }

func (*stringWarner) Warnings(context.Context, *testv1.Widget, *testv1.Widget) string { return "" }

// allHooks has every capability, rightly.
type allHooks struct{ valueHooks }

func (*allHooks) Validate(context.Context, *testv1.Widget) field.ErrorList { return nil }
func (*allHooks) Default(context.Context, *testv1.Widget) error            { return nil }
func (*allHooks) ValidateAdmission(context.Context, *testv1.Widget, *testv1.Widget) field.ErrorList {
	return nil
}
func (*allHooks) Warnings(context.Context, *testv1.Widget, *testv1.Widget) []string { return nil }

// TestHooksWithAMissedCapabilityAreRefused: an optional hook method that
// would never be called (on the pointer of a value passed
// as hooks, or with another signature) fails New and SetupWithManager,
// naming the method and the fix.
func TestHooksWithAMissedCapabilityAreRefused(t *testing.T) {
	tests := []struct {
		name  string
		hooks reconcile.Hooks[*testv1.Widget]
		want  []string // in the error; none for no error
	}{
		{"Finalize on the pointer of a value", valueHooks{}, []string{"Finalize", "pointer", "&reconcile_test.valueHooks"}},
		{"the same hooks as a pointer", &valueHooks{}, nil},
		{"Validate with another signature", &listValidator{}, []string{"Validate", "[]error", "field.ErrorList"}},
		{"Default returning nothing", &voidDefaulter{}, []string{"Default", "want Default(context.Context, *v1.Widget) error"}},
		{"ValidateAdmission without the old object", &oneObjectAdmissionValidator{}, []string{"ValidateAdmission", "*v1.Widget, *v1.Widget"}},
		{"Warnings returning a string", &stringWarner{}, []string{"Warnings", "[]string"}},
		{"every capability", &allHooks{}, nil},
	}
	f := newFixture(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := reconcile.New[*testv1.Widget](f.c, env.Scheme, tt.hooks)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if !errors.Is(err, reconcile.ErrHookSignature) {
				t.Fatalf("New = %v, want ErrHookSignature", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

package reconcile

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// ErrHookSignature is returned by New, SetupWithManager and package webhook
// for hooks with a Finalize, Validate, Default, ValidateAdmission or
// Warnings
// method that would never be called:
// one declared on the pointer of a value passed as hooks, or one with
// another signature. The capabilities are found by type assertion, so
// either slip would silently disable the step.
var ErrHookSignature = errors.New("reconcile: a hook method would never be called")

// CheckHooks returns ErrHookSignature, naming the method and the fix, when
// an optional method of hooks misses its interface.
func CheckHooks[T Object](hooks Hooks[T]) error { return checkCapabilities(hooks) }

// checkCapabilities refuses hooks whose optional methods miss their
// interface.
//
// MethodByName is called with constant names only: any other use of
// reflect's method lookup makes the linker keep every exported method of
// every type, 13 MB more in the memcached operator.
func checkCapabilities[T Object](hooks Hooks[T]) error {
	ht := reflect.TypeOf(hooks)
	pt := ht
	if ht.Kind() != reflect.Pointer {
		pt = reflect.PointerTo(ht)
	}
	obj := reflect.TypeFor[T]().String()
	caps := []struct {
		method, want string
		iface        reflect.Type
		m            reflect.Method
		found        bool
	}{
		{method: "Finalize", want: "(context.Context, " + obj + ") reconcile.Result", iface: reflect.TypeFor[Finalizer[T]]()},
		{method: "Validate", want: "(context.Context, " + obj + ") field.ErrorList", iface: reflect.TypeFor[Validator[T]]()},
		{method: "Default", want: "(context.Context, " + obj + ") error", iface: reflect.TypeFor[Defaulter[T]]()},
		{method: "ValidateAdmission", want: "(context.Context, " + obj + ", " + obj + ") field.ErrorList", iface: reflect.TypeFor[AdmissionValidator[T]]()},
		{method: "Warnings", want: "(context.Context, " + obj + ", " + obj + ") []string", iface: reflect.TypeFor[Warner[T]]()},
	}
	caps[0].m, caps[0].found = pt.MethodByName("Finalize")
	caps[1].m, caps[1].found = pt.MethodByName("Validate")
	caps[2].m, caps[2].found = pt.MethodByName("Default")
	caps[3].m, caps[3].found = pt.MethodByName("ValidateAdmission")
	caps[4].m, caps[4].found = pt.MethodByName("Warnings")
	for _, c := range caps {
		switch {
		case ht.Implements(c.iface) || !c.found:
		case pt.Implements(c.iface):
			return fmt.Errorf("%w: %s has a pointer receiver (*%v), and the hooks are a %v value, which lacks it: pass &%v{...}",
				ErrHookSignature, c.method, ht, ht, ht)
		default:
			return fmt.Errorf("%w: %v has %s%s, want %s%s: fix the signature, or rename the method",
				ErrHookSignature, ht, c.method, signature(c.m.Type, 1), c.method, c.want)
		}
	}
	return nil
}

// signature formats func type f without its name and first skip parameters
// (the receiver of a method value's type).
func signature(f reflect.Type, skip int) string {
	var in, out []string
	for i := skip; i < f.NumIn(); i++ {
		in = append(in, f.In(i).String())
	}
	for i := range f.NumOut() {
		out = append(out, f.Out(i).String())
	}
	s := "(" + strings.Join(in, ", ") + ")"
	switch len(out) {
	case 0:
	case 1:
		s += " " + out[0]
	default:
		s += " (" + strings.Join(out, ", ") + ")"
	}
	return s
}

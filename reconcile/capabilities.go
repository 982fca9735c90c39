package reconcile

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// ErrHookSignature is returned by New and SetupWithManager for hooks with
// a Finalize, Validate or Default method the Reconciler would never call:
// one declared on the pointer of a value passed as hooks, or one with
// another signature. The capabilities are found by type assertion, so
// either slip would silently disable the step.
var ErrHookSignature = errors.New("reconcile: a hook method would never be called")

// checkCapabilities refuses hooks whose optional methods miss their
// interface.
func checkCapabilities[T Object](hooks Hooks[T]) error {
	caps := []struct {
		method string
		iface  reflect.Type
	}{
		{"Finalize", reflect.TypeFor[Finalizer[T]]()},
		{"Validate", reflect.TypeFor[Validator[T]]()},
		{"Default", reflect.TypeFor[Defaulter[T]]()},
	}
	ht := reflect.TypeOf(hooks)
	for _, c := range caps {
		if ht.Implements(c.iface) {
			continue
		}
		want := signature(c.iface.Method(0).Type, 0)
		if ht.Kind() != reflect.Pointer && reflect.PointerTo(ht).Implements(c.iface) {
			return fmt.Errorf("%w: %s has a pointer receiver (*%v), and the hooks are a %v value, which lacks it: pass &%v{...}",
				ErrHookSignature, c.method, ht, ht, ht)
		}
		m, ok := reflect.PointerTo(ht).MethodByName(c.method)
		if ht.Kind() == reflect.Pointer {
			m, ok = ht.MethodByName(c.method)
		}
		if ok {
			return fmt.Errorf("%w: %v has %s%s, want %s%s: fix the signature, or rename the method",
				ErrHookSignature, ht, c.method, signature(m.Type, 1), c.method, want)
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

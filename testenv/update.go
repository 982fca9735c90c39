package testenv

import (
	"testing"

	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Update reads obj's latest version, applies change to it and writes it,
// again on a conflict, so that a test's edit of an object its operator
// writes too (a finalizer, a status) does not fail on the race. obj ends
// as written; an error that is not a conflict fails t.
func Update[T client.Object](t testing.TB, c client.Client, obj T, change func(T)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change(obj)
		return c.Update(t.Context(), obj)
	})
	if err != nil {
		t.Fatalf("updating %T %s: %v", obj, client.ObjectKeyFromObject(obj), err)
	}
}

package harness

import (
	"context"
	"errors"
	"testing"
)

func TestAdmittedRetriesRefusals(t *testing.T) {
	t.Parallel()
	refusals := []error{
		errors.New(`Internal error occurred: failed calling webhook "vmemcached.cache.opkit.dev": connect: connection refused`),
		errors.New(`failed calling webhook "mmemcached.cache.opkit.dev": no endpoints available`),
	}
	calls := 0
	Admitted(t.Context(), t, "a patch", func(context.Context) error {
		calls++
		if calls <= len(refusals) {
			return refusals[calls-1]
		}
		return nil
	})
	if calls != 3 {
		t.Errorf("call made %d times, want 3: two refusals, then admitted", calls)
	}
}

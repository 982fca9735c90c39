package harness

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
)

// WaitForAPI returns a setup step that adds an API group to the suite
// client's scheme with addToScheme and waits, for up to a minute, until
// every list kind in lists can be listed: the CRDs the suite installed are
// served. Use it after envfuncs.SetupCRDs.
func WaitForAPI(addToScheme func(*runtime.Scheme) error, lists ...k8s.ObjectList) env.Func {
	return func(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
		r := cfg.Client().Resources()
		if err := addToScheme(r.GetScheme()); err != nil {
			return ctx, fmt.Errorf("registering the API of the suite's CRDs: %w", err)
		}
		var lastErr error
		err := wait.For(func(ctx context.Context) (bool, error) {
			for _, l := range lists {
				if lastErr = r.List(ctx, l); lastErr != nil {
					return false, nil
				}
			}
			return true, nil
		}, wait.WithContext(ctx), wait.WithTimeout(time.Minute), wait.WithInterval(time.Second))
		if err != nil && lastErr != nil {
			return ctx, fmt.Errorf("waiting for the suite's CRDs to be served: %w; last list error: %w", err, lastErr)
		}
		if err != nil {
			return ctx, fmt.Errorf("waiting for the suite's CRDs to be served: %w", err)
		}
		return ctx, nil
	}
}

// WaitFor polls check every interval until it reports true, and fails t
// after timeout with what and the note check returned last (what it saw).
func WaitFor(ctx context.Context, t *testing.T, what string, timeout, interval time.Duration, check func(context.Context) (bool, string)) {
	t.Helper()
	var note string
	err := wait.For(func(ctx context.Context) (bool, error) {
		ok, n := check(ctx)
		// What check saw when the wait's own deadline cut it short is
		// that deadline, not news: keep the note before it.
		if ctx.Err() == nil || note == "" {
			note = n
		}
		return ok, nil
	}, wait.WithContext(ctx), wait.WithTimeout(timeout), wait.WithInterval(interval))
	if err != nil {
		t.Fatalf("waiting for %s: %v; last seen: %s", what, err, note)
	}
}

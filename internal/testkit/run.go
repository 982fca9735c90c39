package testkit

import (
	"context"
	"testing"
)

// Runner is anything started with a context and run until it is
// cancelled, such as a controller-runtime manager.
type Runner interface {
	Start(ctx context.Context) error
}

// Run starts r in a goroutine with a context derived from t.Context and
// returns that context. When the test ends, the context is cancelled and
// Run waits for r to return; an error it returned fails the test.
func Run(t testing.TB, r Runner) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%T: %v", r, err)
		}
	})
	return ctx
}

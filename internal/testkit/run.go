package testkit

import (
	"context"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"
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

// Start is Run for a runner the test stops itself: the returned stop
// cancels r and waits for it, once; the test's end calls it too. A stop
// that takes over 20 s fails the test with every goroutine's stack.
func Start(t testing.TB, name string, r Runner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			return
		case <-time.After(20 * time.Second):
		}
		var dump strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&dump, 1)
		t.Errorf("%s: not stopped 20 s after its cancel (%v); goroutines:\n%s", name, <-done, dump.String())
	})
	t.Cleanup(stop)
	return stop
}

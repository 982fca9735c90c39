package testkit

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// Recorder is a testing.TB that records failures instead of failing the
// real test, for testing test helpers. Fatalf and Fatal end the calling
// goroutine, as testing.T's do; run the helper with RunTB.
type Recorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
	fatal  bool
}

// Helper does nothing.
func (r *Recorder) Helper() {}

// Errorf records a failure.
func (r *Recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// Error records a failure.
func (r *Recorder) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }

// Fatalf records a failure and ends the calling goroutine.
func (r *Recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	r.mu.Lock()
	r.fatal = true
	r.mu.Unlock()
	runtime.Goexit()
}

// Fatal records a failure and ends the calling goroutine.
func (r *Recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

// Fataled reports whether Fatal or Fatalf was called.
func (r *Recorder) Fataled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fatal
}

// Failures returns the recorded failures, one per line.
func (r *Recorder) Failures() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.errors, "\n")
}

// RunTB calls f with a fresh Recorder in its own goroutine, so that Fatalf
// can end it, and returns the Recorder once f has returned.
func RunTB(t testing.TB, f func(tb testing.TB)) *Recorder {
	t.Helper()
	r := &Recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

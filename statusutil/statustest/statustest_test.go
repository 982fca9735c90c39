package statustest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/klient/wait"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/statusutil"
	"github.com/opkit-dev/opkit/statusutil/statustest"
)

// recorder is a testing.TB that records failures instead of failing the
// real test. Fatalf ends the calling goroutine, as testing.T's does.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
	fatal  bool
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	r.mu.Lock()
	r.fatal = true
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.errors, "\n")
}

// run calls f with a fresh recorder in its own goroutine, so that Fatalf can
// end it, and returns the recorder.
func run(t *testing.T, f func(tb testing.TB)) *recorder {
	t.Helper()
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func widget(gen int64) *testv1.Widget {
	return &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", Generation: gen}}
}

func TestAssertCondition(t *testing.T) {
	w := widget(3)
	statusutil.MarkTrue(w, "Ready", "Succeeded", "all good")
	tests := []struct {
		name     string
		want     metav1.Condition
		wantOK   bool
		wantText []string
	}{
		{name: "type status reason", want: metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Succeeded"}, wantOK: true},
		{name: "with message and generation", want: metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "all good", ObservedGeneration: 3}, wantOK: true},
		{name: "time is ignored", want: metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Succeeded", LastTransitionTime: metav1.Now()}, wantOK: true},
		{name: "wrong status", want: metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Succeeded"}, wantText: []string{"-want +got", "Status", `"False"`, `"True"`}},
		{name: "wrong message", want: metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "other"}, wantText: []string{"all good"}},
		{name: "wrong generation", want: metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Succeeded", ObservedGeneration: 4}, wantText: []string{"ObservedGeneration"}},
		{name: "absent", want: metav1.Condition{Type: "Available", Status: metav1.ConditionTrue}, wantText: []string{"no Available condition", "Ready=True"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ok bool
			r := run(t, func(tb testing.TB) { ok = statustest.AssertCondition(tb, w, tt.want) })
			if ok != tt.wantOK || (r.output() == "") != tt.wantOK {
				t.Fatalf("AssertCondition() = %v with output %q, want %v", ok, r.output(), tt.wantOK)
			}
			for _, s := range tt.wantText {
				if !strings.Contains(r.output(), s) {
					t.Errorf("output %q does not contain %q", r.output(), s)
				}
			}
		})
	}
}

func TestAssertNoCondition(t *testing.T) {
	w := widget(1)
	statusutil.MarkStalled(w, "InvalidSpec", "bad")
	var ok bool
	if r := run(t, func(tb testing.TB) { ok = statustest.AssertNoCondition(tb, w, "Reconciling") }); !ok || r.output() != "" {
		t.Errorf("AssertNoCondition(absent) = %v, %q; want true and no output", ok, r.output())
	}
	r := run(t, func(tb testing.TB) { ok = statustest.AssertNoCondition(tb, w, "Stalled") })
	if ok || !strings.Contains(r.output(), "Stalled=True (reason InvalidSpec") {
		t.Errorf("AssertNoCondition(present) = %v, %q; want false and the condition", ok, r.output())
	}
}

func TestAssertConditionsValid(t *testing.T) {
	w := widget(1)
	statusutil.MarkTrue(w, "Ready", "Ok", "")
	var ok bool
	if r := run(t, func(tb testing.TB) { ok = statustest.AssertConditionsValid(tb, w) }); !ok || r.output() != "" {
		t.Errorf("AssertConditionsValid(valid) = %v, %q", ok, r.output())
	}
	statusutil.MarkTrue(w, "not valid!", "Ok", "")
	r := run(t, func(tb testing.TB) { ok = statustest.AssertConditionsValid(tb, w) })
	if ok || !strings.Contains(r.output(), "conditions[1].type") {
		t.Errorf("AssertConditionsValid(invalid) = %v, %q; want false naming conditions[1].type", ok, r.output())
	}
}

// newResources returns e2e-framework resources for the envtest control plane
// with the test API registered, and a Widget created in a fresh namespace.
func newResources(t *testing.T) (*resources.Resources, *testv1.Widget) {
	t.Helper()
	r, err := resources.New(env.Config)
	if err != nil {
		t.Fatalf("resources.New: %v", err)
	}
	if err := testv1.AddToScheme(r.GetScheme()); err != nil {
		t.Fatalf("registering the test API: %v", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "statustest-"}}
	if err := env.Client.Create(t.Context(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "w"}}
	if err := env.Client.Create(t.Context(), w); err != nil {
		t.Fatalf("creating widget: %v", err)
	}
	return r, w
}

// writeStatus re-reads the widget, applies mutate and writes the status.
func writeStatus(ctx context.Context, key client.ObjectKey, mutate func(*testv1.Widget)) error {
	w := &testv1.Widget{}
	if err := env.Client.Get(ctx, key, w); err != nil {
		return err
	}
	mutate(w)
	return env.Client.Status().Update(ctx, w)
}

func TestHasConditionGenerations(t *testing.T) {
	r, w := newResources(t)
	key := client.ObjectKeyFromObject(w)
	ctx := t.Context()
	probe := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name}}
	check := func(step string, want bool) {
		t.Helper()
		got, err := statustest.HasCondition(r, probe, "Ready", metav1.ConditionTrue)(ctx)
		if err != nil || got != want {
			t.Fatalf("%s: HasCondition() = %v, %v; want %v, nil (conditions %v)", step, got, err, want, probe.Status.Conditions)
		}
	}
	check("no conditions", false)

	if err := writeStatus(ctx, key, func(w *testv1.Widget) { statusutil.MarkFalse(w, "Ready", "Waiting", "") }); err != nil {
		t.Fatal(err)
	}
	check("Ready=False", false)

	if err := writeStatus(ctx, key, func(w *testv1.Widget) {
		statusutil.MarkTrue(w, "Ready", "Succeeded", "")
		statusutil.SetObservedGeneration(w)
	}); err != nil {
		t.Fatal(err)
	}
	check("Ready=True, current", true)

	// A spec change makes the condition stale.
	fresh := &testv1.Widget{}
	if err := env.Client.Get(ctx, key, fresh); err != nil {
		t.Fatal(err)
	}
	fresh.Spec.Replicas = 3
	if err := env.Client.Update(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	check("Ready=True for the previous generation", false)

	// The condition is current but status.observedGeneration is not.
	if err := writeStatus(ctx, key, func(w *testv1.Widget) {
		w.Status.Conditions = nil
		statusutil.MarkTrue(w, "Ready", "Succeeded", "")
	}); err != nil {
		t.Fatal(err)
	}
	check("Ready=True, status.observedGeneration stale", false)

	if err := writeStatus(ctx, key, func(w *testv1.Widget) { statusutil.SetObservedGeneration(w) }); err != nil {
		t.Fatal(err)
	}
	check("Ready=True, all current", true)
	check2, err := statustest.IsReady(r, probe)(ctx)
	if err != nil || !check2 {
		t.Errorf("IsReady() = %v, %v; want true, nil", check2, err)
	}
}

func TestHasConditionWithWaitFor(t *testing.T) {
	r, w := newResources(t)
	key := client.ObjectKeyFromObject(w)
	errc := make(chan error, 1)
	go func() {
		// A controller stand-in that finishes its work a little later.
		time.Sleep(300 * time.Millisecond)
		errc <- writeStatus(t.Context(), key, func(w *testv1.Widget) {
			statusutil.MarkTrue(w, "Available", "Up", "")
			statusutil.SetObservedGeneration(w)
		})
	}()
	err := wait.For(statustest.HasCondition(r, w, "Available", metav1.ConditionTrue),
		wait.WithContext(t.Context()), wait.WithInterval(50*time.Millisecond), wait.WithTimeout(30*time.Second))
	if err != nil {
		t.Fatalf("wait.For(HasCondition): %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("writing status: %v", err)
	}
	statustest.AssertCondition(t, w, metav1.Condition{Type: "Available", Status: metav1.ConditionTrue, Reason: "Up"})
}

func TestHasConditionErrors(t *testing.T) {
	r, w := newResources(t)
	ctx := t.Context()

	notFound := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: "absent"}}
	if ok, err := statustest.HasCondition(r, notFound, "Ready", metav1.ConditionTrue)(ctx); ok || err != nil {
		t.Errorf("not found: HasCondition() = %v, %v; want false, nil (keep polling)", ok, err)
	}

	noName := &testv1.Widget{}
	if ok, err := statustest.HasCondition(r, noName, "Ready", metav1.ConditionTrue)(ctx); ok || err == nil {
		t.Errorf("no name: HasCondition() = %v, %v; want false and an error", ok, err)
	}

	unregistered := &unregisteredWidget{Widget: testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name}}}
	ok, err := statustest.HasCondition(r, unregistered, "Ready", metav1.ConditionTrue)(ctx)
	if ok || !errors.Is(err, statustest.ErrNotInScheme) {
		t.Errorf("unregistered type: HasCondition() = %v, %v; want false and ErrNotInScheme", ok, err)
	}
	// wait.For stops at once instead of polling until the timeout.
	start := time.Now()
	err = wait.For(statustest.HasCondition(r, unregistered, "Ready", metav1.ConditionTrue), wait.WithImmediate(), wait.WithTimeout(time.Minute))
	if !errors.Is(err, statustest.ErrNotInScheme) || time.Since(start) > 10*time.Second {
		t.Errorf("wait.For with an unregistered type: err = %v after %v; want ErrNotInScheme at once", err, time.Since(start))
	}
}

// unregisteredWidget is a Go type that no scheme knows.
type unregisteredWidget struct{ testv1.Widget }

func TestWaitForCondition(t *testing.T) {
	r, w := newResources(t)
	key := client.ObjectKeyFromObject(w)
	if err := writeStatus(t.Context(), key, func(w *testv1.Widget) {
		statusutil.MarkFalse(w, "Ready", "Waiting", "for the database")
		statusutil.SetObservedGeneration(w)
	}); err != nil {
		t.Fatal(err)
	}

	rec := run(t, func(tb testing.TB) {
		statustest.WaitForCondition(tb, r, w, "Ready", metav1.ConditionTrue,
			wait.WithImmediate(), wait.WithInterval(50*time.Millisecond), wait.WithTimeout(300*time.Millisecond))
	})
	if !rec.fatal {
		t.Fatal("WaitForCondition did not fail on a condition that never became True")
	}
	for _, s := range []string{"waiting for Ready=True", "observedGeneration 1", `Ready=False (reason Waiting, observedGeneration 1, message "for the database")`} {
		if !strings.Contains(rec.output(), s) {
			t.Errorf("failure %q does not contain %q", rec.output(), s)
		}
	}

	rec = run(t, func(tb testing.TB) {
		statustest.WaitForCondition(tb, r, w, "Ready", metav1.ConditionFalse,
			wait.WithImmediate(), wait.WithInterval(50*time.Millisecond), wait.WithTimeout(10*time.Second))
	})
	if rec.fatal || rec.output() != "" {
		t.Errorf("WaitForCondition on a met condition failed: %s", rec.output())
	}
}

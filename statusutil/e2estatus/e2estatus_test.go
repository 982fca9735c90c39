package e2estatus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/klient/wait"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/statusutil"
	"github.com/opkit-dev/opkit/statusutil/e2estatus"
	"github.com/opkit-dev/opkit/statusutil/statustest"
)

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
		got, err := e2estatus.HasCondition(r, probe, "Ready", metav1.ConditionTrue)(ctx)
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
	check2, err := e2estatus.IsReady(r, probe)(ctx)
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
	err := wait.For(e2estatus.HasCondition(r, w, "Available", metav1.ConditionTrue),
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
	if ok, err := e2estatus.HasCondition(r, notFound, "Ready", metav1.ConditionTrue)(ctx); ok || err != nil {
		t.Errorf("not found: HasCondition() = %v, %v; want false, nil (keep polling)", ok, err)
	}

	noName := &testv1.Widget{}
	if ok, err := e2estatus.HasCondition(r, noName, "Ready", metav1.ConditionTrue)(ctx); ok || err == nil {
		t.Errorf("no name: HasCondition() = %v, %v; want false and an error", ok, err)
	}

	unregistered := &unregisteredWidget{Widget: testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name}}}
	ok, err := e2estatus.HasCondition(r, unregistered, "Ready", metav1.ConditionTrue)(ctx)
	if ok || !errors.Is(err, e2estatus.ErrNotInScheme) {
		t.Errorf("unregistered type: HasCondition() = %v, %v; want false and ErrNotInScheme", ok, err)
	}
	// wait.For stops at once instead of polling until the timeout.
	start := time.Now()
	err = wait.For(e2estatus.HasCondition(r, unregistered, "Ready", metav1.ConditionTrue), wait.WithImmediate(), wait.WithTimeout(time.Minute))
	if !errors.Is(err, e2estatus.ErrNotInScheme) || time.Since(start) > 10*time.Second {
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

	rec := testkit.RunTB(t, func(tb testing.TB) {
		e2estatus.WaitForCondition(tb, r, w, "Ready", metav1.ConditionTrue,
			wait.WithImmediate(), wait.WithInterval(50*time.Millisecond), wait.WithTimeout(300*time.Millisecond))
	})
	if !rec.Fataled() {
		t.Fatal("WaitForCondition did not fail on a condition that never became True")
	}
	for _, s := range []string{"waiting for Ready=True", "observedGeneration 1", `Ready=False (reason Waiting, observedGeneration 1, message "for the database")`} {
		if !strings.Contains(rec.Failures(), s) {
			t.Errorf("failure %q does not contain %q", rec.Failures(), s)
		}
	}

	rec = testkit.RunTB(t, func(tb testing.TB) {
		e2estatus.WaitForCondition(tb, r, w, "Ready", metav1.ConditionFalse,
			wait.WithImmediate(), wait.WithInterval(50*time.Millisecond), wait.WithTimeout(10*time.Second))
	})
	if rec.Fataled() || rec.Failures() != "" {
		t.Errorf("WaitForCondition on a met condition failed: %s", rec.Failures())
	}
}

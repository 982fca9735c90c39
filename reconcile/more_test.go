package reconcile_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
)

func TestEnsureChildUnstructured(t *testing.T) {
	f := newFixture(t)
	ch := f.children()
	owner := f.createWidget("owner", testv1.WidgetSpec{})
	desired := func(v string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"data": map[string]any{"k": v}}}
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		u.SetName("u")
		u.SetNamespace(f.ns)
		return u
	}
	for _, step := range []struct {
		value      string
		want       reconcile.ChildWrite
		wantWrites int
	}{
		{"1", reconcile.ChildCreated, 1},
		{"1", reconcile.ChildUnchanged, 0},
		{"2", reconcile.ChildUpdated, 1},
	} {
		f.counter.Reset()
		op, err := ch.EnsureChild(t.Context(), owner, desired(step.value))
		if err != nil || op != step.want {
			t.Fatalf("EnsureChild(k=%s) = %s, %v; want %s", step.value, op, err, step.want)
		}
		f.wantWrites(step.wantWrites)
	}
	cm := &corev1.ConfigMap{}
	testkit.Must(t, env.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "u"}, cm))
	if cm.Data["k"] != "2" {
		t.Errorf("data = %v, want k=2", cm.Data)
	}
}

func TestNegativePolarityCondition(t *testing.T) {
	f := newFixture(t)
	degraded := true
	hooks := &widgetHooks{children: f.children(), onReconc: func(_ context.Context, w *testv1.Widget) (reconcile.Result, bool) {
		if degraded {
			statusutil.MarkTrue(w, "Degraded", "ReplicaLost", "1 of 3 replicas lost")
		} else {
			statusutil.MarkFalse(w, "Degraded", "AllReplicas", "")
		}
		return reconcile.Done(), true
	}}
	r := newReconciler(t, f, hooks, reconcile.WithSummary(statusutil.WithNegativePolarityConditions("Degraded")))
	f.createWidget("w", testv1.WidgetSpec{})
	f.mustPass(r, "w")
	ready := statusutil.Get(f.get("w"), statusutil.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != "ReplicaLost" {
		t.Errorf("Ready with Degraded=True: %+v, want False/ReplicaLost", ready)
	}
	degraded = false
	f.mustPass(r, "w")
	if !statusutil.IsTrue(f.get("w"), statusutil.ConditionReady) {
		t.Errorf("Ready with Degraded=False: %+v, want True", conditionsOf(f.get("w")))
	}
}

func TestTerminalFinalizeKeepsFinalizerWithoutRetry(t *testing.T) {
	f := newFixture(t)
	hooks := &finalizingHooks{
		widgetHooks: widgetHooks{children: f.children()},
		results:     []reconcile.Result{reconcile.Terminal("ManualCleanupNeeded", errors.New("bucket is locked"))},
	}
	r := newReconciler(t, f, hooks)
	f.createWidget("w", testv1.WidgetSpec{})
	f.mustPass(r, "w")
	testkit.Must(t, env.Client.Delete(t.Context(), f.get("w")))
	res, err := f.pass(r, "w")
	if err == nil || res.RequeueAfter != 0 {
		t.Fatalf("terminal Finalize: %+v, %v; want a terminal error and no requeue", res, err)
	}
	w := f.get("w")
	if !controllerutil.ContainsFinalizer(w, finalizer) || !statusutil.IsTrue(w, statusutil.ConditionStalled) {
		t.Errorf("want the finalizer kept and Stalled=True, got finalizers %v conditions %+v", w.Finalizers, conditionsOf(w))
	}
	// Clean up: the next (successful) Finalize releases it.
	f.mustPass(r, "w")
	if !f.gone("w") {
		t.Error("widget not deleted after Finalize succeeded")
	}
}

// A finalizer left by an earlier version whose hooks had Finalize is
// released by hooks that no longer have it.
func TestLeftoverFinalizerIsReleased(t *testing.T) {
	f := newFixture(t)
	r := newReconciler(t, f, &widgetHooks{children: f.children()})
	w := f.createWidget("w", testv1.WidgetSpec{})
	controllerutil.AddFinalizer(w, r.FinalizerName())
	testkit.Must(t, env.Client.Update(t.Context(), w))
	testkit.Must(t, env.Client.Delete(t.Context(), w))
	f.mustPass(r, "w")
	if !f.gone("w") {
		t.Errorf("widget with a leftover %s finalizer was not released", r.FinalizerName())
	}
	if r.Name() != "widget" {
		t.Errorf("default name = %q, want widget", r.Name())
	}
}

func TestDefaultPredicate(t *testing.T) {
	base := func() *testv1.Widget {
		return &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Generation: 1, Labels: map[string]string{"a": "1"}}}
	}
	now := metav1.Now()
	tests := []struct {
		name   string
		mutate func(*testv1.Widget)
		want   bool
	}{
		{"status only", func(w *testv1.Widget) { w.Status.Replicas = 3 }, false},
		{"resync (no change)", func(*testv1.Widget) {}, false},
		{"spec (generation)", func(w *testv1.Widget) { w.Generation = 2 }, true},
		{"labels", func(w *testv1.Widget) { w.Labels["a"] = "2" }, true},
		{"annotations", func(w *testv1.Widget) { w.Annotations = map[string]string{"reconcile": "now"} }, true},
		{"finalizers", func(w *testv1.Widget) { w.Finalizers = []string{"x/y"} }, true},
		{"deletion", func(w *testv1.Widget) { w.DeletionTimestamp = &now }, true},
	}
	p := reconcile.DefaultPredicate()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := base()
			tt.mutate(n)
			if got := p.Update(event.UpdateEvent{ObjectOld: base(), ObjectNew: n}); got != tt.want {
				t.Errorf("Update passes = %v, want %v", got, tt.want)
			}
		})
	}
	if !p.Create(event.CreateEvent{Object: base()}) || !p.Delete(event.DeleteEvent{Object: base()}) {
		t.Error("creations and deletions must pass")
	}
}

func TestRequeueBy(t *testing.T) {
	tests := []struct {
		name  string
		r     reconcile.Result
		d     time.Duration
		kind  reconcile.Outcome
		after time.Duration
	}{
		{"done takes the schedule", reconcile.Done(), time.Hour, reconcile.OutcomeRequeueAfter, time.Hour},
		{"a sooner requeue stays", reconcile.RequeueAfter(time.Minute), time.Hour, reconcile.OutcomeRequeueAfter, time.Minute},
		{"a later requeue comes sooner", reconcile.RequeueAfter(2 * time.Hour), time.Hour, reconcile.OutcomeRequeueAfter, time.Hour},
		{"a wait keeps the sooner", reconcile.Waiting("R", "m", time.Minute), time.Hour, reconcile.OutcomeWaiting, time.Minute},
		{"a wait for a change gets a deadline", reconcile.WaitingForChange("R", "m"), time.Hour, reconcile.OutcomeWaiting, time.Hour},
		{"terminal is rechecked at the schedule", reconcile.Terminal("R", nil), time.Hour, reconcile.OutcomeTerminal, time.Hour},
		{"a retry is left to its backoff", reconcile.Retry(nil), time.Hour, reconcile.OutcomeRetry, 0},
		{"a due schedule waits a second", reconcile.Done(), -time.Minute, reconcile.OutcomeRequeueAfter, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.r.RequeueBy(tt.d)
			if got.Outcome() != tt.kind || got.After() != tt.after || got.Reason() != tt.r.Reason() || got.Message() != tt.r.Message() {
				t.Errorf("RequeueBy(%v) = %s after %v (%q, %q), want %s after %v", tt.d, got.Outcome(), got.After(), got.Reason(), got.Message(), tt.kind, tt.after)
			}
		})
	}
}

func TestResultConstructors(t *testing.T) {
	tests := []struct {
		name        string
		r           reconcile.Result
		kind        reconcile.Outcome
		after       time.Duration
		reason, msg string
		wantErr     bool
	}{
		{"zero value is done", reconcile.Result{}, reconcile.OutcomeDone, 0, "", "", false},
		{"requeue after 0 is done", reconcile.RequeueAfter(0), reconcile.OutcomeDone, 0, "", "", false},
		{"requeue after", reconcile.RequeueAfter(time.Minute), reconcile.OutcomeRequeueAfter, time.Minute, "", "", false},
		// A delay of 0 is no requeue, as for RequeueAfter and RecheckAfter.
		{"waiting without a delay waits for a change", reconcile.Waiting("R", "m", 0), reconcile.OutcomeWaiting, 0, "R", "m", false},
		{"waiting with a negative delay waits for a change", reconcile.Waiting("R", "m", -1), reconcile.OutcomeWaiting, 0, "R", "m", false},
		{"waiting with a delay", reconcile.Waiting("R", "m", time.Minute), reconcile.OutcomeWaiting, time.Minute, "R", "m", false},
		{"waiting for a change has no delay", reconcile.WaitingForChange("R", "m"), reconcile.OutcomeWaiting, 0, "R", "m", false},
		{"retry nil is still an error", reconcile.Retry(nil), reconcile.OutcomeRetry, 0, "", "retry requested", true},
		{"terminal nil is still an error", reconcile.Terminal("R", nil), reconcile.OutcomeTerminal, 0, "R", "terminal failure", true},
		{"terminal rechecked", reconcile.Terminal("R", nil).RecheckAfter(time.Minute), reconcile.OutcomeTerminal, time.Minute, "R", "terminal failure", true},
		{"recheck after 0 stays terminal", reconcile.Terminal("R", nil).RecheckAfter(0), reconcile.OutcomeTerminal, 0, "R", "terminal failure", true},
		// Rechecking anything but a Terminal result is a mistake: a retry
		// whose error says so, never a silent no-op.
		{"recheck of a wait for a change", reconcile.WaitingForChange("R", "m").RecheckAfter(time.Minute), reconcile.OutcomeRetry, 0, "",
			"reconcile: RecheckAfter on a result that is not Terminal: RecheckAfter(1m0s) on waiting (R: m); Waiting and RequeueAfter take their delay as an argument", true},
		{"recheck of a wait", reconcile.Waiting("R", "m", time.Second).RecheckAfter(time.Minute), reconcile.OutcomeRetry, 0, "",
			"reconcile: RecheckAfter on a result that is not Terminal: RecheckAfter(1m0s) on waiting (R: m); Waiting and RequeueAfter take their delay as an argument", true},
		{"recheck of a retry", reconcile.Retry(nil).RecheckAfter(time.Minute), reconcile.OutcomeRetry, 0, "",
			"reconcile: RecheckAfter on a result that is not Terminal: RecheckAfter(1m0s) on retry (retry requested); a Retry's backoff belongs to the controller", true},
		{"recheck of done", reconcile.Done().RecheckAfter(0), reconcile.OutcomeRetry, 0, "",
			"reconcile: RecheckAfter on a result that is not Terminal: RecheckAfter(0s) on done; Waiting and RequeueAfter take their delay as an argument", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.r
			if r.Outcome() != tt.kind || r.After() != tt.after || r.Reason() != tt.reason || r.Message() != tt.msg || (r.Err() != nil) != tt.wantErr {
				t.Errorf("got kind %s after %v reason %q message %q err %v", r.Outcome(), r.After(), r.Reason(), r.Message(), r.Err())
			}
			if misuse := strings.Contains(tt.msg, "not Terminal"); errors.Is(r.Err(), reconcile.ErrRecheckNotTerminal) != misuse {
				t.Errorf("errors.Is(%v, ErrRecheckNotTerminal) = %v, want %v", r.Err(), !misuse, misuse)
			}
		})
	}
	if s := reconcile.Outcome(42).String(); s != "Outcome(42)" {
		t.Errorf("unknown outcome String = %q", s)
	}
}

// TestWaitingReady keeps Waiting's doc true: Ready is Unknown while a pass
// waits, and False while a condition WithSummary names is False.
func TestWaitingReady(t *testing.T) {
	for _, tt := range []struct {
		name      string
		available metav1.ConditionStatus
		want      metav1.ConditionStatus
	}{
		{"no named condition False", metav1.ConditionTrue, metav1.ConditionUnknown},
		{"a named condition False", metav1.ConditionFalse, metav1.ConditionFalse},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			r := newReconciler(t, f, &widgetHooks{onReconc: func(_ context.Context, w *testv1.Widget) (reconcile.Result, bool) {
				statusutil.Set(w, metav1.Condition{Type: "Available", Status: tt.available, Reason: "Test"})
				return reconcile.Waiting("PodsStarting", "2 of 3 pods started", time.Minute), true
			}}, reconcile.WithSummary(statusutil.WithConditions("Available")))
			f.createWidget("w", testv1.WidgetSpec{})
			if _, err := f.pass(r, "w"); err != nil {
				t.Fatal(err)
			}
			if got := statusutil.Get(f.get("w"), statusutil.ConditionReady); got == nil || got.Status != tt.want {
				t.Errorf("Ready = %+v, want %s", got, tt.want)
			}
		})
	}
}

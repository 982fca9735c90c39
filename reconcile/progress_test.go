package reconcile_test

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
)

// WithProgressDelay: a generation that becomes Ready within the delay costs
// one status write; one still waiting after it is reported; failures and
// generations already reported are written at once.
func TestProgressDelay(t *testing.T) {
	waiting := reconcile.Waiting("PodsStarting", "0 of 1 pods ready", 5*time.Second)
	tests := []struct {
		name  string
		delay time.Duration
		// results of successive passes, and the write requests each sends
		results []reconcile.Result
		writes  []int
		sleep   time.Duration // before the last pass
		// Ready's status after the last pass
		ready string
	}{
		{"ready within the delay", time.Hour,
			[]reconcile.Result{waiting, waiting, reconcile.Done()}, []int{0, 0, 1}, 0, "True"},
		{"still waiting after the delay", 50 * time.Millisecond,
			[]reconcile.Result{waiting, waiting}, []int{0, 1}, 60 * time.Millisecond, "Unknown"},
		{"retry is written at once", time.Hour,
			[]reconcile.Result{reconcile.Retry(errTest("boom"))}, []int{1}, 0, "False"},
		{"no delay", 0,
			[]reconcile.Result{waiting, reconcile.Done()}, []int{1, 1}, 0, "True"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			var next reconcile.Result
			hooks := &widgetHooks{onReconc: func(context.Context, *testv1.Widget) (reconcile.Result, bool) { return next, true }}
			r := newReconciler(t, f, hooks, reconcile.WithProgressDelay(tt.delay))
			f.createWidget("w", testv1.WidgetSpec{})
			for i, res := range tt.results {
				if i == len(tt.results)-1 && tt.sleep > 0 {
					time.Sleep(tt.sleep)
				}
				next = res
				out, _ := f.pass(r, "w")
				f.wantWrites(tt.writes[i])
				if tt.writes[i] == 0 && (out.RequeueAfter <= 0 || out.RequeueAfter > 5*time.Second) {
					t.Errorf("pass %d: deferred with requeue %v, want (0, 5s]", i, out.RequeueAfter)
				}
			}
			w := f.get("w")
			if got := statusutil.Get(w, statusutil.ConditionReady); got == nil || string(got.Status) != tt.ready {
				t.Errorf("Ready = %v, want %s", got, tt.ready)
			}
		})
	}
}

// WaitingForChange: a pass that waits for a watch event is not requeued,
// unless its status is deferred, whose write must come back when the
// delay runs out even if no event does.
func TestWaitingForChange(t *testing.T) {
	tests := []struct {
		name  string
		delay time.Duration
		// the requeue the pass asks for is in [min, max]
		min, max time.Duration
		writes   int
	}{
		{"no delay: written, not requeued", 0, 0, 0, 1},
		{"deferred: requeued when the delay runs out", time.Hour, 59 * time.Minute, time.Hour, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			hooks := &widgetHooks{onReconc: func(context.Context, *testv1.Widget) (reconcile.Result, bool) {
				return reconcile.WaitingForChange("PodsStarting", "0 of 1 pods ready"), true
			}}
			r := newReconciler(t, f, hooks, reconcile.WithProgressDelay(tt.delay))
			f.createWidget("w", testv1.WidgetSpec{})
			out, err := f.pass(r, "w")
			if err != nil {
				t.Fatal(err)
			}
			f.wantWrites(tt.writes)
			if out.RequeueAfter < tt.min || out.RequeueAfter > tt.max {
				t.Errorf("RequeueAfter = %v, want within [%v, %v]", out.RequeueAfter, tt.min, tt.max)
			}
			if tt.writes == 0 {
				return
			}
			if c := statusutil.Get(f.get("w"), statusutil.ConditionReconciling); c == nil || c.Reason != "PodsStarting" {
				t.Errorf("Reconciling = %+v, want True with reason PodsStarting", c)
			}
		})
	}
}

// A spec change is deferred like a new object; once a generation is
// reported, a Waiting pass is written at once.
func TestProgressDelayAfterSpecChange(t *testing.T) {
	f := newFixture(t)
	next := reconcile.Done()
	hooks := &widgetHooks{onReconc: func(context.Context, *testv1.Widget) (reconcile.Result, bool) { return next, true }}
	r := newReconciler(t, f, hooks, reconcile.WithProgressDelay(time.Hour))
	f.createWidget("w", testv1.WidgetSpec{})
	f.mustPass(r, "w")
	f.wantWrites(1)

	w := f.get("w")
	w.Spec.Replicas = 2
	testkit.Must(t, env.Client.Update(t.Context(), w))
	next = reconcile.Waiting("Scaling", "1 of 2", 0)
	_, _ = f.pass(r, "w")
	f.wantWrites(0)
	if w := f.get("w"); w.Status.ObservedGeneration != 1 || !statusutil.IsTrue(w, statusutil.ConditionReady) {
		t.Errorf("deferred pass changed the status: observedGeneration %d, conditions %v", w.Status.ObservedGeneration, conditionsOf(w))
	}
	next = reconcile.Done()
	f.mustPass(r, "w")
	f.wantWrites(1)

	// Generation 2 is reported: losing a pod is news at once.
	next = reconcile.Waiting("PodLost", "1 of 2", 0)
	_, _ = f.pass(r, "w")
	f.wantWrites(1)
	if w := f.get("w"); !statusutil.IsTrue(w, statusutil.ConditionReconciling) {
		t.Errorf("conditions %v, want Reconciling=True", conditionsOf(w))
	}
}

// A deferred status is not something this Reconciler wrote: passes that
// read a version from before its own last write (a lagging cache) must not
// take the unwritten status for the real one, or the delay restarts and the
// status is never written while the cache lags.
func TestProgressDelayWithStaleReads(t *testing.T) {
	f := newFixture(t)
	created := f.createWidget("w", testv1.WidgetSpec{})
	cfg, counter := env.CountingConfig()
	c, serveStale := staleWidgetClient(t, cfg, created)
	hooks := &finalizingHooks{widgetHooks: widgetHooks{onReconc: func(context.Context, *testv1.Widget) (reconcile.Result, bool) {
		return reconcile.Waiting("PodsStarting", "0 of 1 pods ready", time.Second), true
	}}}
	r, err := reconcile.New[*testv1.Widget](c, env.Scheme, hooks, reconcile.WithProgressDelay(100*time.Millisecond))
	testkit.Must(t, err)
	req := crreconcile.Request{NamespacedName: client.ObjectKeyFromObject(created)}

	// The finalizer is written; the Waiting status is deferred.
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if got := counter.WritesTo("/status"); got != 0 {
		t.Fatalf("first pass wrote the status %d times, want it deferred (%s)", got, counter)
	}
	*serveStale = true // the cache still serves the version without our finalizer
	counter.Reset()
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if got := counter.Writes(); got != 0 {
		t.Fatalf("stale pass within the delay: %d writes, want 0 (%s)", got, counter)
	}
	time.Sleep(150 * time.Millisecond)
	counter.Reset()
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if got := counter.WritesTo("/status"); got != 1 {
		t.Errorf("stale pass after the delay: %d status writes, want 1 (%s)", got, counter)
	}
	if c := statusutil.Get(f.get("w"), statusutil.ConditionReconciling); c == nil || c.Reason != "PodsStarting" {
		t.Errorf("Reconciling = %+v, want the deferred PodsStarting status written", c)
	}
}

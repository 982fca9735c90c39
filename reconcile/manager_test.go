package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
)

// TestWithManager runs the Reconciler the way an operator does: a manager,
// cached reads, watches on the kind and its children. It checks convergence,
// the writes a spec change costs, and that the steady state sends no write
// request at all.
func TestWithManager(t *testing.T) {
	f := newFixture(t)
	name := "widget-" + f.ns // metrics are process-wide: one series per run
	cfg, counter := env.CountingConfig()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: env.Scheme,
		// Only this test's namespace: other tests leave widgets behind.
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{f.ns: {}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// The default of controller-runtime v0.24 and v0.25, said here so
		// that this test keeps running the Reconciler under it.
		Controller: config.Controller{UsePriorityQueue: ptr.To(true)},
	})
	testkit.Must(t, err)
	ch, err := reconcile.NewChildren(mgr.GetClient(), mgr.GetScheme())
	testkit.Must(t, err)
	hooks := &finalizingHooks{widgetHooks: widgetHooks{children: ch}}
	_, err = reconcile.SetupWithManager[*testv1.Widget](mgr, hooks,
		reconcile.WithName(name),
		reconcile.WithOwns(&corev1.ConfigMap{}),
		reconcile.WithSummary(statusutil.WithConditions("Available")),
		// Secrets labelled widget=<name> trigger a pass of that widget.
		reconcile.WithWatches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(
			func(_ context.Context, o client.Object) []crreconcile.Request {
				if n := o.GetLabels()["widget"]; n != "" {
					return []crreconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: n}}}
				}
				return nil
			}), builder.OnlyMetadata),
		reconcile.WithSkipNameValidation())
	testkit.Must(t, err)

	testkit.Run(t, mgr)

	f.createWidget("w", testv1.WidgetSpec{Replicas: 1, Message: "m"})
	waitFor(t, f, "w", func(w *testv1.Widget) bool {
		return w.Status.ObservedGeneration == 1 && statusutil.IsTrue(w, statusutil.ConditionReady)
	})

	// Steady state: let every watch event settle, then nothing may be
	// written to widgets or their children for a while.
	time.Sleep(time.Second)
	counter.Reset()
	time.Sleep(3 * time.Second)
	if n := counter.WritesTo("/widgets") + counter.WritesTo("/configmaps"); n != 0 {
		t.Errorf("steady state sent %d write requests (%s), want 0", n, counter)
	}

	// A watched, unowned kind triggers a pass (and, nothing having changed,
	// no write).
	passes := hooks.reconcils.Load()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: f.ns, Labels: map[string]string{"widget": "w"}}}
	testkit.Must(t, env.Client.Create(t.Context(), secret))
	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return hooks.reconcils.Load() > passes, nil
	})
	if err != nil {
		t.Errorf("a labelled Secret did not trigger a pass (WithWatches): %v", err)
	}

	// A spec change costs one child write and one status write.
	w := f.get("w")
	w.Spec.Replicas = 4
	counter.Reset()
	testkit.Must(t, env.Client.Update(t.Context(), w))
	waitFor(t, f, "w", func(w *testv1.Widget) bool { return w.Status.ObservedGeneration == 2 && w.Status.Replicas == 4 })
	time.Sleep(time.Second)
	if got := counter.WritesTo("/widgets"); got != 1 {
		t.Errorf("writes to widgets for a spec change = %d, want 1 (%s)", got, counter)
	}
	if got := counter.WritesTo("/configmaps"); got != 1 {
		t.Errorf("writes to configmaps for a spec change = %d, want 1 (%s)", got, counter)
	}

	// Deletion: Finalize runs and the object goes away.
	testkit.Must(t, env.Client.Delete(t.Context(), w))
	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return f.gone("w"), nil
	})
	if err != nil {
		t.Fatalf("widget not deleted: %v", err)
	}
	if hooks.finalized.Load() == 0 {
		t.Error("Finalize never ran")
	}

	// The outcomes are visible on the controller-runtime registry.
	if n := metricValue(t, reconcile.MetricOutcomes, map[string]string{"controller": name, "outcome": "done"}); n < 2 {
		t.Errorf("%s{outcome=done} = %v, want >= 2", reconcile.MetricOutcomes, n)
	}
	if n := metricValue(t, reconcile.MetricOutcomes, map[string]string{"controller": name, "outcome": "finalized"}); n != 1 {
		t.Errorf("%s{outcome=finalized} = %v, want 1", reconcile.MetricOutcomes, n)
	}
	if n := metricValue(t, reconcile.MetricStatusWrites, map[string]string{"controller": name, "result": "written"}); n != 2 {
		t.Errorf("%s{result=written} = %v, want 2", reconcile.MetricStatusWrites, n)
	}
}

// TestResyncCostsNoPass checks that the informers' periodic resyncs, which
// replay every cached object as an update that changes nothing, cost no
// pass: neither the reconciled kind's nor its owned children's. With N
// objects a resync period of P costs N passes every P otherwise, which is
// most of an operator's passes under a create burst.
func TestResyncCostsNoPass(t *testing.T) {
	f := newFixture(t)
	syncPeriod := time.Second
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{f.ns: {}}, SyncPeriod: &syncPeriod},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	testkit.Must(t, err)
	ch, err := reconcile.NewChildren(mgr.GetClient(), mgr.GetScheme())
	testkit.Must(t, err)
	hooks := &widgetHooks{children: ch}
	_, err = reconcile.SetupWithManager[*testv1.Widget](mgr, hooks,
		reconcile.WithName("resync-"+f.ns),
		reconcile.WithOwns(&corev1.ConfigMap{}),
		reconcile.WithSummary(statusutil.WithConditions("Available")),
		reconcile.WithSkipNameValidation())
	testkit.Must(t, err)
	testkit.Run(t, mgr)

	for _, name := range []string{"a", "b"} {
		f.createWidget(name, testv1.WidgetSpec{Replicas: 1, Message: "m"})
		waitFor(t, f, name, func(w *testv1.Widget) bool {
			return w.Status.ObservedGeneration == 1 && statusutil.IsTrue(w, statusutil.ConditionReady)
		})
	}
	time.Sleep(time.Second) // the last writes' watch events
	passes := hooks.reconcils.Load()
	time.Sleep(4 * syncPeriod)
	if got := hooks.reconcils.Load() - passes; got != 0 {
		t.Errorf("%d passes in %s of resyncs (period %s) with nothing changed, want 0", got, 4*syncPeriod, syncPeriod)
	}

	// A real change of a child still brings its owner back.
	cm := &corev1.ConfigMap{}
	testkit.Must(t, env.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "a-child"}, cm))
	cm.Data = map[string]string{"replicas": "changed by hand"}
	testkit.Must(t, env.Client.Update(t.Context(), cm))
	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		got := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
			return false, err
		}
		return got.Data["replicas"] != "changed by hand", nil
	})
	if err != nil {
		t.Errorf("a child changed by hand was not put back: %v", err)
	}
}

func waitFor(t *testing.T, f *fixture, name string, cond func(*testv1.Widget) bool) {
	t.Helper()
	var last *testv1.Widget
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		w := &testv1.Widget{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, w); err != nil {
			return false, nil
		}
		last = w
		return cond(w), nil
	})
	if err != nil {
		t.Fatalf("widget %s did not reach the expected state: %v; last labels %v, status %+v", name, err, last.Labels, last.Status)
	}
}

// metricValue returns the value of the counter with the given labels on
// controller-runtime's registry (0 when absent).
func metricValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	testkit.Must(t, err)
	for _, fam := range families {
		if fam.GetName() != name {
			continue
		}
	metrics:
		for _, m := range fam.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestEvents checks that events follow transitions, not passes, and that
// ReadyEventsOnRecovery drops only the first Ready.
func TestEvents(t *testing.T) {
	type step struct {
		name string
		fail error
		want []string // event prefixes "Type Reason"
	}
	tests := []struct {
		name  string
		opts  []reconcile.Option
		steps []step
	}{
		{"default: every Ready", nil, []step{
			{"becomes ready for the first time", nil, []string{"Normal Ready"}},
			{"steady state", nil, nil},
			{"fails", errTest("disk full"), []string{"Warning ReconcileFailed"}},
			{"fails the same way", errTest("disk full"), nil},
			{"fails differently", errTest("disk on fire"), []string{"Warning ReconcileFailed"}},
			{"recovers", nil, []string{"Normal Ready"}},
		}},
		{"ReadyEventsOnRecovery", []reconcile.Option{reconcile.WithReadyEvents(reconcile.ReadyEventsOnRecovery)}, []step{
			{"becomes ready for the first time", nil, nil},
			{"steady state", nil, nil},
			{"fails", errTest("disk full"), []string{"Warning ReconcileFailed"}},
			{"recovers", nil, []string{"Normal Ready"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			rec := events.NewFakeRecorder(100)
			var fail error
			hooks := &widgetHooks{children: f.children(), onReconc: func(context.Context, *testv1.Widget) (reconcile.Result, bool) {
				if fail != nil {
					return reconcile.Retry(fail), true
				}
				return reconcile.Result{}, false
			}}
			r := newReconciler(t, f, hooks, append([]reconcile.Option{reconcile.WithEventRecorder(rec)}, tt.opts...)...)
			f.createWidget("w", testv1.WidgetSpec{})
			for _, s := range tt.steps {
				fail = s.fail
				_, _ = f.pass(r, "w")
				if diff := cmp.Diff(s.want, drainEvents(rec)); diff != "" {
					t.Errorf("%s: events (-want +got):\n%s", s.name, diff)
				}
			}
		})
	}
}

type errTest string

func (e errTest) Error() string { return string(e) }

// TestOwnWritesForgottenOnceCached: the Reconciler remembers its status
// write only until the cache shows it, even when no pass follows: here a
// labelled Secret queues a pass whose only write is a condition, and the
// status-only change queues none.
func TestOwnWritesForgottenOnceCached(t *testing.T) {
	f := newFixture(t)
	mgr := f.manager()
	hooks := &widgetHooks{children: f.children()}
	hooks.onReconc = func(ctx context.Context, w *testv1.Widget) (reconcile.Result, bool) {
		var s corev1.Secret
		if env.Client.Get(ctx, client.ObjectKey{Namespace: w.Namespace, Name: "poke"}, &s) == nil {
			statusutil.MarkTrue(w, "Poked", "SecretSeen", "")
		}
		return reconcile.Result{}, false
	}
	r, err := reconcile.SetupWithManager[*testv1.Widget](mgr, hooks,
		reconcile.WithName("ownwrites-"+f.ns), reconcile.WithOwns(&corev1.ConfigMap{}),
		reconcile.WithWatches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(
			func(_ context.Context, o client.Object) []crreconcile.Request {
				return []crreconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: "w"}}}
			})),
		reconcile.WithSkipNameValidation())
	testkit.Must(t, err)
	testkit.Run(t, mgr)

	f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
	waitFor(t, f, "w", func(w *testv1.Widget) bool {
		return w.Status.ObservedGeneration == 1 && statusutil.IsTrue(w, statusutil.ConditionReady)
	})
	time.Sleep(time.Second) // the passes of the child's events
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "poke", Namespace: f.ns}}
	testkit.Must(t, env.Client.Create(t.Context(), secret))
	waitFor(t, f, "w", func(w *testv1.Widget) bool { return statusutil.IsTrue(w, "Poked") })
	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return reconcile.OwnWritesHeld(r) == 0, nil
	})
	if err != nil {
		t.Errorf("%d objects' writes remembered 5 s after the last, want 0", reconcile.OwnWritesHeld(r))
	}
}

// TestCreatesForgottenOnceSeen: SetupWithManager's watch of an owned kind
// tells the Reconciler that a child it created was seen, so the record it
// trusts in place of a GET (TestEnsureChildTrustsItsCreateUntilItsEvent)
// ends with the event, and a child deleted then is created again.
func TestCreatesForgottenOnceSeen(t *testing.T) {
	f := newFixture(t)
	mgr := f.manager()
	ch, err := reconcile.NewChildren(mgr.GetClient(), env.Scheme, reconcile.WithUncachedReader(mgr.GetAPIReader()))
	testkit.Must(t, err)
	r, err := reconcile.SetupWithManager[*testv1.Widget](mgr, &widgetHooks{children: ch},
		reconcile.WithName("unseen-"+f.ns), reconcile.WithOwns(&corev1.ConfigMap{}), reconcile.WithSkipNameValidation())
	testkit.Must(t, err)
	testkit.Run(t, mgr)

	f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
	waitFor(t, f, "w", func(w *testv1.Widget) bool {
		return w.Status.ObservedGeneration == 1 && statusutil.IsTrue(w, statusutil.ConditionReady)
	})
	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return reconcile.UnseenCreatesHeld(r) == 0, nil
	})
	if err != nil {
		t.Errorf("%d creates waiting for their event 5 s after the child's create, want 0", reconcile.UnseenCreatesHeld(r))
	}

	child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "w-child", Namespace: f.ns}}
	old := &corev1.ConfigMap{}
	testkit.Must(t, env.Client.Get(t.Context(), client.ObjectKeyFromObject(child), old))
	testkit.Must(t, env.Client.Delete(t.Context(), child))
	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(child), child)
		return err == nil && child.UID != old.UID, nil
	})
	if err != nil {
		t.Errorf("the deleted child was not created again: %v", err)
	}
}

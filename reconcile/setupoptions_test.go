package reconcile_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/shard"
)

// countingLimiter is a rate limiter that counts the items it was asked
// about.
type countingLimiter struct {
	workqueue.TypedRateLimiter[crreconcile.Request]
	asked atomic.Int32
}

func (l *countingLimiter) When(r crreconcile.Request) time.Duration {
	l.asked.Add(1)
	return l.TypedRateLimiter.When(r)
}

// TestWithControllerOptions: controller-runtime's controller options
// (here a rate limiter and a log constructor) and a raw source reach the
// controller SetupWithManager builds, and opkit's predicates stay.
func TestWithControllerOptions(t *testing.T) {
	f := newFixture(t)
	mgr := newManager(t, config.Controller{SkipNameValidation: ptr.To(true)})
	limiter := &countingLimiter{TypedRateLimiter: workqueue.DefaultTypedControllerRateLimiter[crreconcile.Request]()}
	var logged atomic.Int32
	events := make(chan event.GenericEvent, 1)
	hooks := &widgetHooks{children: f.children()}
	fail := atomic.Bool{}
	fail.Store(true)
	// The controller sees the Widgets of earlier tests too: count ours.
	var passes atomic.Int32
	hooks.onReconc = func(_ context.Context, w *testv1.Widget) (reconcile.Result, bool) {
		if w.Namespace != f.ns {
			return reconcile.Done(), true
		}
		passes.Add(1)
		if fail.Load() {
			return reconcile.Retry(errTest("once")), true
		}
		return reconcile.Result{}, false
	}
	_, err := reconcile.SetupWithManager[*testv1.Widget](mgr, hooks,
		reconcile.WithName("controller-options"),
		reconcile.WithControllerOptions(controller.Options{
			RateLimiter: limiter,
			LogConstructor: func(*crreconcile.Request) logr.Logger {
				logged.Add(1)
				return logr.Discard()
			},
		}),
		reconcile.WithRawSource(source.Channel(events, &handler.EnqueueRequestForObject{})))
	testkit.Must(t, err)
	testkit.Run(t, mgr)

	f.createWidget("w", testv1.WidgetSpec{})
	waitFor(t, f, "w", func(*testv1.Widget) bool { return limiter.asked.Load() > 0 })
	fail.Store(false)
	waitFor(t, f, "w", func(w *testv1.Widget) bool { return w.Status.ObservedGeneration == 1 })
	if logged.Load() == 0 {
		t.Error("the log constructor was never called")
	}

	before := passes.Load()
	events <- event.GenericEvent{Object: &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: f.ns}}}
	deadline := time.Now().Add(30 * time.Second)
	for passes.Load() == before {
		if time.Now().After(deadline) {
			t.Fatal("an event of the raw source caused no pass")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The default predicate still drops a status-only update.
	before = passes.Load()
	testkit.Must(t, setExternal(t.Context(), "w", f.ns, metav1.ConditionTrue, "external"))
	time.Sleep(time.Second)
	if got := passes.Load(); got != before {
		t.Errorf("a status-only update caused %d passes, want 0", got-before)
	}
}

// TestWithControllerOptionsRefusesAReconciler: the controller's Reconciler
// is the one SetupWithManager builds.
func TestWithControllerOptionsRefusesAReconciler(t *testing.T) {
	mgr := newManager(t, config.Controller{SkipNameValidation: ptr.To(true)})
	_, err := reconcile.SetupWithManager[*testv1.Widget](mgr, &widgetHooks{},
		reconcile.WithControllerOptions(controller.Options{Reconciler: crreconcile.Func(nil)}))
	if err == nil || !strings.Contains(err.Error(), "WithControllerOptions") {
		t.Errorf("SetupWithManager = %v, want an error naming WithControllerOptions", err)
	}
}

// TestWithShard runs the Reconciler on replicas a and b of one ring:
// each Widget and its child get the label of their slot, and pass only
// on the member holding it; when b stops, a takes its Widgets over and
// rolls out their changes.
func TestWithShard(t *testing.T) {
	f := newFixture(t)
	ring := shard.Ring{Name: "widgets", Namespace: f.ns, LeaseDuration: 3 * time.Second, Slots: 8}
	var mu sync.Mutex
	passedBy := map[string]map[string]bool{} // widget -> replicas
	// Without Leases: WithShard must not need them in the manager's scheme.
	scheme := runtime.NewScheme()
	testkit.Must(t, testv1.AddToScheme(scheme))
	testkit.Must(t, corev1.AddToScheme(scheme))
	start := func(identity string) (stop func()) {
		mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
			Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
			Controller: config.Controller{SkipNameValidation: ptr.To(true)},
			NewCache:   ring.NewCache(identity, &testv1.Widget{}, &corev1.ConfigMap{}),
		})
		testkit.Must(t, err)
		hooks := &widgetHooks{children: f.children()}
		hooks.onReconc = func(_ context.Context, w *testv1.Widget) (reconcile.Result, bool) {
			mu.Lock()
			defer mu.Unlock()
			if passedBy[w.Name] == nil {
				passedBy[w.Name] = map[string]bool{}
			}
			passedBy[w.Name][identity] = true
			return reconcile.Result{}, false
		}
		_, err = reconcile.SetupWithManager[*testv1.Widget](mgr, hooks, reconcile.WithName("sharded-"+identity),
			reconcile.WithOwns(&corev1.ConfigMap{}), reconcile.WithShard(shard.For(ring)))
		testkit.Must(t, err)
		return testkit.Start(t, "replica "+identity, mgr)
	}
	// holders maps each slot to the member whose Lease lists it.
	holders := func() map[int]string {
		held, err := ring.Holders(t.Context(), env.Client)
		testkit.Must(t, err)
		out := map[int]string{}
		for m, slots := range held {
			for _, n := range slots {
				out[n] = m
			}
		}
		return out
	}
	start("a")
	stopB := start("b")
	for end := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		h, held := holders(), map[string]int{}
		for _, m := range h {
			held[m]++
		}
		if held["a"] == 4 && held["b"] == 4 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("slots held: %v; want 4 each", held)
		}
	}
	h := holders()
	var names []string
	for i := range 8 {
		names = append(names, fmt.Sprintf("w-%d", i))
		f.createWidget(names[i], testv1.WidgetSpec{})
	}
	slot := func(name string) string {
		return strconv.Itoa(ring.Slot(client.ObjectKey{Namespace: f.ns, Name: name}))
	}
	member := func(name string) string { return h[ring.Slot(client.ObjectKey{Namespace: f.ns, Name: name})] }
	for _, n := range names {
		waitFor(t, f, n, func(w *testv1.Widget) bool {
			return w.Status.ObservedGeneration == 1 && w.Labels[ring.SlotLabel()] == slot(n)
		})
	}
	// Children carry their owner's slot, from their creation on.
	for _, n := range names {
		var cm corev1.ConfigMap
		testkit.Must(t, env.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: n + "-child"}, &cm))
		if got := cm.Labels[ring.SlotLabel()]; got != slot(n) {
			t.Errorf("%s-child labelled with slot %q, want its Widget's %s", n, got, slot(n))
		}
	}
	mu.Lock()
	for _, n := range names {
		if diff := cmp.Diff(map[string]bool{member(n): true}, passedBy[n]); diff != "" {
			t.Errorf("%s passed by (-want +got):\n%s", n, diff)
		}
	}
	mu.Unlock()

	stopB()
	var moved string
	for _, n := range names {
		if member(n) == "b" {
			moved = n
		}
	}
	if moved == "" {
		t.Fatal("b held no Widget: the test proves nothing")
	}
	w := f.get(moved)
	w.Spec.Message = "after b left"
	testkit.Must(t, env.Client.Update(t.Context(), w))
	waitFor(t, f, moved, func(w *testv1.Widget) bool { return w.Status.ObservedGeneration == 2 })
	mu.Lock()
	defer mu.Unlock()
	if !passedBy[moved]["a"] {
		t.Errorf("%s, b's, passed by %v after b left; want a", moved, passedBy[moved])
	}
}

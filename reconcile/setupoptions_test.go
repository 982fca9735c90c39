package reconcile_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
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

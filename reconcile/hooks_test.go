package reconcile_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testenv"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
)

// widgetHooks mirrors each Widget into a ConfigMap child and reports
// Available. Fields override single steps for a test.
type widgetHooks struct {
	children  *reconcile.Children
	onReconc  func(ctx context.Context, w *testv1.Widget) (reconcile.Result, bool)
	reconcils atomic.Int32
}

func (h *widgetHooks) Reconcile(ctx context.Context, w *testv1.Widget) reconcile.Result {
	h.reconcils.Add(1)
	if h.onReconc != nil {
		if res, done := h.onReconc(ctx, w); done {
			return res
		}
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: w.Name + "-child", Namespace: w.Namespace, Labels: map[string]string{"widget": w.Name}},
		Data:       map[string]string{"replicas": strconv.Itoa(int(w.Spec.Replicas)), "message": w.Spec.Message},
	}
	if _, err := h.children.EnsureChild(ctx, w, cm); err != nil {
		return reconcile.Retry(err)
	}
	w.Status.Replicas = w.Spec.Replicas
	statusutil.MarkTrue(w, "Available", "ChildCreated", "")
	return reconcile.Done()
}

// finalizingHooks adds a Finalize step whose results come from a queue.
type finalizingHooks struct {
	widgetHooks
	mu        sync.Mutex
	results   []reconcile.Result // popped per call; Done when empty
	finalized atomic.Int32
}

func (h *finalizingHooks) Finalize(_ context.Context, _ *testv1.Widget) reconcile.Result {
	h.finalized.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.results) == 0 {
		return reconcile.Done()
	}
	r := h.results[0]
	h.results = h.results[1:]
	return r
}

// validatingHooks rejects a message of "invalid".
type validatingHooks struct{ widgetHooks }

func (h *validatingHooks) Validate(_ context.Context, w *testv1.Widget) field.ErrorList {
	if w.Spec.Message == "invalid" {
		return field.ErrorList{field.Invalid(field.NewPath("spec", "message"), w.Spec.Message, `must not be "invalid"`)}
	}
	return nil
}

func (h *validatingHooks) Default(_ context.Context, w *testv1.Widget) error {
	switch w.Spec.Message {
	case "":
		w.Spec.Message = "defaulted"
	case "cannot default":
		return errors.New("no default today")
	}
	return nil
}

// fixture is a Reconciler over a counting client, and a namespace.
type fixture struct {
	t       *testing.T
	c       client.Client
	counter *testenv.Counter
	ns      string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	c, counter, err := env.CountingClient()
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rec-"}}
	if err := env.Client.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, c: c, counter: counter, ns: ns.Name}
}

// manager is a manager whose cache holds only the fixture's namespace.
func (f *fixture) manager() ctrl.Manager {
	f.t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{f.ns: {}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	testkit.Must(f.t, err)
	return mgr
}

func (f *fixture) children() *reconcile.Children {
	f.t.Helper()
	ch, err := reconcile.NewChildren(f.c, env.Scheme, reconcile.WithChildrenFieldOwner("opkit-widget"))
	if err != nil {
		f.t.Fatal(err)
	}
	return ch
}

func newReconciler[H reconcile.Hooks[*testv1.Widget]](t *testing.T, f *fixture, hooks H, opts ...reconcile.Option) *reconcile.Reconciler[*testv1.Widget] {
	t.Helper()
	r, err := reconcile.New[*testv1.Widget](f.c, env.Scheme, hooks, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (f *fixture) createWidget(name string, spec testv1.WidgetSpec) *testv1.Widget {
	f.t.Helper()
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Spec: spec}
	if err := env.Client.Create(f.t.Context(), w); err != nil {
		f.t.Fatal(err)
	}
	return w
}

func (f *fixture) get(name string) *testv1.Widget {
	f.t.Helper()
	w := &testv1.Widget{}
	if err := env.Client.Get(f.t.Context(), types.NamespacedName{Namespace: f.ns, Name: name}, w); err != nil {
		f.t.Fatalf("getting widget %s: %v", name, err)
	}
	return w
}

func (f *fixture) gone(name string) bool {
	f.t.Helper()
	err := env.Client.Get(f.t.Context(), types.NamespacedName{Namespace: f.ns, Name: name}, &testv1.Widget{})
	if err != nil && !apierrors.IsNotFound(err) {
		f.t.Fatal(err)
	}
	return apierrors.IsNotFound(err)
}

// pass runs one reconcile pass and returns its result, with the request
// counter reset before it.
func (f *fixture) pass(r crreconcile.Reconciler, name string) (crreconcile.Result, error) {
	f.t.Helper()
	f.counter.Reset()
	return r.Reconcile(f.t.Context(), crreconcile.Request{NamespacedName: types.NamespacedName{Namespace: f.ns, Name: name}})
}

// mustPass runs a pass that must succeed without requeue.
func (f *fixture) mustPass(r crreconcile.Reconciler, name string) {
	f.t.Helper()
	res, err := f.pass(r, name)
	if err != nil {
		f.t.Fatalf("pass: %v", err)
	}
	if res != (crreconcile.Result{}) {
		f.t.Fatalf("pass result = %+v, want none", res)
	}
}

// wantWrites fails unless the last pass sent exactly n write requests.
func (f *fixture) wantWrites(n int) {
	f.t.Helper()
	if got := f.counter.Writes(); got != n {
		f.t.Errorf("write requests = %d, want %d (%s)", got, n, f.counter)
	}
}

// condition is the comparable part of a metav1.Condition.
type condition struct {
	Type, Status, Reason, Message string
	ObservedGeneration            int64
}

func conditionsOf(w *testv1.Widget) []condition {
	var out []condition
	for _, c := range w.Status.Conditions {
		out = append(out, condition{c.Type, string(c.Status), c.Reason, c.Message, c.ObservedGeneration})
	}
	return out
}

func wantConditions(t *testing.T, w *testv1.Widget, want []condition) {
	t.Helper()
	if diff := cmp.Diff(want, conditionsOf(w), cmpopts.SortSlices(func(a, b condition) bool { return a.Type < b.Type })); diff != "" {
		t.Errorf("conditions of %s (-want +got):\n%s", w.Name, diff)
	}
}

// staleWidgetClient returns a client on cfg whose reads of Widgets return
// old while *stale is true, as a cache that has not caught up with the
// writes since old does.
func staleWidgetClient(t *testing.T, cfg *rest.Config, old *testv1.Widget) (client.WithWatch, *bool) {
	t.Helper()
	stale := new(bool)
	base, err := client.NewWithWatch(cfg, client.Options{Scheme: env.Scheme})
	testkit.Must(t, err)
	return interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if w, ok := obj.(*testv1.Widget); ok && *stale {
				old.DeepCopyInto(w)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}), stale
}

// drainEvents returns the "Type Reason" of the events rec holds.
func drainEvents(rec *events.FakeRecorder) []string {
	var got []string
	for {
		select {
		case e := <-rec.Events:
			parts := strings.SplitN(e, " ", 3)
			got = append(got, parts[0]+" "+parts[1])
		default:
			return got
		}
	}
}

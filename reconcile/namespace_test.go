package reconcile_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/ownership"
	"github.com/opkit-dev/opkit/reconcile"
)

// podHooks keep a pod per Widget that stays, once deleted, until its
// Widget's Finalize lets it go: a stand-in for a pod Finalize needs (a
// final backup taken from it) that a node takes a while to stop.
type podHooks struct {
	children *reconcile.Children
	client   client.Client
	// finalized is 1 once a Finalize found its pod and NamespaceGoing,
	// -1 once one did not.
	finalized atomic.Int32
}

const podKeep = "test.opkit.dev/keep"

func (h *podHooks) Reconcile(ctx context.Context, w *testv1.Widget) reconcile.Result {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace, Finalizers: []string{podKeep}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/c"}}}}
	if _, err := h.children.EnsureChild(ctx, w, pod); err != nil {
		return reconcile.Retry(err)
	}
	return reconcile.Done()
}

func (h *podHooks) Finalize(ctx context.Context, w *testv1.Widget) reconcile.Result {
	pod := &corev1.Pod{}
	err := h.client.Get(ctx, client.ObjectKey{Namespace: w.Namespace, Name: w.Name}, pod)
	if client.IgnoreNotFound(err) != nil {
		return reconcile.Retry(err)
	}
	if err == nil && reconcile.NamespaceGoing(ctx) {
		h.finalized.CompareAndSwap(0, 1)
	} else {
		h.finalized.Store(-1)
	}
	if err == nil {
		if _, err := ownership.RemoveFinalizer(ctx, h.client, pod, podKeep); client.IgnoreNotFound(err) != nil {
			return reconcile.Retry(err)
		}
	}
	return reconcile.Done()
}

// TestNamespaceDeletionRunsFinalize: with ordered namespace deletion the
// namespace controller deletes a Widget only once the namespace's pods
// are gone, so a Finalize that needs them (a final backup) finds them
// gone, or, as here, keeps the namespace for good. WithNamespaceDeletion
// runs Finalize when the namespace's deletion starts, with the pod there
// and NamespaceGoing true, and the namespace goes.
func TestNamespaceDeletionRunsFinalize(t *testing.T) {
	env.StartControllerManager(t)
	f := newFixture(t)
	mgr := f.manager()
	ch, err := reconcile.NewChildren(mgr.GetClient(), mgr.GetScheme())
	testkit.Must(t, err)
	hooks := &podHooks{children: ch, client: mgr.GetClient()}
	_, err = reconcile.SetupWithManager[*testv1.Widget](mgr, hooks, reconcile.WithName("ns-deletion"),
		reconcile.WithOwns(&corev1.Pod{}), reconcile.WithNamespaceDeletion())
	testkit.Must(t, err)
	testkit.Start(t, "manager", mgr)

	f.createWidget("w", testv1.WidgetSpec{})
	poll(t, 30*time.Second, "the Widget's pod", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "w"}, &corev1.Pod{})
		return err == nil, client.IgnoreNotFound(err)
	})
	testkit.Must(t, env.Client.Delete(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}))
	// The namespace controller retries with a growing delay.
	poll(t, 90*time.Second, "the namespace gone", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Name: f.ns}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if got := hooks.finalized.Load(); got != 1 {
		t.Errorf("Finalize found its pod and NamespaceGoing: %v; want both", got == 1)
	}
}

// TestNamespaceDeletionNeedsNamespaceAccess: without list on namespaces
// SetupWithManager fails naming the RBAC, rather than passes waiting on
// an informer that never syncs.
func TestNamespaceDeletionNeedsNamespaceAccess(t *testing.T) {
	f := newFixture(t)
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "no-namespaces", Groups: []string{"system:authenticated"}}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{f.ns: {}}}})
	testkit.Must(t, err)
	_, err = reconcile.SetupWithManager[*testv1.Widget](mgr, &widgetHooks{children: f.children()},
		reconcile.WithName("ns-deletion-rbac"), reconcile.WithNamespaceDeletion())
	if err == nil || !strings.Contains(err.Error(), "list and watch on namespaces") || !apierrors.IsForbidden(err) {
		t.Errorf("SetupWithManager without access to namespaces: %v; want a Forbidden naming the RBAC", err)
	}
}

// poll waits up to d for cond, failing t with what it waited for.
func poll(t *testing.T, d time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, d, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestDropEventsInGoingNamespaces: events about objects of a namespace
// being deleted, which the API server refuses (client-go logs each
// refusal as an error), are dropped; others pass.
func TestDropEventsInGoingNamespaces(t *testing.T) {
	f := newFixture(t)
	inner := events.NewFakeRecorder(10)
	rec := reconcile.DropEventsInGoingNamespaces(inner, env.Client)
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: f.ns}}
	rec.Eventf(obj, nil, corev1.EventTypeNormal, "Step", "Act", "while the namespace lives")
	testkit.Must(t, env.Client.Delete(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}))
	rec.Eventf(obj, nil, corev1.EventTypeNormal, "Step", "Act", "while it is being deleted")
	close(inner.Events)
	var got []string
	for e := range inner.Events {
		got = append(got, e)
	}
	if diff := cmp.Diff([]string{"Normal Step while the namespace lives"}, got); diff != "" {
		t.Errorf("events passed on (-want +got):\n%s", diff)
	}
}

// TestNamespaceNotCachedYetIsNotGoing: a namespace the Reconciler's reader
// has not seen (a cache behind a namespace created with the object, or
// one whose selector leaves it out) is not a namespace being deleted: the
// object exists, so its namespace does. The pass reconciles and keeps the
// finalizer; before, NotFound read as gone and Finalize ran on a live
// object.
func TestNamespaceNotCachedYetIsNotGoing(t *testing.T) {
	f := newFixture(t)
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	testkit.Must(t, err)
	unseen := interceptor.NewClient(wc, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if m, ok := obj.(*metav1.PartialObjectMetadata); ok && m.Kind == "Namespace" {
				return apierrors.NewNotFound(corev1.Resource("namespaces"), key.Name)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	hooks := &finalizingHooks{widgetHooks: widgetHooks{children: f.children()}}
	r, err := reconcile.New[*testv1.Widget](unseen, env.Scheme, hooks, reconcile.WithNamespaceDeletion())
	testkit.Must(t, err)
	f.createWidget("w", testv1.WidgetSpec{})
	if _, err := f.pass(r, "w"); err != nil {
		t.Fatal(err)
	}
	if hooks.finalized.Load() != 0 || hooks.reconcils.Load() != 1 || len(f.get("w").Finalizers) != 1 {
		t.Errorf("Finalize ran %d times, Reconcile %d, finalizers %q; want Reconcile once and the finalizer kept",
			hooks.finalized.Load(), hooks.reconcils.Load(), f.get("w").Finalizers)
	}
}

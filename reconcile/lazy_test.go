package reconcile_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
)

// WidgetReconciler is shaped like a kubebuilder-scaffolded reconciler: a
// struct literal with a client and a scheme, whose Reconcile method the
// scaffold's tests call directly.
type WidgetReconciler struct {
	client.Client
	Scheme *runtime.Scheme
	opkit  reconcile.Lazy[*testv1.Widget]
}

func (r *WidgetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.opkit.Reconcile(ctx, req, r.newReconciler)
}

// newReconciler builds the opkit Reconciler from the struct's fields.
func (r *WidgetReconciler) newReconciler() (*reconcile.Reconciler[*testv1.Widget], error) {
	return reconcile.New[*testv1.Widget](r.Client, r.Scheme, publishHooks{}, reconcile.WithSummary(statusutil.WithConditions("Available")))
}

// publishHooks reports Available with no children.
type publishHooks struct{}

func (publishHooks) Reconcile(_ context.Context, w *testv1.Widget) reconcile.Result {
	statusutil.MarkTrue(w, "Available", "Published", "")
	return reconcile.Done()
}

// TestLazyKeepsAScaffoldedTestWorking: the reconciler is a struct literal,
// its Reconcile builds the opkit Reconciler once and runs passes with it.
func TestLazyKeepsAScaffoldedTestWorking(t *testing.T) {
	f := newFixture(t)
	f.createWidget("w", testv1.WidgetSpec{})
	r := &WidgetReconciler{Client: f.c, Scheme: env.Scheme}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: f.ns, Name: "w"}}
	for range 2 {
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	w := f.get("w")
	if !statusutil.IsTrue(w, statusutil.ConditionReady) || w.Status.ObservedGeneration != w.Generation {
		t.Errorf("status = %+v, want Ready and observedGeneration %d", w.Status, w.Generation)
	}
	first, err := r.opkit.Get(func() (*reconcile.Reconciler[*testv1.Widget], error) {
		t.Error("Get built a second Reconciler")
		return nil, nil
	})
	testkit.Must(t, err)
	if first == nil || first.FieldOwner() != "opkit-widget" {
		t.Errorf("Get after the passes = %v, want the Reconciler the first pass built", first)
	}

	// A Reconciler New refuses: every call says why, and build runs once.
	var bad reconcile.Lazy[*testv1.Widget]
	builds := 0
	build := func() (*reconcile.Reconciler[*testv1.Widget], error) {
		builds++
		return reconcile.New[*testv1.Widget](f.c, env.Scheme, publishHooks{}, reconcile.WithName(""))
	}
	for range 2 {
		if _, err := bad.Reconcile(t.Context(), req, build); err == nil {
			t.Fatal("Lazy.Reconcile with invalid options succeeded")
		}
	}
	if builds != 1 {
		t.Errorf("build ran %d times, want 1", builds)
	}
}

// A kubebuilder-scaffolded reconciler keeps its struct-literal shape and its
// Reconcile method, so the scaffold's tests keep working; the method is one
// line.
func ExampleLazy() {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "example-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		fmt.Println(err)
		return
	}
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns.Name}}
	if err := env.Client.Create(ctx, w); err != nil {
		fmt.Println(err)
		return
	}

	// As in the scaffold's controller test:
	r := &WidgetReconciler{Client: env.Client, Scheme: env.Client.Scheme()}
	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns.Name, Name: "demo"}})
	fmt.Println("error:", err)

	_ = env.Client.Get(ctx, client.ObjectKeyFromObject(w), w)
	fmt.Println("Ready:", statusutil.IsTrue(w, statusutil.ConditionReady))
	// Output:
	// error: <nil>
	// Ready: true
}

package guard_test

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/opkit-dev/opkit/guard"
	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/reconcile"
)

// dbHooks keeps a claim that holds a Widget's data until its final backup.
type dbHooks struct {
	children *reconcile.Children
	guard    *guard.Guard
}

func (h *dbHooks) Reconcile(ctx context.Context, w *testv1.Widget) reconcile.Result {
	g, err := h.guard.Ensure(ctx, w) // before any child
	if err != nil {
		return reconcile.Retry(err)
	}
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: w.Name + "-data", Namespace: w.Namespace}}
	if _, err := h.children.EnsureChild(ctx, w, guard.Hold(claim, g)); err != nil {
		return reconcile.Retry(err)
	}
	return reconcile.Done()
}

func (h *dbHooks) Finalize(ctx context.Context, w *testv1.Widget) reconcile.Result {
	// Take the final backup here: the claim stays, however w is deleted.
	if err := h.guard.Release(ctx, w); err != nil { // last
		return reconcile.Retry(err)
	}
	return reconcile.Done()
}

// An operator's main with dbHooks: Ensure first, Hold on each data child,
// Release last in Finalize, and a Collector for owners gone without it.
func ExampleNew() {
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{})
	if err != nil {
		panic(err) // in main; library code returns errors
	}
	g, err := guard.New(mgr.GetClient(), &testv1.Widget{})
	if err != nil {
		panic(err)
	}
	children, err := reconcile.NewChildren(mgr.GetClient(), mgr.GetScheme())
	if err != nil {
		panic(err)
	}
	if _, err := reconcile.SetupWithManager[*testv1.Widget](mgr, &dbHooks{children: children, guard: g},
		reconcile.WithOwns(&corev1.PersistentVolumeClaim{})); err != nil {
		panic(err)
	}
	collector, err := guard.NewCollector(g, mgr.GetAPIReader())
	if err != nil {
		panic(err)
	}
	if err := collector.SetupWithManager(mgr); err != nil {
		panic(err)
	}
	_ = mgr.Start(ctrl.SetupSignalHandler())
}

// The policy installed with the operator, here as the YAML a kustomize
// base would carry.
func ExamplePolicy() {
	policy, binding := guard.Policy("my-operator-guard")
	fmt.Println(policy.Kind, policy.Name, binding.Spec.ParamRef.Selector.MatchLabels)
	// Output: ValidatingAdmissionPolicy my-operator-guard map[opkit.dev/guard:true]
}

// A StatefulSet's controller makes its pods and claims from templates:
// HoldStatefulSet labels the templates, so that Policy holds them too.
func ExampleHoldStatefulSet() {
	g := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "db-guard", UID: "7c4a"}}
	sts := guard.HoldStatefulSet(&appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}}},
		},
	}, g)
	fmt.Println(sts.Spec.Template.Labels[guard.LabelHeldBy], sts.Spec.VolumeClaimTemplates[0].Labels[guard.LabelHeldBy], len(sts.OwnerReferences))
	// Output: 7c4a 7c4a 1
}

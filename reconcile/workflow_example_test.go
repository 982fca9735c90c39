package reconcile_test

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/reconcile"
)

// Declare a Widget's children once: a ConfigMap, a Deployment applied once
// the ConfigMap is there and tracked by the AppReady condition, and a
// PodDisruptionBudget wanted only with more than one replica (deleted
// otherwise). Call wf.Reconcile from the hooks' Reconcile and pass
// reconcile.WithDependents(wf) to SetupWithManager.
func ExampleNewWorkflow() {
	children, _ := reconcile.NewChildren(fake.NewClientBuilder().Build(), env.Scheme)
	meta := func(w *testv1.Widget, suffix string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: w.Name + suffix, Namespace: w.Namespace}
	}
	wf, err := reconcile.NewWorkflow[*testv1.Widget](children,
		&reconcile.Dependent[*testv1.Widget, *appsv1.Deployment]{
			Name:      "deployment",
			DependsOn: []string{"config"},
			Build: func(_ context.Context, w *testv1.Widget) (*appsv1.Deployment, error) {
				return &appsv1.Deployment{ObjectMeta: meta(w, ""), Spec: appsv1.DeploymentSpec{Replicas: &w.Spec.Replicas}}, nil
			},
			Ready: func(d *appsv1.Deployment) (bool, string) {
				return d.Status.AvailableReplicas == *d.Spec.Replicas, fmt.Sprintf("%d available", d.Status.AvailableReplicas)
			},
			Condition: "AppReady",
		},
		&reconcile.Dependent[*testv1.Widget, *corev1.ConfigMap]{
			Name: "config",
			Build: func(_ context.Context, w *testv1.Widget) (*corev1.ConfigMap, error) {
				return &corev1.ConfigMap{ObjectMeta: meta(w, "-config"), Data: map[string]string{"message": w.Spec.Message}}, nil
			},
		},
		&reconcile.Dependent[*testv1.Widget, *policyv1.PodDisruptionBudget]{
			Name:   "budget",
			Wanted: func(w *testv1.Widget) bool { return w.Spec.Replicas > 1 },
			Build: func(_ context.Context, w *testv1.Widget) (*policyv1.PodDisruptionBudget, error) {
				one := intstr.FromInt32(1)
				return &policyv1.PodDisruptionBudget{ObjectMeta: meta(w, ""), Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one}}, nil
			},
		},
	)
	fmt.Println(wf != nil, err)
	// Output: true <nil>
}

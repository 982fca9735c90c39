package smoke

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/klient/wait/conditions"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"
)

func TestDeploymentBecomesAvailable(t *testing.T) {
	labels := map[string]string{"app": "smoke"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}

	f := features.New("local cluster").
		Assess("nodes are Ready", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			var nodes corev1.NodeList
			err := wait.For(func(ctx context.Context) (bool, error) {
				if err := cfg.Client().Resources().List(ctx, &nodes); err != nil {
					return false, err
				}
				if len(nodes.Items) == 0 {
					return false, nil
				}
				for _, n := range nodes.Items {
					if !nodeReady(&n) {
						return false, nil
					}
				}
				return true, nil
			}, wait.WithContext(ctx), wait.WithTimeout(time.Minute))
			if err != nil {
				t.Fatalf("nodes not Ready: %v (have %d)", err, len(nodes.Items))
			}
			return ctx
		}).
		Assess("a Deployment becomes Available", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := cfg.Client().Resources().Create(ctx, dep); err != nil {
				t.Fatal(err)
			}
			cond := conditions.New(cfg.Client().Resources())
			if err := wait.For(cond.DeploymentAvailable(dep.Name, dep.Namespace), wait.WithContext(ctx), wait.WithTimeout(2*time.Minute)); err != nil {
				t.Fatalf("deployment not Available: %v", err)
			}
			var got appsv1.Deployment
			if err := cfg.Client().Resources().Get(ctx, dep.Name, dep.Namespace, &got); err != nil {
				t.Fatal(err)
			}
			if got.Status.AvailableReplicas != 2 {
				t.Errorf("availableReplicas = %d, want 2", got.Status.AvailableReplicas)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			_ = cfg.Client().Resources().Delete(ctx, dep)
			return ctx
		}).Feature()

	testEnv.Test(t, f)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

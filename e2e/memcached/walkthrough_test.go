package memcached

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/statusutil"
	"github.com/opkit-dev/opkit/statusutil/e2estatus"
)

const (
	name      = "memcached-sample"
	image1    = "memcached:1.6"
	image2    = "memcached:1.6-alpine"
	timeout   = 3 * time.Minute
	pollEvery = time.Second
)

// The walkthrough of examples/memcached/README.md, step by step.
func TestWalkthrough(t *testing.T) {
	var ns string
	mc := func() *v1beta1.Memcached {
		return &v1beta1.Memcached{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	}

	f := features.New("memcached walkthrough").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			ns = envconf.RandomName("memcached", 16)
			if err := cfg.Client().Resources().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			return ctx
		}).
		Assess("size 3 becomes Ready with 3 available pods", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			m := mc()
			m.Spec = v1beta1.MemcachedSpec{Replicas: 3, Image: image1}
			if err := r.Create(ctx, m); err != nil {
				t.Fatal(err)
			}
			waitReady(ctx, t, r, m)
			dep := &appsv1.Deployment{}
			testkit.Must(t, r.Get(ctx, name, ns, dep))
			if dep.Status.AvailableReplicas != 3 || dep.Status.ReadyReplicas != 3 {
				t.Errorf("Deployment available %d ready %d, want 3/3", dep.Status.AvailableReplicas, dep.Status.ReadyReplicas)
			}
			waitNodesArePods(ctx, t, r, m, 3)
			for _, child := range []k8s.Object{&corev1.Service{}, &policyv1.PodDisruptionBudget{}} {
				testkit.Must(t, r.Get(ctx, name, ns, child))
			}
			return ctx
		}).
		Assess("size 4 runs 4 pods", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			updateSpec(ctx, t, r, ns, func(s *v1beta1.MemcachedSpec) { s.Replicas = 4 })
			waitReady(ctx, t, r, mc())
			waitNodesArePods(ctx, t, r, mc(), 4)
			return ctx
		}).
		Assess("a new image rolls out", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			updateSpec(ctx, t, r, ns, func(s *v1beta1.MemcachedSpec) { s.Image = image2 })
			waitReady(ctx, t, r, mc())
			dep := &appsv1.Deployment{}
			testkit.Must(t, r.Get(ctx, name, ns, dep))
			st := dep.Status
			if got := dep.Spec.Template.Spec.Containers[0].Image; got != image2 {
				t.Errorf("Deployment image = %q, want %q", got, image2)
			}
			if st.UpdatedReplicas != 4 || st.AvailableReplicas != 4 || st.ObservedGeneration != dep.Generation {
				t.Errorf("rollout not complete: %+v (generation %d)", st, dep.Generation)
			}
			pods := waitNodesArePods(ctx, t, r, mc(), 4)
			for _, p := range pods {
				if p.Spec.Containers[0].Image != image2 {
					t.Errorf("pod %s runs %s, want %s", p.Name, p.Spec.Containers[0].Image, image2)
				}
			}
			return ctx
		}).
		Assess("a deleted pod is replaced and status.nodes follows", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			m := mc()
			testkit.Must(t, r.Get(ctx, name, ns, m))
			victim := m.Status.Nodes[0]
			testkit.Must(t, r.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: victim, Namespace: ns}}))
			pods := waitNodesArePods(ctx, t, r, m, 4, victim)
			for _, p := range pods {
				if p.Name == victim {
					t.Errorf("deleted pod %s still listed", victim)
				}
			}
			waitReady(ctx, t, r, m)
			return ctx
		}).
		Assess("deleting the Memcached removes its children", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			testkit.Must(t, r.Delete(ctx, mc()))
			for _, obj := range []k8s.Object{mc(), &appsv1.Deployment{}, &corev1.Service{}, &policyv1.PodDisruptionBudget{}} {
				obj.SetName(name)
				obj.SetNamespace(ns)
				err := wait.For(func(ctx context.Context) (bool, error) {
					err := r.Get(ctx, name, ns, obj)
					return apierrors.IsNotFound(err), nil
				}, wait.WithContext(ctx), wait.WithTimeout(timeout), wait.WithInterval(pollEvery))
				if err != nil {
					t.Errorf("%T %s still exists: %v", obj, name, err)
				}
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if t.Failed() {
				t.Logf("operator log (end):\n%s", operator.Log())
			}
			_ = cfg.Client().Resources().Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			return ctx
		}).Feature()

	testEnv.Test(t, f)
}

// waitReady waits for Ready=True at m's current generation.
func waitReady(ctx context.Context, t *testing.T, r *resources.Resources, m *v1beta1.Memcached) {
	t.Helper()
	e2estatus.WaitForCondition(t, r, m, statusutil.ConditionReady, metav1.ConditionTrue,
		wait.WithContext(ctx), wait.WithTimeout(timeout), wait.WithInterval(pollEvery))
}

// waitNodesArePods waits until m's status.nodes are exactly the names of
// its n running, not-deleting pods (none named in gone), and returns them.
func waitNodesArePods(ctx context.Context, t *testing.T, r *resources.Resources, m *v1beta1.Memcached, n int, gone ...string) []corev1.Pod {
	t.Helper()
	sel := labels.SelectorFromSet(labels.Set{"app.kubernetes.io/instance": m.Name, "app.kubernetes.io/name": "memcached"}).String()
	var pods []corev1.Pod
	var names []string
	err := wait.For(func(ctx context.Context) (bool, error) {
		if err := r.Get(ctx, m.Name, m.Namespace, m); err != nil {
			return false, nil
		}
		var list corev1.PodList
		if err := r.List(ctx, &list, resources.WithLabelSelector(sel)); err != nil {
			return false, nil
		}
		pods, names = nil, nil
		for _, p := range list.Items {
			if p.Namespace != m.Namespace || p.DeletionTimestamp != nil {
				continue
			}
			if p.Status.Phase != corev1.PodRunning || slices.Contains(gone, p.Name) {
				return false, nil
			}
			pods = append(pods, p)
			names = append(names, p.Name)
		}
		slices.Sort(names)
		return len(names) == n && slices.Equal(names, m.Status.Nodes), nil
	}, wait.WithContext(ctx), wait.WithTimeout(timeout), wait.WithInterval(pollEvery))
	if err != nil {
		t.Fatalf("status.nodes never matched the %d pods: %v\n%s", n, err, cmp.Diff(names, m.Status.Nodes))
	}
	return pods
}

// updateSpec changes the Memcached's spec, retrying on conflicts.
func updateSpec(ctx context.Context, t *testing.T, r *resources.Resources, ns string, change func(*v1beta1.MemcachedSpec)) {
	t.Helper()
	err := wait.For(func(ctx context.Context) (bool, error) {
		m := &v1beta1.Memcached{}
		if err := r.Get(ctx, name, ns, m); err != nil {
			return false, err
		}
		change(&m.Spec)
		err := r.Update(ctx, m)
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	}, wait.WithContext(ctx), wait.WithTimeout(30*time.Second), wait.WithInterval(pollEvery))
	if err != nil {
		t.Fatalf("updating the Memcached: %v", err)
	}
}

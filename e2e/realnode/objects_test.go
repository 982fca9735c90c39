package realnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/opkit-dev/opkit/e2e/harness"
)

// Images of `make images` the suite runs; none is pulled.
const (
	memcachedImage = "docker.io/library/memcached:1.6"
	toolboxImage   = "opkit.dev/toolbox:dev"
	etcdImage      = "gcr.io/etcd-development/etcd:v3.6.16"
)

// spreadOverRealNodes makes the scheduler put pods with these labels on
// different real nodes, one per node before any gets a second.
func spreadOverRealNodes(labels map[string]string) []corev1.TopologySpreadConstraint {
	return []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
	}}
}

// realPod returns a pod pinned to the real nodes.
func realPod(ns, name, image string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeSelector:                  harness.RealNodeSelector,
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers: []corev1.Container{{
				Name: "main", Image: image, Args: args, ImagePullPolicy: corev1.PullIfNotPresent,
			}},
		},
	}
}

// namespace returns a feature's setup and teardown steps that create and
// delete its namespace.
func namespace(name string) (setup, teardown features.Func) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	setup = func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
		if err := cfg.Client().Resources().Create(ctx, ns); err != nil {
			t.Fatalf("creating namespace %s: %v", name, err)
		}
		return ctx
	}
	teardown = func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
		_ = cfg.Client().Resources().Delete(ctx, ns)
		return ctx
	}
	return setup, teardown
}

// create creates objects, failing the test on the first error.
func create(ctx context.Context, t *testing.T, cfg *envconf.Config, objs ...k8s.Object) {
	t.Helper()
	for _, o := range objs {
		if err := cfg.Client().Resources().Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// waitPodReady waits until the pod runs on a real node with every
// container ready, and returns it.
func waitPodReady(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, name string) *corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	harness.WaitFor(ctx, t, "pod "+name+" to be Ready", 3*time.Minute, time.Second, func(ctx context.Context) (bool, string) {
		if err := cfg.Client().Resources().Get(ctx, name, ns, &pod); err != nil {
			return false, err.Error()
		}
		return harness.PodReady(&pod), harness.DescribePod(&pod)
	})
	return &pod
}

// waitGone waits until the object no longer exists.
func waitGone(ctx context.Context, t *testing.T, cfg *envconf.Config, obj k8s.Object) {
	t.Helper()
	harness.WaitFor(ctx, t, fmt.Sprintf("%T %s to be gone", obj, obj.GetName()), 2*time.Minute, time.Second, func(ctx context.Context) (bool, string) {
		err := cfg.Client().Resources().Get(ctx, obj.GetName(), obj.GetNamespace(), obj)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprint(err)
	})
}

// execIn runs a command in a pod's container with kubectl exec.
func execIn(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, pod string, command ...string) string {
	t.Helper()
	out, err := harness.Kubectl(ctx, cfg, append([]string{"exec", "-n", ns, pod, "--"}, command...)...)
	if err != nil {
		t.Fatalf("exec in %s: %v\n%s", pod, err, harness.RealNodeDNSLog(ns, 30))
	}
	return strings.TrimSpace(out)
}

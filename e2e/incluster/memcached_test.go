package incluster

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/memcached/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/repo"
)

// TestMemcachedOperatorInCluster: the memcached operator installed with
// kubectl apply -k runs as two replicas under its ServiceAccount; the
// sample Memcached becomes Ready with real memcached pods listed in
// status.nodes, serves a real client, scales down, and its children go
// with it; the install is removed with kubectl delete -k.
func TestMemcachedOperatorInCluster(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	op := operator{
		config:    filepath.Join(root, "examples/memcached/config/default"),
		namespace: "memcached-system", name: "memcached-operator",
		image:       "opkit.dev/memcached-operator:dev",
		addToScheme: v1alpha1.AddToScheme, list: &v1alpha1.MemcachedList{},
	}
	sample := filepath.Join(root, "examples/memcached/config/samples/cache_v1alpha1_memcached.yaml")
	const ns, name = "default", "memcached-sample"

	f := features.New("memcached operator in-cluster").
		Assess("kubectl apply -k config/default runs the operator from its image", op.deploy).
		Assess("the sample becomes Ready with its real pods in status.nodes", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if out, err := harness.Kubectl(ctx, cfg, "apply", "-f", sample); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			waitReadyWithPods(ctx, t, cfg, ns, name, 3)
			return ctx
		}).
		Assess("a real client sets and gets through the headless Service", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			startToolbox(ctx, t, cfg, ns, "memcached-client", "")
			addr := fmt.Sprintf("%s.%s.svc.cluster.local:11211", name, ns)
			out, err := harness.Kubectl(ctx, cfg, "exec", "-n", ns, "memcached-client", "--", "toolbox", "memcached", addr, "greeting", "hello")
			if err != nil || strings.TrimSpace(out) != "hello" {
				t.Errorf("set/get through %s = %q, %v; want hello", addr, out, err)
			}
			return ctx
		}).
		Assess("metrics are served over HTTPS to a token allowed to get /metrics only", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if out, err := harness.Kubectl(ctx, cfg, "create", "serviceaccount", "metrics-scraper", "-n", ns); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if out, err := harness.Kubectl(ctx, cfg, "create", "clusterrolebinding", "metrics-scraper",
				"--clusterrole=memcached-operator-metrics-reader", "--serviceaccount="+ns+":metrics-scraper"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			startToolbox(ctx, t, cfg, ns, "metrics-scraper", "metrics-scraper")
			url := "https://memcached-operator-metrics." + op.namespace + ".svc:8443/metrics"
			const token = "/var/run/secrets/kubernetes.io/serviceaccount/token"
			scrape := func(pod string, args ...string) string {
				out, err := harness.Kubectl(ctx, cfg, append([]string{"exec", "-n", ns, pod, "--", "toolbox", "https-get", url}, args...)...)
				if err != nil {
					t.Fatalf("scraping from %s: %v", pod, err)
				}
				return out
			}
			// The binding can take a moment to reach the authorizer's cache.
			harness.WaitFor(ctx, t, "an allowed scrape", time.Minute, 2*time.Second, func(context.Context) (bool, string) {
				out := scrape("metrics-scraper", token)
				return strings.HasPrefix(out, "HTTP 200\n") && strings.Contains(out, "controller_runtime_reconcile_total"), firstLine(out)
			})
			if got := firstLine(scrape("memcached-client", token)); got != "HTTP 403" {
				t.Errorf("a token not allowed to get /metrics: %s, want HTTP 403", got)
			}
			if got := firstLine(scrape("memcached-client")); got != "HTTP 401" {
				t.Errorf("no token: %s, want HTTP 401", got)
			}
			return ctx
		}).
		Assess("scaling to 2 leaves 2 real pods in status.nodes", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if out, err := harness.Kubectl(ctx, cfg, "patch", "memcached", name, "-n", ns, "--type=merge", "-p", `{"spec":{"size":2}}`); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			waitReadyWithPods(ctx, t, cfg, ns, name, 2)
			return ctx
		}).
		Assess("deleting the Memcached removes its children", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if out, err := harness.Kubectl(ctx, cfg, "delete", "-f", sample, "--wait=true", "--timeout=2m"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			harness.WaitFor(ctx, t, "the Deployment and Service to go", 2*time.Minute, time.Second, func(ctx context.Context) (bool, string) {
				errD := cfg.Client().Resources().Get(ctx, name, ns, &appsv1.Deployment{})
				errS := cfg.Client().Resources().Get(ctx, name, ns, &corev1.Service{})
				return apierrors.IsNotFound(errD) && apierrors.IsNotFound(errS), fmt.Sprintf("deployment: %v, service: %v", errD, errS)
			})
			return ctx
		}).
		Assess("the operator logged no RBAC denial", op.noRBACDenial).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			_, _ = harness.Kubectl(ctx, cfg, "delete", "pod", "memcached-client", "metrics-scraper", "-n", ns, "--ignore-not-found")
			_, _ = harness.Kubectl(ctx, cfg, "delete", "serviceaccount", "metrics-scraper", "-n", ns, "--ignore-not-found")
			_, _ = harness.Kubectl(ctx, cfg, "delete", "clusterrolebinding", "metrics-scraper", "--ignore-not-found")
			op.undeploy(ctx, t, cfg)
			return ctx
		}).Feature()
	testEnv.Test(t, f)
}

// waitReadyWithPods waits until the Memcached is Ready at its generation
// and status.nodes names exactly its running, ready pods, which run on
// real nodes.
func waitReadyWithPods(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, name string, size int) {
	t.Helper()
	harness.WaitFor(ctx, t, fmt.Sprintf("%s to be Ready with %d real pods", name, size), 4*time.Minute, time.Second, func(ctx context.Context) (bool, string) {
		var m v1alpha1.Memcached
		if err := cfg.Client().Resources().Get(ctx, name, ns, &m); err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(m.Status.Conditions, "Ready")
		if ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != m.Generation {
			return false, fmt.Sprintf("Ready condition %+v at generation %d; pods: %s", ready, m.Generation, harness.DescribePods(ctx, cfg, ns))
		}
		var pods corev1.PodList
		if err := cfg.Client().Resources(ns).List(ctx, &pods, resources.WithLabelSelector("app.kubernetes.io/instance="+name)); err != nil {
			return false, err.Error()
		}
		var running []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && strings.HasPrefix(p.Spec.NodeName, "real-node-") {
				running = append(running, p.Name)
			}
		}
		nodes := slices.Clone(m.Status.Nodes)
		slices.Sort(nodes)
		slices.Sort(running)
		if len(nodes) != size || !cmp.Equal(nodes, running) {
			return false, fmt.Sprintf("status.nodes %v, running real pods %v", nodes, running)
		}
		return true, ""
	})
}

// firstLine is the first line of s.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

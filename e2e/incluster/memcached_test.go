package incluster

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
	"github.com/opkit-dev/opkit/internal/repo"
)

// memcachedV1alpha1 names the v1alpha1 resource for kubectl, which
// otherwise picks the highest version served, v1beta1.
const memcachedV1alpha1 = "memcacheds.v1alpha1.cache.opkit.dev"

// TestMemcachedOperatorInCluster is the operator-sdk tutorial's walkthrough
// on real memcached pods, with the operator installed by its Helm chart
// (the package of a release, pinned to the image in the nodes' registry) and
// running as two replicas under its own ServiceAccount: the sample becomes
// Ready with its real pods in status.nodes and serves a real client; the
// operator is upgraded in place to another build (helm upgrade with its
// next image) without restarting a pod or writing a child; the
// operator's own Validate refuses a spec at admission through its webhook
// (with the certificate it made itself) and its Warnings warn; v1alpha1
// and v1beta1 convert both ways; an invalid replica count is refused at
// admission naming the field; an object stored at v1alpha1 is migrated to
// v1beta1 by the next leader; a scale-up whose leader is killed midway is
// finished by the new leader; an image change rolls every pod; a deleted
// pod is replaced; it scales down; with the operator scaled to 0, updates
// are refused (failurePolicy Fail) and deletes are not; deleting it
// removes its children. Then the chart is upgraded to three shards
// (shardSteps): Memcacheds and their children spread over them, stay on
// live replicas as a pod is killed and the Deployment goes to 2 and 4,
// and converge on changes. helm uninstall leaves nothing.
func TestMemcachedOperatorInCluster(t *testing.T) {
	t.Parallel() // with TestEtcdOperatorInCluster (main_test.go)
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	op := operator{
		example: "memcached", name: "memcached-operator", namespace: "memcached-system",
		img:         "opkit.dev/memcached-operator:dev",
		addToScheme: v1beta1.AddToScheme, list: &v1beta1.MemcachedList{},
		crds: []string{"memcacheds.cache.opkit.dev"},
		// This suite installs through the Helm chart; the etcd suites
		// through make deploy.
		chart: true,
		// The webhook's certificate is renewed a minute after it is made,
		// throughout the suite (certificateRotates).
		args: []string{"--webhook-cert-validity=" + certValidity.String(), "--webhook-cert-renew-before=" + certRenewBefore.String()},
	}.fromRegistry(t.Context(), t)
	sample := filepath.Join(root, "examples/memcached/config/samples/cache_v1beta1_memcached.yaml")
	const ns, name = "default", "memcached-sample"
	memcached := func(ctx context.Context, t *testing.T, cfg *envconf.Config) *v1beta1.Memcached {
		t.Helper()
		var m v1beta1.Memcached
		if err := cfg.Client().Resources().Get(ctx, name, ns, &m); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	patch := func(ctx context.Context, t *testing.T, cfg *envconf.Config, spec string) {
		t.Helper()
		harness.Admitted(ctx, t, "patch "+spec, func(ctx context.Context) error {
			out, err := harness.Kubectl(ctx, cfg, "patch", "memcached", name, "-n", ns, "--type=merge", "-p", `{"spec":`+spec+`}`)
			if err != nil {
				return fmt.Errorf("%w: %s", err, out)
			}
			return nil
		})
	}

	f := features.New("memcached operator in-cluster").
		Assess("helm install of the release's chart package runs the operator from its image by digest", op.deploy).
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
		Assess("the operator upgraded in place to its next build: no pod restarted, no child written", op.upgradeInPlace("memcached.cache.opkit.dev",
			func(ctx context.Context, t *testing.T, cfg *envconf.Config) workload {
				return workload{ns: ns, owner: memcached(ctx, t, cfg).UID, pods: "app.kubernetes.io/instance=" + name}
			})).
		Assess("metrics are served over HTTPS to a token allowed to get /metrics only", op.metricsOnlyForReaders(ns)).
		Assess("the operator's own checks run at admission: a refused spec names the field, an unpinned image warns", memcachedAdmission(ns)).
		Assess("a Memcached created as v1alpha1 reads as v1beta1, and a v1beta1 write reads back as v1alpha1 with nothing lost", memcachedConverts(ns)).
		Assess("the webhook's certificate rotates under load with no failed request, and every replica serves a renewed one", op.certificateRotates(ns)).
		Assess("an invalid replica count is refused at admission, naming the field", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			before := memcached(ctx, t, cfg)
			out, err := harness.Kubectl(ctx, cfg, "patch", "memcached", name, "-n", ns, "--type=merge", "-p", `{"spec":{"replicas":101}}`)
			if err == nil {
				t.Fatalf("replicas 101 was accepted: %s", out)
			}
			if msg := err.Error(); !strings.Contains(msg, "spec.replicas") || !strings.Contains(msg, "100") {
				t.Errorf("the refusal does not name spec.replicas and its bound: %s", msg)
			}
			if after := memcached(ctx, t, cfg); after.Generation != before.Generation || after.Spec.Replicas != before.Spec.Replicas {
				t.Errorf("a refused patch changed the object: generation %d -> %d, replicas %d -> %d", before.Generation, after.Generation, before.Spec.Replicas, after.Spec.Replicas)
			}
			return ctx
		}).
		Assess("a Memcached stored at v1alpha1 is rewritten at v1beta1 by the next leader, and storedVersions trimmed", op.storageMigrates(ns)).
		Assess("the leader killed in the middle of a scale-up to 5: the new leader finishes it", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			// The leader is looked up first: the kill must follow the patch
			// at once, before the scale-up is done.
			leader := leaderPod(ctx, t, cfg, op.namespace, "memcached.cache.opkit.dev")
			patch(ctx, t, cfg, `{"replicas":5}`)
			if out, err := harness.Kubectl(ctx, cfg, "delete", "pod", leader, "-n", op.namespace, "--force", "--grace-period=0"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			// Real pods take seconds to start: the kill must have come
			// before the scale-up was done, or this step proves nothing.
			if nodes := memcached(ctx, t, cfg).Status.Nodes; len(nodes) >= 5 {
				t.Fatalf("the scale-up was finished before the leader was killed (status.nodes %v)", nodes)
			}
			waitReadyWithPods(ctx, t, cfg, ns, name, 5)
			if next := leaderPod(ctx, t, cfg, op.namespace, "memcached.cache.opkit.dev"); next == leader {
				t.Errorf("the killed pod %s still holds the lease", leader)
			}
			var deps appsv1.DeploymentList
			if err := cfg.Client().Resources(ns).List(ctx, &deps, resources.WithLabelSelector("app.kubernetes.io/instance="+name)); err != nil {
				t.Fatal(err)
			}
			if len(deps.Items) != 1 {
				t.Errorf("%d Deployments of %s, want 1", len(deps.Items), name)
			}
			return ctx
		}).
		Assess("an image change rolls every pod and status.nodes follows", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			old := memcached(ctx, t, cfg).Status.Nodes
			// The same image under its fully qualified name: a different
			// spec.image for the operator, which must roll the pods.
			const image = "docker.io/library/memcached:1.6"
			patch(ctx, t, cfg, `{"image":"`+image+`"}`)
			waitReadyWithPods(ctx, t, cfg, ns, name, 5)
			nodes := memcached(ctx, t, cfg).Status.Nodes
			for _, p := range nodes {
				if slices.Contains(old, p) {
					t.Errorf("pod %s of the old image is still in status.nodes %v", p, nodes)
				}
				var pod corev1.Pod
				if err := cfg.Client().Resources().Get(ctx, p, ns, &pod); err != nil {
					t.Fatal(err)
				}
				if got := pod.Spec.Containers[0].Image; got != image {
					t.Errorf("pod %s runs %s, want %s", p, got, image)
				}
			}
			return ctx
		}).
		Assess("a deleted pod is replaced and status.nodes updated", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			victim := memcached(ctx, t, cfg).Status.Nodes[0]
			if out, err := harness.Kubectl(ctx, cfg, "delete", "pod", victim, "-n", ns, "--wait=true"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			waitReadyWithPods(ctx, t, cfg, ns, name, 5)
			if nodes := memcached(ctx, t, cfg).Status.Nodes; slices.Contains(nodes, victim) {
				t.Errorf("the deleted pod %s is still in status.nodes %v", victim, nodes)
			}
			return ctx
		}).
		Assess("scaling to 2 leaves 2 real pods in status.nodes", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			patch(ctx, t, cfg, `{"replicas":2}`)
			waitReadyWithPods(ctx, t, cfg, ns, name, 2)
			return ctx
		}).
		Assess("with the operator scaled to 0, updates and v1alpha1 are refused, v1beta1 reads and deletes are not; scaled back, admission works", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			deployment := op.name + "-controller-manager"
			scale := func(replicas string) {
				t.Helper()
				if out, err := harness.Kubectl(ctx, cfg, "scale", "deployment", deployment, "-n", op.namespace, "--replicas="+replicas); err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
			}
			doomed := &v1beta1.Memcached{ObjectMeta: metav1.ObjectMeta{Name: "memcached-deleted-while-down", Namespace: ns}, Spec: v1beta1.MemcachedSpec{Replicas: 0, Image: "memcached:1.6"}}
			if err := cfg.Client().Resources().Create(ctx, doomed); err != nil {
				t.Fatal(err)
			}
			scale("0")
			harness.WaitFor(ctx, t, "no operator pod", 2*time.Minute, time.Second, func(ctx context.Context) (bool, string) {
				var pods corev1.PodList
				if err := cfg.Client().Resources(op.namespace).List(ctx, &pods, resources.WithLabelSelector("control-plane=controller-manager")); err != nil {
					return false, err.Error()
				}
				return len(pods.Items) == 0, fmt.Sprintf("%d pods", len(pods.Items))
			})
			_, err := harness.Kubectl(ctx, cfg, "patch", "memcached", name, "-n", ns, "--type=merge", "-p", `{"spec":{"replicas":3}}`)
			if err == nil || !strings.Contains(err.Error(), `failed calling webhook "vmemcached.cache.opkit.dev"`) {
				t.Errorf("an update with no operator: %v, want refused by the webhook's failurePolicy", err)
			}
			// v1alpha1 is served through the operator's conversion webhook:
			// while it is down, every v1alpha1 request fails; v1beta1, the
			// stored version, still reads and deletes.
			if _, err := harness.Kubectl(ctx, cfg, "get", memcachedV1alpha1, name, "-n", ns); err == nil || !strings.Contains(err.Error(), "conversion webhook for cache.opkit.dev/v1beta1, Kind=Memcached failed") {
				t.Errorf("a v1alpha1 read with no operator: %v, want the conversion webhook's failure", err)
			}
			if out, err := harness.Kubectl(ctx, cfg, "get", "memcached", name, "-n", ns); err != nil {
				t.Errorf("a v1beta1 read with no operator: %v\n%s", err, out)
			}
			if out, err := harness.Kubectl(ctx, cfg, "delete", "memcached", doomed.Name, "-n", ns, "--wait=true", "--timeout=1m"); err != nil {
				t.Errorf("a delete with no operator: %v\n%s", err, out)
			}
			scale("2")
			if out, err := harness.Kubectl(ctx, cfg, "rollout", "status", "deployment", deployment, "-n", op.namespace, "--timeout=3m"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			// A pod is ready before the Service's endpoints reach the
			// API server's path to it: the first calls may be refused.
			ready := time.Now()
			patch(ctx, t, cfg, `{"replicas":3}`)
			t.Logf("the webhook admitted a patch %s after the rollout", time.Since(ready).Round(100*time.Millisecond))
			waitReadyWithPods(ctx, t, cfg, ns, name, 3)
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
		Assess("the operator logged no RBAC denial", op.noRBACDenial)
	for _, s := range op.shardSteps(ns) {
		f = f.Assess(s.name, s.fn)
	}
	feature := f.Assess("Shards: the operator logged no RBAC denial", op.noRBACDenial).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			deleteShardMemcacheds(ctx, t, cfg, ns)
			_, _ = harness.Kubectl(ctx, cfg, "delete", "-f", sample, "--ignore-not-found", "--wait=true", "--timeout=2m")
			_, _ = harness.Kubectl(ctx, cfg, "delete", "pod", "memcached-client", "-n", ns, "--ignore-not-found")
			op.undeploy(ctx, t, cfg)
			return ctx
		}).Feature()
	testEnv.Test(t, feature)
}

// memcachedAdmission is the step where the operator's own checks run at
// admission in ns: a spec they refuse is refused naming the field, an
// unpinned image is admitted with a warning.
func memcachedAdmission(ns string) func(context.Context, *testing.T, *envconf.Config) context.Context {
	return func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
		create := func(name, spec string, dryRun bool) (string, error) {
			t.Helper()
			args := []string{"create", "-f", "-"}
			if dryRun {
				args = append(args, "--dry-run=server")
			}
			cmd, err := harness.KubectlCommand(ctx, cfg, args...)
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stdin = strings.NewReader(`{"apiVersion":"cache.opkit.dev/v1beta1","kind":"Memcached","metadata":{"name":"` + name + `","namespace":"` + ns + `"},"spec":` + spec + `}`)
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		// Valid for the schema; the operator's Validate refuses it.
		out, err := create("memcached-items-beyond-limit", `{"replicas":1,"cache":{"memoryMB":128},"resources":{"limits":{"memory":"96Mi"}}}`, false)
		if err == nil {
			t.Fatalf("cache.memoryMB beyond the memory limit was admitted: %s", out)
		}
		// The message is Validate's: no schema or CEL rule says it.
		if !strings.Contains(out, "spec.cache.memoryMB: Invalid value: 128: must be less than spec.resources.limits.memory (96Mi)") {
			t.Errorf("the refusal is not the webhook's naming spec.cache.memoryMB: %s", out)
		}
		var m v1beta1.Memcached
		if err := cfg.Client().Resources().Get(ctx, "memcached-items-beyond-limit", ns, &m); !apierrors.IsNotFound(err) {
			t.Errorf("the refused Memcached: get = %v, want NotFound", err)
		}
		out, err = create("memcached-unpinned", `{"replicas":1,"image":"memcached"}`, true)
		if err != nil || !strings.Contains(out, `Warning: spec.image "memcached" does not pin a version`) {
			t.Errorf("an unpinned image: %v, output %q, want admitted with a warning", err, out)
		}
		return ctx
	}
}

// memcachedConverts is the step where a Memcached created in ns as
// v1alpha1 reads as v1beta1 (port defaulted), and a v1beta1 write reads
// back as v1alpha1 with nothing lost.
func memcachedConverts(ns string) func(context.Context, *testing.T, *envconf.Config) context.Context {
	return func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
		const conv = "memcached-conversion"
		kubectl := func(stdin string, args ...string) string {
			t.Helper()
			return mustKubectl(ctx, t, cfg, stdin, args...)
		}
		spec := func(version string) map[string]any {
			t.Helper()
			var obj map[string]any
			out := kubectl("", "get", "memcacheds."+version+".cache.opkit.dev", conv, "-n", ns, "-o", "json")
			if err := json.Unmarshal([]byte(out), &obj); err != nil {
				t.Fatal(err)
			}
			if got := obj["apiVersion"]; got != "cache.opkit.dev/"+version {
				t.Errorf("read as %s: apiVersion %v", version, got)
			}
			return obj["spec"].(map[string]any)
		}
		// Size 0: no pod, the conversion alone.
		kubectl(`{"apiVersion":"cache.opkit.dev/v1alpha1","kind":"Memcached","metadata":{"name":"`+conv+`","namespace":"`+ns+`"},`+
			`"spec":{"size":0,"image":"memcached:1.6.38","memoryLimitMB":32,"extraArgs":["-v"],"resources":{"limits":{"memory":"96Mi"}},`+
			`"topologySpreadConstraints":[{"maxSkew":1,"topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"ScheduleAnyway"}]}}`, "create", "-f", "-")
		defer kubectl("", "delete", "memcached", conv, "-n", ns)
		alpha := spec("v1alpha1")
		want := map[string]any{
			"replicas": float64(0), "image": "memcached:1.6.38", "port": float64(11211),
			"cache":     map[string]any{"memoryMB": float64(32), "extraArgs": []any{"-v"}},
			"resources": map[string]any{"limits": map[string]any{"memory": "96Mi"}},
			"placement": map[string]any{"topologySpreadConstraints": alpha["topologySpreadConstraints"]},
		}
		if diff := cmp.Diff(want, spec("v1beta1")); diff != "" {
			t.Errorf("read as v1beta1 (-want +got):\n%s", diff)
		}
		kubectl("", "patch", "memcacheds.v1beta1.cache.opkit.dev", conv, "-n", ns, "--type=merge", "-p", `{"spec":{"cache":{"memoryMB":48}}}`)
		alpha["memoryLimitMB"] = float64(48)
		if diff := cmp.Diff(alpha, spec("v1alpha1")); diff != "" {
			t.Errorf("a v1beta1 patch of cache.memoryMB, read as v1alpha1 (-want +got):\n%s", diff)
		}
		return ctx
	}
}

// leaderPod is the pod holding the leader-election Lease lease in ns.
func leaderPod(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, lease string) string {
	t.Helper()
	var holder string
	harness.WaitFor(ctx, t, "a leader of "+lease, 2*time.Minute, time.Second, func(ctx context.Context) (bool, string) {
		var l coordinationv1.Lease
		if err := cfg.Client().Resources().Get(ctx, lease, ns, &l); err != nil {
			return false, err.Error()
		}
		holder = holderPod(&l)
		return holder != "", "no holder"
	})
	return holder
}

// waitReadyWithPods waits until the Memcached is Ready at its generation
// and status.nodes names exactly its running, ready pods, which run on
// real nodes.
func waitReadyWithPods(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, name string, size int) {
	t.Helper()
	harness.WaitFor(ctx, t, fmt.Sprintf("%s to be Ready with %d real pods", name, size), 4*time.Minute, time.Second, func(ctx context.Context) (bool, string) {
		var m v1beta1.Memcached
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

package incluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
)

// TestEtcdOperatorInCluster: the etcd operator installed with kubectl
// apply -k runs from its image under its own RBAC; a 3-member EtcdCluster
// on persistent claims becomes Ready with real etcd pods that serve through
// the client Service; a member pod deleted comes back as the same member on
// its claim, with the data.
func TestEtcdOperatorInCluster(t *testing.T) {
	op := operator{
		example: "etcd", name: "etcd-operator", namespace: "etcd-operator-system",
		img:         "opkit.dev/etcd-operator:dev",
		addToScheme: v1alpha1.AddToScheme, list: &v1alpha1.EtcdClusterList{},
	}
	const ns, name = "default", "demo"
	cluster := &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1alpha1.EtcdClusterSpec{Size: 3, Version: "3.6.16"},
	}
	cluster.Spec.Storage.Size = ptr.To(resource.MustParse("64Mi"))
	etcdctl := func(ctx context.Context, t *testing.T, cfg *envconf.Config, pod string, args ...string) string {
		t.Helper()
		out, err := harness.Kubectl(ctx, cfg, append([]string{"exec", "-n", ns, pod, "--", "etcdctl", "--command-timeout=10s"}, args...)...)
		if err != nil {
			t.Fatalf("etcdctl %v in %s: %v", args, pod, err)
		}
		return strings.TrimSpace(out)
	}
	var membersBefore map[string]string

	f := features.New("etcd operator in-cluster").
		Assess("make deploy runs the operator from its image", op.deploy).
		Assess("a 3-member cluster becomes Ready on real pods and serves through its client Service", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := cfg.Client().Resources().Create(ctx, cluster); err != nil {
				t.Fatal(err)
			}
			waitEtcdReady(ctx, t, cfg, ns, name)
			membersBefore = votingMembers(t, etcdctl(ctx, t, cfg, name+"-0", "member", "list", "-w", "json"))
			if len(membersBefore) != 3 {
				t.Fatalf("voting members %v, want 3", membersBefore)
			}
			client := fmt.Sprintf("--endpoints=http://%s-client.%s.svc:2379", name, ns)
			if got := etcdctl(ctx, t, cfg, name+"-0", client, "put", "written-in-cluster", "yes"); got != "OK" {
				t.Fatalf("put through the client Service: %q", got)
			}
			return ctx
		}).
		Assess("a deleted member pod comes back as the same member on its claim", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if out, err := harness.Kubectl(ctx, cfg, "delete", "pod", "-n", ns, name+"-1", "--wait=true"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			harness.WaitFor(ctx, t, "the member to be back", 3*time.Minute, 2*time.Second, func(ctx context.Context) (bool, string) {
				out, err := harness.Kubectl(ctx, cfg, "exec", "-n", ns, name+"-1", "--", "etcdctl", "--command-timeout=5s", "endpoint", "health")
				return err == nil && strings.Contains(out, "is healthy"), out + fmt.Sprint(err)
			})
			waitEtcdReady(ctx, t, cfg, ns, name)
			after := votingMembers(t, etcdctl(ctx, t, cfg, name+"-0", "member", "list", "-w", "json"))
			if diff := cmp.Diff(membersBefore, after); diff != "" {
				t.Errorf("members (name -> ID) changed (-before +after):\n%s", diff)
			}
			if got := etcdctl(ctx, t, cfg, name+"-1", "get", "written-in-cluster", "--print-value-only", "--consistency=l"); got != "yes" {
				t.Errorf("get through the recreated member = %q, want yes", got)
			}
			return ctx
		}).
		Assess("metrics are served over HTTPS to a token allowed to get /metrics only", op.metricsOnlyForReaders(ns)).
		Assess("the operator logged no RBAC denial", op.noRBACDenial).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if out, err := harness.Kubectl(ctx, cfg, "delete", "etcdcluster", name, "-n", ns, "--ignore-not-found", "--wait=true", "--timeout=2m"); err != nil {
				t.Errorf("deleting the EtcdCluster: %v\n%s", err, out)
			}
			op.undeploy(ctx, t, cfg)
			return ctx
		}).Feature()
	testEnv.Test(t, f)
}

// waitEtcdReady waits until the EtcdCluster is Ready at its generation.
func waitEtcdReady(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, name string) {
	t.Helper()
	harness.WaitFor(ctx, t, name+" to be Ready", 4*time.Minute, 2*time.Second, func(ctx context.Context) (bool, string) {
		var c v1alpha1.EtcdCluster
		if err := cfg.Client().Resources().Get(ctx, name, ns, &c); err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(c.Status.Conditions, "Ready")
		ok := ready != nil && ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == c.Generation
		return ok, fmt.Sprintf("Ready %+v at generation %d; pods: %s", ready, c.Generation, harness.DescribePods(ctx, cfg, ns))
	})
}

// votingMembers maps the started voting members of etcdctl member list
// -w json to their IDs.
func votingMembers(t *testing.T, listJSON string) map[string]string {
	t.Helper()
	var list struct {
		Members []struct {
			ID        uint64 `json:"ID"`
			Name      string `json:"name"`
			IsLearner bool   `json:"isLearner"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(listJSON), &list); err != nil {
		t.Fatalf("member list %q: %v", listJSON, err)
	}
	members := map[string]string{}
	for _, m := range list.Members {
		if !m.IsLearner && m.Name != "" {
			members[m.Name] = fmt.Sprintf("%x", m.ID)
		}
	}
	return members
}

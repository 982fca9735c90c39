package incluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
)

// etcdSurvivorRebuild: a 3-member cluster with spec.recovery.quorumLoss
// Rebuild loses two members with their claims. The operator rebuilds it
// from the survivor on real nodes: --force-new-cluster, then a restart
// whose init containers (the operator's image and the cluster's etcdutl)
// restore the survivor's own data with the revision moved on. The key
// written before the loss is read back, the revision is past the bump,
// and a read at the revision before is refused as compacted: a watcher
// of the old cluster re-lists instead of seeing a revision twice.
func etcdSurvivorRebuild() features.Feature {
	const ns, name = "default", "survivor"
	const bump = 1_000_000_000
	cluster := &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.EtcdClusterSpec{Size: 3, Version: "3.6.16",
			Recovery: &v1alpha1.RecoverySpec{QuorumLoss: v1alpha1.QuorumLossRebuild}},
	}
	cluster.Spec.Storage.Size = ptr.To(resource.MustParse("64Mi"))
	survivor := name + "-1"
	// etcdctl runs etcdctl in the survivor's pod and decodes its JSON.
	etcdctl := func(ctx context.Context, t *testing.T, cfg *envconf.Config, args ...string) (etcdctlReply, error) {
		t.Helper()
		out, err := harness.Kubectl(ctx, cfg, append([]string{"exec", "-n", ns, survivor, "-c", "etcd", "--", "etcdctl", "--command-timeout=10s", "-w", "json"}, args...)...)
		if err != nil {
			return etcdctlReply{}, fmt.Errorf("etcdctl %v: %w: %s", args, err, out)
		}
		var r etcdctlReply
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			return etcdctlReply{}, fmt.Errorf("etcdctl %v: %w: %s", args, err, out)
		}
		return r, nil
	}
	var before int64
	return features.New("etcd cluster rebuilt from a survivor").
		Assess("a 3-member cluster with quorumLoss Rebuild holds a key", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := cfg.Client().Resources().Create(ctx, cluster); err != nil {
				t.Fatal(err)
			}
			harness.WaitEtcdReady(ctx, t, cfg, ns, name)
			r, err := etcdctl(ctx, t, cfg, "put", "before-the-loss", "kept")
			if err != nil {
				t.Fatal(err)
			}
			before = r.Header.Revision
			return ctx
		}).
		Assess("two members lost with their claims: rebuilt from the survivor with the revision moved on", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			lost := []string{name + "-0", name + "-2"}
			for _, args := range [][]string{
				append([]string{"delete", "pvc", "-n", ns, "--wait=false"}, lost[0]+"-data", lost[1]+"-data"),
				append([]string{"delete", "pod", "-n", ns, "--wait=true", "--timeout=2m"}, lost...),
			} {
				if out, err := harness.Kubectl(ctx, cfg, args...); err != nil {
					t.Fatalf("kubectl %v: %v\n%s", args, err, out)
				}
			}
			harness.WaitFor(ctx, t, "the rebuild from "+survivor+" to end", 5*time.Minute, 2*time.Second, func(ctx context.Context) (bool, string) {
				c := getEtcdCluster(ctx, t, cfg, ns, name)
				return c.Status.LastRecovery != nil, fmt.Sprintf("recovery %+v; conditions %+v", c.Status.Recovery, c.Status.Conditions)
			})
			harness.WaitEtcdReady(ctx, t, cfg, ns, name)
			c := getEtcdCluster(ctx, t, cfg, ns, name)
			if r := c.Status.LastRecovery; r.Member != survivor || r.RevisionBump != bump {
				t.Errorf("status.lastRecovery = %+v, want the rebuild from %s with revisionBump %d", r, survivor, bump)
			}
			r, err := etcdctl(ctx, t, cfg, "get", "before-the-loss")
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "kept" || r.Header.Revision < before+bump {
				t.Errorf("after the rebuild: %+v; want before-the-loss=kept at a revision past %d", r, before+bump)
			}
			if _, err := etcdctl(ctx, t, cfg, "get", "before-the-loss", fmt.Sprintf("--rev=%d", before)); err == nil || !strings.Contains(err.Error(), "compacted") {
				t.Errorf("a read at revision %d, from before the rebuild: %v; want it refused as compacted", before, err)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := cfg.Client().Resources().Delete(ctx, cluster); err != nil {
				t.Error(err)
			}
			waitChildrenGone(ctx, t, cfg, ns, name)
			return ctx
		}).Feature()
}

// etcdctlReply is the part of etcdctl's JSON output the tests read.
type etcdctlReply struct {
	Header struct {
		Revision int64 `json:"revision"`
	} `json:"header"`
	Kvs []struct {
		Value []byte `json:"value"`
	} `json:"kvs"`
}

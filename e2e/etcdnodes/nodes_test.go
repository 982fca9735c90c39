package etcdnodes

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/kvhistory"
)

const (
	// labelCluster and labelMember are the operator's labels on member
	// pods (examples/etcd/internal/controller, which e2e cannot import).
	labelCluster = "etcd.opkit.dev/cluster"
	labelMember  = "etcd.opkit.dev/member"
	// eventNodeLost is the operator's event when it replaces a member
	// whose node was declared gone.
	eventNodeLost = "MemberNodeLost"
	// maxWriteGap bounds how long the cluster may take no write while a
	// drain or a dead node leaves it a quorum: a leader election, and the
	// client Service dropping the lost member. Losing quorum stops writes
	// for minutes.
	maxWriteGap = 15 * time.Second
	// nodeLossGrace is the cluster's spec.recovery.nodeLossGracePeriod:
	// how long the dead node stays tainted out-of-service before its
	// member is replaced.
	nodeLossGrace = 30 * time.Second
)

// TestDrainAndNodeLoss runs a 3-member cluster spread over both real
// nodes through a drain of the node holding two members, then the death
// of the node holding the third, under recorded client load.
func TestDrainAndNodeLoss(t *testing.T) {
	const name = "nodes"
	var (
		ns            string
		cli           *clientv3.Client
		probe         *writeProbe
		history       = kvhistory.New()
		keys          = []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
		stopLoad      context.CancelFunc
		load          sync.WaitGroup
		membersBefore map[string]string
	)
	f := features.New("an etcd cluster through a drain and a lost node").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			ns = envconf.RandomName("etcd-nodes", 20)
			r := cfg.Client().Resources()
			if err := r.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: v1alpha1.EtcdClusterSpec{Size: 3, Version: "3.6.16",
					Storage:  v1alpha1.StorageSpec{Size: ptr.To(resource.MustParse("64Mi"))},
					Recovery: &v1alpha1.RecoverySpec{NodeLossGracePeriod: &metav1.Duration{Duration: nodeLossGrace}}}}
			if err := r.Create(ctx, c); err != nil {
				t.Fatal(err)
			}
			harness.WaitEtcdReady(ctx, t, cfg, ns, name)
			cli = harness.EtcdClient(ctx, t, cfg, ns, name)
			membersBefore = harness.Voting(harness.EtcdMembers(ctx, t, cli))
			if len(membersBefore) != 3 {
				t.Fatalf("voting members %v, want 3", membersBefore)
			}
			probe = startWriteProbe(context.WithoutCancel(ctx), cli)
			lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			stopLoad = cancel
			for range 4 {
				load.Go(func() { history.Run(lctx, cli, keys) })
			}
			return ctx
		}).
		Assess("a drain of the node holding two members evicts one through the budget and no more", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			before := memberPods(ctx, t, cfg, ns, name)
			node, held := majorityNode(t, before)
			start := time.Now()
			out, err := harness.Kubectl(ctx, cfg, "drain", node, "--pod-selector="+labelCluster+"="+name,
				"--ignore-daemonsets", "--delete-emptydir-data", "--timeout=30s")
			drained := time.Now()
			if err == nil {
				t.Fatalf("the drain of %s (members %v) succeeded, want it stopped by the disruption budget:\n%s", node, held, out)
			}
			if !strings.Contains(err.Error(), "disruption budget") {
				t.Errorf("the drain failed, but not on the disruption budget: %v\n%s", err, out)
			}
			after := memberPods(ctx, t, cfg, ns, name)
			var evicted []string
			for _, m := range held {
				if after[m].UID != before[m].UID {
					evicted = append(evicted, m)
				}
			}
			if len(evicted) != 1 {
				t.Errorf("members evicted from %s: %v, want exactly one of %v", node, evicted, held)
			}
			gap, at := probe.longestGap(start, drained)
			t.Logf("longest write gap through the drain: %s from %s", gap.Round(time.Millisecond), at.Format(time.TimeOnly))
			if gap > maxWriteGap {
				t.Errorf("no write succeeded for %s from %s during the drain, want at most %s", gap.Round(time.Millisecond), at.Format(time.TimeOnly), maxWriteGap)
			}
			if out, err := harness.Kubectl(ctx, cfg, "uncordon", node); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			harness.WaitEtcdReady(ctx, t, cfg, ns, name)
			if diff := cmp.Diff(membersBefore, harness.Voting(harness.EtcdMembers(ctx, t, cli))); diff != "" {
				t.Errorf("members (name -> ID) changed by the drain (-before +after):\n%s", diff)
			}
			return ctx
		}).
		Assess("a dead node's member is replaced once the node is declared gone, and not before", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			before := memberPods(ctx, t, cfg, ns, name)
			node, held := majorityNode(t, before)
			var lost, lostNode string
			for m, p := range before {
				if p.Spec.NodeName != node {
					lost, lostNode = m, p.Spec.NodeName
				}
			}
			var claim corev1.PersistentVolumeClaim
			if err := r.Get(ctx, lost+"-data", ns, &claim); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := harness.KillRealNode(ctx, lostNode); err != nil {
				t.Fatal(err)
			}
			t.Logf("killed node %s with member %s; %v stay on %s", lostNode, lost, held, node)
			harness.WaitFor(ctx, t, "node "+lostNode+" to be NotReady", 2*time.Minute, 2*time.Second, func(ctx context.Context) (bool, string) {
				var n corev1.Node
				if err := r.Get(ctx, lostNode, "", &n); err != nil {
					return false, err.Error()
				}
				for _, c := range n.Status.Conditions {
					if c.Type == corev1.NodeReady {
						return c.Status != corev1.ConditionTrue, fmt.Sprintf("Ready %s since %s, heartbeat %s", c.Status, c.LastTransitionTime, c.LastHeartbeatTime)
					}
				}
				return false, "no Ready condition"
			})
			t.Logf("node %s NotReady %s after it died", lostNode, time.Since(start).Round(time.Second))
			// The node may come back (a partition, a reboot): its member
			// keeps its ID and its data, also once Kubernetes evicts the
			// pod, which then stays Terminating since no kubelet confirms.
			untouched := func(ctx context.Context) (bool, string) {
				if diff := cmp.Diff(membersBefore, harness.Voting(harness.EtcdMembers(ctx, t, cli))); diff != "" {
					t.Fatalf("members changed before %s was declared gone (-before +now):\n%s", lostNode, diff)
				}
				var now corev1.PersistentVolumeClaim
				if err := r.Get(ctx, claim.Name, ns, &now); err != nil || now.UID != claim.UID || now.DeletionTimestamp != nil {
					t.Fatalf("claim %s was deleted before %s was declared gone (err %v)", claim.Name, lostNode, err)
				}
				var pod corev1.Pod
				if err := r.Get(ctx, lost, ns, &pod); err != nil {
					return false, err.Error()
				}
				return pod.DeletionTimestamp != nil, fmt.Sprintf("pod %s deleted at %v", lost, pod.DeletionTimestamp)
			}
			harness.WaitFor(ctx, t, "Kubernetes to evict "+lost+" from the dead node", 2*time.Minute, 2*time.Second, untouched)
			t.Logf("pod %s Terminating %s after its node died", lost, time.Since(start).Round(time.Second))
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
				untouched(ctx)
			}
			if out, err := harness.Kubectl(ctx, cfg, "taint", "node", lostNode, "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			// The taint says the node is shut down: its member keeps its
			// data for spec.recovery.nodeLossGracePeriod.
			tainted := time.Now()
			for time.Since(tainted) < nodeLossGrace/2 {
				untouched(ctx)
				time.Sleep(2 * time.Second)
			}
			// The replacement is a new member (a new ID, under the old name
			// or a new one) on the surviving node; the other two keep theirs.
			var replacement string
			harness.WaitFor(ctx, t, "member "+lost+" replaced on "+node, 5*time.Minute, 2*time.Second, func(ctx context.Context) (bool, string) {
				ms, err := harness.ListEtcdMembers(ctx, cli)
				if err != nil {
					return false, err.Error()
				}
				v := harness.Voting(ms)
				pods := memberPods(ctx, t, cfg, ns, name)
				ok := len(ms) == 3 && len(v) == 3 && len(pods) == 3
				for m, p := range pods {
					ok = ok && p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning
					if !slices.Contains(held, m) {
						replacement = m
						ok = ok && v[m] != "" && v[m] != membersBefore[lost]
					}
				}
				return ok, fmt.Sprintf("members %v; pods: %s", ms, harness.DescribePods(ctx, cfg, ns))
			})
			t.Logf("member %s replaced by %s %s after its node died", lost, replacement, time.Since(start).Round(time.Second))
			harness.WaitEtcdReady(ctx, t, cfg, ns, name)
			after := harness.Voting(harness.EtcdMembers(ctx, t, cli))
			for _, m := range held {
				if after[m] != membersBefore[m] {
					t.Errorf("member %s is %s, want %s as before: only %s's member is replaced", m, after[m], membersBefore[m], lostNode)
				}
			}
			gap, at := probe.longestGap(start, time.Now())
			t.Logf("longest write gap after the node died: %s from %s", gap.Round(time.Millisecond), at.Format(time.TimeOnly))
			if gap > maxWriteGap {
				t.Errorf("no write succeeded for %s from %s after the node died, want at most %s", gap.Round(time.Millisecond), at.Format(time.TimeOnly), maxWriteGap)
			}
			var events corev1.EventList
			if err := r.WithNamespace(ns).List(ctx, &events, resources.WithFieldSelector("reason="+eventNodeLost)); err != nil {
				t.Fatal(err)
			}
			if len(events.Items) == 0 {
				t.Errorf("no %s event in %s", eventNodeLost, ns)
			}
			return ctx
		}).
		Assess("the clients' history is linearizable and no acknowledged write is lost", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			stopLoad()
			load.Wait()
			if err := history.FinalReads(ctx, cli, keys); err != nil {
				t.Error(err)
			}
			summary, info := history.Check(3 * time.Minute)
			t.Logf("%s", summary)
			if summary.Puts < 100 || summary.Gets < 100 {
				t.Errorf("too few operations to mean anything: %s", summary)
			}
			if summary.Result != porcupine.Ok {
				out := filepath.Join(os.TempDir(), "etcd-nodes-history.html")
				if err := porcupine.VisualizePath(kvhistory.Model, info, out); err == nil {
					t.Logf("history visualized in %s", out)
				}
				t.Errorf("the history is not linearizable: %s", summary.Result)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if stopLoad != nil {
				stopLoad()
				load.Wait()
			}
			if probe != nil {
				probe.close()
			}
			if cli != nil {
				_ = cli.Close()
			}
			if t.Failed() {
				t.Logf("operator log (end):\n%s", operator.Log())
			}
			return ctx
		}).Feature()
	testEnv.Test(t, f)
}

// memberPods maps the cluster's member names to their pods.
func memberPods(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, cluster string) map[string]corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := cfg.Client().Resources(ns).List(ctx, &pods, resources.WithLabelSelector(labelCluster+"="+cluster)); err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.Pod{}
	for _, p := range pods.Items {
		out[p.Labels[labelMember]] = p
	}
	return out
}

// majorityNode is the node holding two of the three members, and those
// members. The operator's anti-affinity spreads members over both nodes.
func majorityNode(t *testing.T, pods map[string]corev1.Pod) (string, []string) {
	t.Helper()
	byNode := map[string][]string{}
	for _, m := range slices.Sorted(maps.Keys(pods)) {
		byNode[pods[m].Spec.NodeName] = append(byNode[pods[m].Spec.NodeName], m)
	}
	for node, ms := range byNode {
		if len(ms) == 2 && len(pods) == 3 {
			return node, ms
		}
	}
	t.Fatalf("members by node %v, want 2 on one real node and 1 on the other", byNode)
	return "", nil
}

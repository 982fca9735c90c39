package controller_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
	"github.com/opkit-dev/opkit/statusutil"
)

// drainNode returns what a drain through cluster's disruption budget may
// do, evicting as many pods as the budget allows, voting members first
// (the worst case): how many healthy voting members it may evict, how many
// are healthy before, and how many voting members etcd has.
func (g *rig) drainNode(cluster string, members []etcdclient.Member) (evictable, healthyVoters, voters int) {
	g.t.Helper()
	ctx := g.t.Context()
	var pdb policyv1.PodDisruptionBudget
	if err := g.c.Get(ctx, client.ObjectKey{Namespace: g.ns, Name: cluster}, &pdb); err != nil {
		g.t.Fatal(err)
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		g.t.Fatal(err)
	}
	var pods corev1.PodList
	if err := g.c.List(ctx, &pods, client.InNamespace(g.ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		g.t.Fatal(err)
	}
	voting := map[string]bool{}
	for _, m := range members {
		if !m.IsLearner {
			voting[m.Name] = true
			voters++
		}
	}
	var healthy int
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && isReady(&p) {
			healthy++
			if voting[p.Name] {
				healthyVoters++
			}
		}
	}
	allowed := max(healthy-pdb.Spec.MinAvailable.IntValue(), 0)
	// Voting members the budget does not select can all be evicted.
	unselected := 0
	for name := range voting {
		var p corev1.Pod
		if err := g.c.Get(ctx, client.ObjectKey{Namespace: g.ns, Name: name}, &p); err == nil && p.DeletionTimestamp == nil && isReady(&p) && !sel.Matches(labels.Set(p.Labels)) {
			unselected++
		}
	}
	return min(allowed, healthyVoters) + unselected, healthyVoters + unselected, voters
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestDisruptionBudgetKeepsAQuorumOfVoters: a drain that honours the
// cluster's PodDisruptionBudget never leaves fewer healthy voting members
// than a quorum of the current ones. Before the fix the budget was sized
// from spec.size and selected every member pod: during 5 -> 3 it let
// 2 of 4 voters go, and a replacement learner counted as one of the pods
// that must stay, so a voter could go in its place.
func TestDisruptionBudgetKeepsAQuorumOfVoters(t *testing.T) {
	tests := []struct {
		name  string
		size  int32
		setup func(g *rig)
	}{
		{"5 -> 3, one member removed", 5, func(g *rig) {
			c := g.get("pdb")
			c.Spec.Size = 3
			if err := g.c.Update(g.t.Context(), c); err != nil {
				g.t.Fatal(err)
			}
			if err := g.pass("pdb"); err != nil {
				g.t.Fatal(err)
			}
		}},
		{"3 -> 1, the second removal refused", 3, func(g *rig) {
			c := g.get("pdb")
			c.Spec.Size = 1
			if err := g.c.Update(g.t.Context(), c); err != nil {
				g.t.Fatal(err)
			}
			for i := 0; len(g.fake.Members()) > 2; i++ {
				if i == 10 {
					g.t.Fatalf("no member removed in 10 passes: %v", g.fake.Members())
				}
				_ = g.pass("pdb")
			}
			injected := errors.New("injected")
			g.fake.FailNext("MemberRemove", injected, false)
			if err := g.pass("pdb"); !errors.Is(err, injected) {
				g.t.Fatalf("the pass returned %v, not the refused removal", err)
			}
		}},
		{"a replacement learner catching up", 3, func(g *rig) { g.replaceWithLaggingLearner("pdb", "pdb-0") }},
		{"steady", 3, func(*rig) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newRig(t)
			g.create(cluster("pdb", tt.size))
			g.converge("pdb", 40)
			tt.setup(g)
			if evictable, healthy, voters := g.drainNode("pdb", g.fake.Members()); evictable > 0 && healthy-evictable < membership.Quorum(voters) {
				t.Errorf("a drain through the budget may evict %d of %d healthy voting members, leaving fewer than the quorum %d of %d", evictable, healthy, membership.Quorum(voters), voters)
			}
		})
	}
}

// TestRolloutRestartsThroughTheBudget: a drain evicts the leader's pod
// (the budget allows one of three) while the operator's cache still lists
// it, and a version upgrade asks for a rollout. Before, the rollout
// deleted a follower's pod as well: two of three voters down at once. It
// now restarts members through the Eviction API, so the budget, kept by
// the real disruption controller, refuses the second disruption and the
// rollout waits.
func TestRolloutRestartsThroughTheBudget(t *testing.T) {
	g := budgetedCluster(t, "ev")
	ctx := t.Context()
	var stale corev1.PodList
	if err := g.c.List(ctx, &stale, client.InNamespace(g.ns)); err != nil {
		t.Fatal(err)
	}
	leader := ""
	for _, m := range g.fake.Members() {
		if m.ID == g.fake.Leader() {
			leader = m.Name
		}
	}
	drained := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: leader, Namespace: g.ns}}
	if err := g.c.SubResource("eviction").Create(ctx, drained, &policyv1.Eviction{ObjectMeta: drained.ObjectMeta}); err != nil {
		t.Fatalf("draining %s: %v", leader, err)
	}
	g.cacheKeepsPods(&stale)
	c := g.get("ev")
	c.Spec.Version = "3.7.0"
	if err := g.c.Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_ = g.pass("ev")
	}
	var pods corev1.PodList
	if err := g.c.List(ctx, &pods, client.InNamespace(g.ns)); err != nil {
		t.Fatal(err)
	}
	var running []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			running = append(running, p.Name)
		}
	}
	if len(running) < 2 {
		t.Errorf("member pods left after a drain of %s and a rollout: %v; want 2 of 3 (a quorum); events %q", leader, running, g.drain())
	}
	if c := g.get("ev"); !strings.Contains(statusutil.Get(c, statusutil.ConditionReconciling).Message, "disruption budget") {
		t.Errorf("Reconciling %+v, want the rollout waiting on the disruption budget", statusutil.Get(c, statusutil.ConditionReconciling))
	}

	// The drained member back, the rollout goes on to its end.
	g.cache = nil
	g.startOperator()
	g.fake.SetHealthy(controller.PeerURL(c, leader), false)
	g.converge("ev", 60)
	for _, p := range g.pods("ev") {
		if v := p.Labels[controller.LabelVersion]; v != "3.7.0" {
			t.Errorf("pod %s runs %s after the rollout, want 3.7.0", p.Name, v)
		}
	}
}

// budgetedCluster converges a 3-member cluster name beside the real
// kube-controller-manager, whose disruption controller counts its budget,
// once that allows one disruption.
func budgetedCluster(t *testing.T, name string) *rig {
	t.Helper()
	g := newRig(t)
	g.withRealControllers()
	g.create(cluster(name, 3))
	g.converge(name, 30)
	g.waitBudgetAllows(name, 1)
	return g
}

// waitBudgetAllows waits until the real disruption controller counted
// cluster's pods and its budget allows n disruptions.
func (g *rig) waitBudgetAllows(cluster string, n int32) {
	g.t.Helper()
	var pdb policyv1.PodDisruptionBudget
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err := g.c.Get(g.t.Context(), client.ObjectKey{Namespace: g.ns, Name: cluster}, &pdb); err != nil {
			g.t.Fatal(err)
		}
		if pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.DisruptionsAllowed == n {
			return
		}
	}
	g.t.Fatalf("budget %s allows %d disruptions (status %+v), want %d", cluster, pdb.Status.DisruptionsAllowed, pdb.Status, n)
}

// TestDrainKeepsANotReadyVoter: a drain took one of three voters; another
// is not Ready for a moment (a probe timed out under load) while it still
// votes. The budget must refuse to let it go too: the quorum would be
// lost. Before, the budget let any pod that is not Ready go
// (unhealthyPodEvictionPolicy AlwaysAllow).
func TestDrainKeepsANotReadyVoter(t *testing.T) {
	g := budgetedCluster(t, "nr")
	ctx := t.Context()
	evict := func(name string) error {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: g.ns}}
		return g.c.SubResource("eviction").Create(ctx, pod, &policyv1.Eviction{ObjectMeta: pod.ObjectMeta})
	}
	if err := evict("nr-0"); err != nil {
		t.Fatalf("draining nr-0: %v", err)
	}
	var p corev1.Pod
	if err := g.c.Get(ctx, client.ObjectKey{Namespace: g.ns, Name: "nr-1"}, &p); err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	if err := g.c.Status().Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
	var pdb policyv1.PodDisruptionBudget
	for deadline := time.Now().Add(30 * time.Second); pdb.Status.CurrentHealthy != 1; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("budget status %+v, want 1 healthy pod", pdb.Status)
		}
		if err := g.c.Get(ctx, client.ObjectKey{Namespace: g.ns, Name: "nr"}, &pdb); err != nil {
			t.Fatal(err)
		}
	}
	if err := evict("nr-1"); !apierrors.IsTooManyRequests(err) {
		t.Errorf("draining nr-1, a voter not Ready while nr-0 is gone: %v; want it refused (429)", err)
	}
}

// TestRolloutLeavesAReplacedPod: a rollout decided on a pod list that no
// longer holds the pod it restarts (a stale cache; the pod was replaced
// since) restarts nothing and says so. Before, the eviction's conflict
// counted as done: the pass reported the member restarted (event
// Upgrading) while its replacement ran on.
func TestRolloutLeavesAReplacedPod(t *testing.T) {
	g := newRig(t)
	g.create(cluster("rp", 3))
	g.converge("rp", 30)
	ctx := t.Context()
	var stale corev1.PodList
	if err := g.c.List(ctx, &stale, client.InNamespace(g.ns)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"rp-0", "rp-1", "rp-2"} {
		g.deletePodAndStop("rp", name)
		g.converge("rp", 30)
	}
	replacements := map[string]types.UID{}
	for _, p := range g.pods("rp") {
		replacements[p.Name] = p.UID
	}

	g.cacheKeepsPods(&stale)
	c := g.get("rp")
	c.Spec.Version = "3.7.0"
	if err := g.c.Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	g.drain()
	_ = g.pass("rp")
	if events := g.drain(); len(events) > 0 {
		t.Errorf("events of a pass that restarted nothing: %q", events)
	}
	got := map[string]types.UID{}
	for _, p := range g.pods("rp") {
		if p.DeletionTimestamp == nil {
			got[p.Name] = p.UID
		}
	}
	if diff := cmp.Diff(replacements, got); diff != "" {
		t.Errorf("running pods after a rollout pass on a stale pod list (-replacements +got):\n%s", diff)
	}
	if r := statusutil.Get(g.get("rp"), statusutil.ConditionReconciling); !strings.Contains(r.Message, "replaced") {
		t.Errorf("Reconciling %+v, want the rollout waiting on the replaced pod", r)
	}
}

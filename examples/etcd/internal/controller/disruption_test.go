package controller_test

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
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

package controller_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/statusutil"
)

// TestEphemeralSingleMemberUpgrade: a one-member cluster without
// persistent storage upgrades by adding a member on the new version,
// promoting it and only then removing the old one, so it finishes and
// never has no voting member. Before, the upgrade removed the only member
// (through the other members: there were none), which failed every pass,
// forever.
func TestEphemeralSingleMemberUpgrade(t *testing.T) {
	g := newRig(t)
	c := cluster("e", 1)
	c.Spec.Storage.Ephemeral = true
	g.create(c)
	g.converge("e", 10)
	c = g.get("e")
	c.Spec.Version = "3.7.0"
	if err := g.c.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if i == 20 {
			c := g.get("e")
			t.Fatalf("upgrade not finished after 20 passes; etcd members %v; conditions %+v", g.etcdMembers(), c.Status.Conditions)
		}
		if err := g.pass("e"); err != nil {
			t.Fatalf("pass %d: %v", i, err)
		}
		g.kubelet("e")
		voting := 0
		for _, m := range g.fake.Members() {
			if !m.IsLearner {
				voting++
			}
		}
		if voting == 0 {
			t.Fatalf("pass %d left no voting member: %v", i, g.etcdMembers())
		}
		c := g.get("e")
		if statusutil.IsFalse(c, v1alpha1.ConditionProgressing) && c.Status.ObservedGeneration == c.Generation && c.Status.Version == "3.7.0" {
			break
		}
	}
	if diff := cmp.Diff(voters("e-1"), g.etcdMembers()); diff != "" {
		t.Errorf("etcd members after the upgrade (-want +got):\n%s", diff)
	}
	var pods corev1.PodList
	if err := g.c.List(t.Context(), &pods, client.InNamespace(g.ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Labels[controller.LabelVersion] != "3.7.0" {
			t.Errorf("pod %s runs %s, want 3.7.0", p.Name, p.Labels[controller.LabelVersion])
		}
	}
}

// TestStuckLearnerDoesNotBlockScaleDown: a learner added by a scale-up
// that never catches up (its pod stays Pending) is removed once the size
// is lowered back, and the cluster converges. Before, every pass waited
// for the learner to become healthy, and the scale-down never happened.
func TestStuckLearnerDoesNotBlockScaleDown(t *testing.T) {
	g := newRig(t)
	g.create(cluster("s", 3))
	g.converge("s", 20)
	c := g.get("s")
	c.Spec.Size = 4
	if err := g.c.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	if err := g.pass("s"); err != nil { // adds the learner s-3; its pod stays Pending
		t.Fatal(err)
	}
	// An unstarted learner has no name yet in etcd's member list.
	if diff := cmp.Diff(append([]string{" learner=true"}, voters("s-0", "s-1", "s-2")...), g.etcdMembers()); diff != "" {
		t.Fatalf("etcd members after the scale-up (-want +got):\n%s", diff)
	}
	c = g.get("s")
	c.Spec.Size = 3
	if err := g.c.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	// No kubelet from here on: s-3's pod never runs.
	for i := 0; ; i++ {
		if i == 10 {
			t.Fatalf("not converged after 10 passes; etcd members %v; conditions %+v", g.etcdMembers(), g.get("s").Status.Conditions)
		}
		if err := g.pass("s"); err != nil {
			t.Fatalf("pass %d: %v", i, err)
		}
		c := g.get("s")
		if statusutil.IsFalse(c, v1alpha1.ConditionProgressing) && c.Status.ObservedGeneration == c.Generation {
			break
		}
	}
	if diff := cmp.Diff(voters("s-0", "s-1", "s-2"), g.etcdMembers()); diff != "" {
		t.Errorf("etcd members after the scale-down (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"s-0", "s-1", "s-2"}, g.names(&corev1.PodList{})); diff != "" {
		t.Errorf("pods after the scale-down (-want +got):\n%s", diff)
	}
}

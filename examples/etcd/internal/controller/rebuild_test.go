package controller_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
	"github.com/opkit-dev/opkit/statusutil"
)

// podIfAny returns pod name, nil if it does not exist.
func (g *rig) podIfAny(name string) *corev1.Pod {
	g.t.Helper()
	var p corev1.Pod
	if err := g.c.Get(g.t.Context(), client.ObjectKey{Namespace: g.ns, Name: name}, &p); err != nil {
		if client.IgnoreNotFound(err) != nil {
			g.t.Fatal(err)
		}
		return nil
	}
	return &p
}

// loseMember deletes member name's pod and claim (a node lost with its
// local volume) and stops its fake member.
func (g *rig) loseMember(cluster, name string) {
	g.t.Helper()
	g.deletePodAndStop(cluster, name)
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name + "-data", Namespace: g.ns}}
	if err := g.c.Delete(g.t.Context(), claim); err != nil {
		g.t.Fatal(err)
	}
}

// TestQuorumLossRebuild: a 3-member cluster loses two members with their
// pods and claims. Without spec.recovery it is reported Degraded
// (QuorumLost) and nothing is written; with quorumLoss Rebuild the
// survivor is chosen by its raft index, recorded in status.recovery,
// restarted with --force-new-cluster, restarted again without it once it
// answers, and the cluster grows back to 3, one event per step.
func TestQuorumLossRebuild(t *testing.T) {
	g := newRig(t)
	g.create(cluster("q", 3))
	g.converge("q", 20)
	c := g.get("q")
	survivorID := slices.IndexFunc(c.Status.Members, func(m v1alpha1.MemberStatus) bool { return m.Name == "q-1" })
	if survivorID < 0 {
		t.Fatalf("members %+v", c.Status.Members)
	}
	oldID := c.Status.Members[survivorID].ID

	g.loseMember("q", "q-0")
	g.loseMember("q", "q-2")
	g.fake.LoseQuorum()
	g.fake.SetRaftIndex(controller.PeerURL(c, "q-1"), 42)
	g.drain()

	if err := g.pass("q"); err != nil {
		t.Fatal(err)
	}
	c = g.get("q")
	if cond := statusutil.Get(c, v1alpha1.ConditionDegraded); cond == nil || cond.Status != metav1.ConditionTrue ||
		cond.Reason != membership.ReasonQuorumLost || !strings.Contains(cond.Message, "quorumLoss to Rebuild") {
		t.Fatalf("Degraded = %+v, want True, reason %s, saying how to opt in", cond, membership.ReasonQuorumLost)
	}
	if pod := g.podIfAny("q-1"); pod == nil || pod.DeletionTimestamp != nil {
		t.Fatal("the survivor's pod was touched without opting in")
	}

	c.Spec.Recovery = &v1alpha1.RecoverySpec{QuorumLoss: v1alpha1.QuorumLossRebuild}
	if err := g.c.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	// Pass 1: the survivor is chosen and its pod, running without the
	// flag, is deleted (its claim kept).
	if err := g.pass("q"); err != nil {
		t.Fatal(err)
	}
	c = g.get("q")
	if r := c.Status.Recovery; r == nil || r.Member != "q-1" || r.RaftIndex != 42 || r.StartTime == nil {
		t.Fatalf("status.recovery = %+v, want q-1 at raft index 42; conditions %+v", r, c.Status.Conditions)
	}
	if pod := g.podIfAny("q-1"); pod != nil {
		t.Fatalf("the survivor's pod still exists: %+v", pod.ObjectMeta)
	}
	// Pass 2: created again with --force-new-cluster.
	if err := g.pass("q"); err != nil {
		t.Fatal(err)
	}
	pod := g.podIfAny("q-1")
	if pod == nil || pod.Annotations[controller.AnnotationForceNewCluster] != "true" || !slices.Contains(pod.Spec.Containers[0].Args, "--force-new-cluster") {
		t.Fatalf("survivor pod %+v, want it with --force-new-cluster", pod)
	}
	if got := pod.Spec.Volumes[slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "data" })].PersistentVolumeClaim; got == nil || got.ClaimName != "q-1-data" {
		t.Fatalf("survivor pod's data volume %+v, want its claim q-1-data", got)
	}
	// etcd starts on the survivor's data as a one-member cluster.
	g.fake.ForceNewCluster(controller.PeerURL(c, "q-1"))
	g.converge("q", 30)

	c = g.get("q")
	if c.Status.Recovery != nil {
		t.Errorf("status.recovery = %+v after the rebuild, want none", c.Status.Recovery)
	}
	// envtest runs no pvc-protection controller: the lost members' claims
	// stay terminating, so their replacements take new names.
	if diff := cmp.Diff(voters("q-1", "q-3", "q-4"), g.etcdMembers()); diff != "" {
		t.Errorf("etcd members (-want +got):\n%s", diff)
	}
	if i := slices.IndexFunc(c.Status.Members, func(m v1alpha1.MemberStatus) bool { return m.Name == "q-1" }); i < 0 || c.Status.Members[i].ID != oldID {
		t.Errorf("q-1 is not the survivor (ID %s) any more: %+v", oldID, c.Status.Members)
	}
	var pods corev1.PodList
	if err := g.c.List(t.Context(), &pods, client.InNamespace(g.ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Annotations[controller.AnnotationForceNewCluster] != "" || slices.Contains(p.Spec.Containers[0].Args, "--force-new-cluster") {
			t.Errorf("pod %s still runs with --force-new-cluster", p.Name)
		}
	}
	events := strings.Join(g.drain(), "\n")
	for _, reason := range []string{membership.ReasonRebuilding, membership.ReasonRebuilt, "ScalingUp"} {
		if !strings.Contains(events, " "+reason+" ") {
			t.Errorf("no %s event in:\n%s", reason, events)
		}
	}
}

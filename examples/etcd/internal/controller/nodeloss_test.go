package controller_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
)

// pinClaim binds member's data claim to a new local volume on node, as a
// local-path provisioner would.
func (g *rig) pinClaim(member, node string) {
	g.t.Helper()
	ctx := g.t.Context()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: g.ns + "-" + member},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				Local: &corev1.LocalVolumeSource{Path: "/var/lib/local/" + member}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
	if err := g.c.Create(ctx, pv); err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { _ = g.c.Delete(ctx, pv) })
	var claim corev1.PersistentVolumeClaim
	if err := g.c.Get(ctx, client.ObjectKey{Namespace: g.ns, Name: member + "-data"}, &claim); err != nil {
		g.t.Fatal(err)
	}
	claim.Spec.VolumeName = pv.Name
	if err := g.c.Update(ctx, &claim); err != nil {
		g.t.Fatal(err)
	}
}

// TestMemberOnALostNodeIsReplaced: a member whose pod is gone and whose
// data is on a local volume keeps its claim while its node exists (the
// pod comes back on it), and is replaced once the node is declared gone:
// deleted, or tainted out-of-service. One event says which node and why.
func TestMemberOnALostNodeIsReplaced(t *testing.T) {
	for _, declare := range []string{"deleted", "tainted"} {
		t.Run(declare, func(t *testing.T) {
			g := newRig(t)
			g.create(cluster("nl", 3))
			g.converge("nl", 30)
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + g.ns}}
			if err := g.c.Create(t.Context(), node); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = g.c.Delete(t.Context(), node) })
			g.pinClaim("nl-1", node.Name)
			oldID := g.memberID("nl-1")

			// The pod is gone, its node still there: recreated on its claim.
			g.deletePodAndStop("nl", "nl-1")
			g.drain()
			if err := g.pass("nl"); err != nil {
				t.Fatal(err)
			}
			if events := strings.Join(g.drain(), "\n"); strings.Contains(events, controller.EventMemberNodeLost) || g.podIfAny("nl-1") == nil {
				t.Fatalf("with its node there: events %q, pod %v; want the pod recreated on its claim", events, g.podIfAny("nl-1"))
			}

			// The node is declared gone, and its pods with it.
			if declare == "deleted" {
				if err := g.c.Delete(t.Context(), node); err != nil {
					t.Fatal(err)
				}
			} else {
				node.Spec.Taints = []corev1.Taint{{Key: controller.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
				if err := g.c.Update(t.Context(), node); err != nil {
					t.Fatal(err)
				}
			}
			g.deletePodAndStop("nl", "nl-1")
			if err := g.pass("nl"); err != nil {
				t.Fatal(err)
			}
			events := strings.Join(g.drain(), "\n")
			if !strings.Contains(events, controller.EventMemberNodeLost) || !strings.Contains(events, node.Name) {
				t.Errorf("events %q, want %s naming %s", events, controller.EventMemberNodeLost, node.Name)
			}
			if _, errs := g.converge("nl", 40); len(errs) > 0 {
				t.Fatalf("not converged after the replacement: %v", errs)
			}
			members := g.fake.Members()
			if len(members) != 3 || slices.ContainsFunc(members, func(m etcdclient.Member) bool { return m.ID == oldID }) {
				t.Errorf("etcd members %v after the node was lost, want 3 without nl-1's old ID %x", g.etcdMembers(), oldID)
			}
		})
	}
}

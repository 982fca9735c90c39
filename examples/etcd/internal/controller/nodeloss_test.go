package controller_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
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
				// Tainted longer ago than the grace (TestOutOfServiceTaintWaitsForItsGrace).
				added := metav1.NewTime(g.clock.Now().Add(-controller.DefaultNodeLossGracePeriod - time.Minute))
				node.Spec.Taints = []corev1.Taint{{Key: controller.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute, TimeAdded: &added}}
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

// TestOutOfServiceTaintWaitsForItsGrace: the out-of-service taint says a
// node is shut down, not that its disks are gone (a person removes it once
// the node is back). A member whose data is on a local volume of that node
// keeps its claim for spec.recovery.nodeLossGracePeriod (10 minutes by
// default) from when the taint was added, or first seen without a time;
// after that it is replaced. A taint removed within the grace starts it
// anew. Before, the taint deleted the claim at once.
func TestOutOfServiceTaintWaitsForItsGrace(t *testing.T) {
	for _, tt := range []struct {
		name  string
		grace *metav1.Duration
		want  time.Duration
	}{
		{"default", nil, controller.DefaultNodeLossGracePeriod},
		{"spec", &metav1.Duration{Duration: time.Minute}, time.Minute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := newRig(t)
			c := cluster("ng", 3)
			if tt.grace != nil {
				c.Spec.Recovery = &v1alpha1.RecoverySpec{NodeLossGracePeriod: tt.grace}
			}
			g.create(c)
			g.converge("ng", 30)
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + g.ns}}
			if err := g.c.Create(t.Context(), node); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = g.c.Delete(context.Background(), node) })
			g.pinClaim("ng-1", node.Name)
			claim := g.claim("ng-1-data")
			taint := func(on bool) {
				t.Helper()
				if err := g.c.Get(t.Context(), client.ObjectKeyFromObject(node), node); err != nil {
					t.Fatal(err)
				}
				node.Spec.Taints = nil
				if on {
					node.Spec.Taints = []corev1.Taint{{Key: controller.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
				}
				if err := g.c.Update(t.Context(), node); err != nil {
					t.Fatal(err)
				}
			}
			kept := func(when string) {
				t.Helper()
				if events := strings.Join(g.drain(), "\n"); strings.Contains(events, controller.EventMemberNodeLost) {
					t.Fatalf("%s: events %q, want no %s", when, events, controller.EventMemberNodeLost)
				}
				if got := g.claim("ng-1-data"); got.UID != claim.UID || got.DeletionTimestamp != nil {
					t.Fatalf("%s: claim ng-1-data replaced or deleted", when)
				}
			}
			passes := func() {
				for range 3 {
					_ = g.pass("ng") // no kubelet: ng-1's pod does not run
				}
			}

			taint(true)
			g.deletePodAndStop("ng", "ng-1")
			g.drain()
			passes()
			kept("just tainted")
			g.clock.advance(tt.want - time.Second)
			passes()
			kept("a second before the grace ends")

			// Back within the grace: the next taint starts a new one.
			taint(false)
			passes()
			taint(true)
			g.clock.advance(2 * time.Second)
			passes()
			kept("tainted again")

			g.clock.advance(tt.want)
			passes()
			events := strings.Join(g.drain(), "\n")
			if !strings.Contains(events, controller.EventMemberNodeLost) || !strings.Contains(events, node.Name) {
				t.Errorf("after the grace: events %q, want %s naming %s", events, controller.EventMemberNodeLost, node.Name)
			}
		})
	}
}

// claim returns the claim name of the rig's namespace.
func (g *rig) claim(name string) *corev1.PersistentVolumeClaim {
	g.t.Helper()
	var pvc corev1.PersistentVolumeClaim
	if err := g.c.Get(g.t.Context(), client.ObjectKey{Namespace: g.ns, Name: name}, &pvc); err != nil {
		g.t.Fatal(err)
	}
	return &pvc
}

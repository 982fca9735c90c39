package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
)

// bindClaims binds every claim of the rig's namespace to a volume of its
// request, and resizeClaims gives each the capacity it requests, as a
// provisioner and a resizer would (envtest runs neither).
func (g *rig) bindClaims() {
	g.t.Helper()
	ctx := g.t.Context()
	for _, claim := range g.claims() {
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: g.ns + "-" + claim.Name},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:               claim.Spec.Resources.Requests,
				AccessModes:            claim.Spec.AccessModes,
				StorageClassName:       ptr.Deref(claim.Spec.StorageClassName, ""),
				ClaimRef:               &corev1.ObjectReference{Namespace: g.ns, Name: claim.Name, UID: claim.UID},
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/" + pvName(claim)}},
			},
		}
		if err := g.c.Create(ctx, pv); err != nil {
			g.t.Fatal(err)
		}
		g.t.Cleanup(func() { _ = g.c.Delete(ctx, pv) })
		claim.Spec.VolumeName = pv.Name
		if err := g.c.Update(ctx, claim); err != nil {
			g.t.Fatal(err)
		}
		claim.Status.Phase = corev1.ClaimBound
		claim.Status.AccessModes = claim.Spec.AccessModes
		claim.Status.Capacity = claim.Spec.Resources.Requests
		if err := g.c.Status().Update(ctx, claim); err != nil {
			g.t.Fatal(err)
		}
	}
}

func pvName(claim *corev1.PersistentVolumeClaim) string { return claim.Namespace + "-" + claim.Name }

// boundAt1Gi makes a StorageClass allowing expansion or not, and cluster
// name of 3 members on claims of 1Gi of it, converged and bound.
func (g *rig) boundAt1Gi(name string, allowExpansion bool) *storagev1.StorageClass {
	g.t.Helper()
	ctx := g.t.Context()
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: g.ns},
		Provisioner: "example.com/disks", AllowVolumeExpansion: ptr.To(allowExpansion)}
	if err := g.c.Create(ctx, class); err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { _ = g.c.Delete(context.Background(), class) })
	c := cluster(name, 3)
	c.Spec.Storage = v1alpha1.StorageSpec{Size: ptr.To(resource.MustParse("1Gi")), StorageClassName: &class.Name}
	g.create(c)
	g.converge(name, 30)
	g.bindClaims()
	if err := g.pass(name); err != nil {
		g.t.Fatal(err)
	}
	return class
}

func (g *rig) resizeClaims() {
	g.t.Helper()
	for _, claim := range g.claims() {
		claim.Status.Capacity = claim.Spec.Resources.Requests
		if err := g.c.Status().Update(g.t.Context(), claim); err != nil {
			g.t.Fatal(err)
		}
	}
}

// claims are the claims of the rig's namespace.
func (g *rig) claims() []*corev1.PersistentVolumeClaim {
	g.t.Helper()
	var list corev1.PersistentVolumeClaimList
	if err := g.c.List(g.t.Context(), &list, client.InNamespace(g.ns)); err != nil {
		g.t.Fatal(err)
	}
	out := make([]*corev1.PersistentVolumeClaim, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out
}

// claimRequests maps each claim of the namespace to its storage request.
func (g *rig) claimRequests() map[string]string {
	g.t.Helper()
	out := map[string]string{}
	for _, c := range g.claims() {
		q := c.Spec.Resources.Requests[corev1.ResourceStorage]
		out[c.Name] = q.String()
	}
	return out
}

// TestStorageGrowsWhereTheClassAllows: raising spec.storage.size asks
// every member's claim for the new size where the StorageClass allows
// volume expansion (one event per claim; StorageResized False, reason
// Expanding, until the volumes have grown, then True); where it does not,
// the claims stay, StorageResized is False with reason
// ExpansionNotAllowed naming the fix, one Warning event says so, the
// cluster stays available, and the claims grow once the class allows it.
// A cluster never resized has no such condition.
func TestStorageGrowsWhereTheClassAllows(t *testing.T) {
	for _, allow := range []bool{true, false} {
		t.Run(fmt.Sprintf("allowVolumeExpansion=%t", allow), func(t *testing.T) {
			g := newRig(t)
			class := g.boundAt1Gi("vx", allow)
			if cond := meta.FindStatusCondition(g.get("vx").Status.Conditions, v1alpha1.ConditionStorageResized); cond != nil {
				t.Errorf("StorageResized before any resize: %+v", cond)
			}

			c := g.get("vx")
			c.Spec.Storage.Size = ptr.To(resource.MustParse("2Gi"))
			if err := g.c.Update(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			g.drain()
			for range 2 {
				if err := g.pass("vx"); err != nil {
					t.Fatal(err)
				}
			}
			events := g.drain()
			c = g.get("vx")
			cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionStorageResized)
			if cond == nil {
				t.Fatalf("no StorageResized condition after the size grew; conditions %+v", c.Status.Conditions)
			}
			if !allow {
				want := map[string]string{"vx-0-data": "1Gi", "vx-1-data": "1Gi", "vx-2-data": "1Gi"}
				if diff := cmp.Diff(want, g.claimRequests()); diff != "" {
					t.Errorf("claim requests (-want +got):\n%s", diff)
				}
				if cond.Status != metav1.ConditionFalse || cond.Reason != controller.ReasonExpansionNotAllowed ||
					!strings.Contains(cond.Message, "allowVolumeExpansion") || !strings.Contains(cond.Message, "spec.storage.size 2Gi") {
					t.Errorf("StorageResized = %s %s %q, want False %s naming spec.storage.size and allowVolumeExpansion",
						cond.Status, cond.Reason, cond.Message, controller.ReasonExpansionNotAllowed)
				}
				t.Logf("StorageResized: %s", cond.Message)
				if n := countPrefix(events, "Warning "+controller.ReasonExpansionNotAllowed); n != 1 {
					t.Errorf("%d %s events over two passes, want 1: %q", n, controller.ReasonExpansionNotAllowed, events)
				}
				if a := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionAvailable); a == nil || a.Status != metav1.ConditionTrue {
					t.Errorf("Available = %+v, want True: a refused expansion stops nothing", a)
				}
				// The fix the message names: the class allows it now.
				class.AllowVolumeExpansion = ptr.To(true)
				if err := g.c.Update(t.Context(), class); err != nil {
					t.Fatal(err)
				}
				if err := g.pass("vx"); err != nil {
					t.Fatal(err)
				}
				want = map[string]string{"vx-0-data": "2Gi", "vx-1-data": "2Gi", "vx-2-data": "2Gi"}
				if diff := cmp.Diff(want, g.claimRequests()); diff != "" {
					t.Errorf("claim requests once the class allows expansion (-want +got):\n%s", diff)
				}
				return
			}
			want := map[string]string{"vx-0-data": "2Gi", "vx-1-data": "2Gi", "vx-2-data": "2Gi"}
			if diff := cmp.Diff(want, g.claimRequests()); diff != "" {
				t.Errorf("claim requests (-want +got):\n%s", diff)
			}
			if cond.Status != metav1.ConditionFalse || cond.Reason != controller.ReasonExpanding {
				t.Errorf("StorageResized = %s %s %q, want False %s while the volumes grow", cond.Status, cond.Reason, cond.Message, controller.ReasonExpanding)
			}
			if n := countPrefix(events, "Normal "+controller.EventExpandingVolume); n != 3 {
				t.Errorf("%d %s events, want 3 (one per claim): %q", n, controller.EventExpandingVolume, events)
			}
			g.resizeClaims()
			if err := g.pass("vx"); err != nil {
				t.Fatal(err)
			}
			cond = meta.FindStatusCondition(g.get("vx").Status.Conditions, v1alpha1.ConditionStorageResized)
			if cond == nil || cond.Status != metav1.ConditionTrue {
				t.Errorf("StorageResized = %+v once every volume grew, want True", cond)
			}
			if events := g.drain(); slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, "Expand") }) {
				t.Errorf("events after the volumes grew: %q", events)
			}
		})
	}
}

func countPrefix(events []string, prefix string) int {
	n := 0
	for _, e := range events {
		if strings.HasPrefix(e, prefix) {
			n++
		}
	}
	return n
}

// TestExpansionNeverRecreatesAGoneClaim: a claim asked for a larger
// spec.storage.size is patched, never created. Here the operator's cache
// still lists member x-1's claim, bound at the old size, after it and
// the member's pod are gone. Before the fix the resize applied the claim,
// which made a new, empty one, and the same pass recreated the member's
// pod on it under its old ID (TestRecreatedMemberNeverGetsAnEmptyClaim's
// loss, by another path).
func TestExpansionNeverRecreatesAGoneClaim(t *testing.T) {
	g := newRig(t)
	g.boundAt1Gi("x", true)
	old := g.memberID("x-1")
	fresh := g.cacheKeepsClaims()

	g.loseMember("x", "x-1")
	g.claimGone("x-1")
	c := g.get("x")
	c.Spec.Storage.Size = ptr.To(resource.MustParse("2Gi"))
	if err := g.c.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_ = g.pass("x")
		var claim corev1.PersistentVolumeClaim
		if err := g.c.Get(t.Context(), client.ObjectKey{Namespace: g.ns, Name: "x-1-data"}, &claim); err == nil {
			t.Fatalf("claim x-1-data created again (UID %s, %s) for member x-1, whose ID %x etcd still has: an empty member under an old ID",
				claim.UID, claim.Spec.Resources.Requests.Storage(), old)
		}
	}
	want := map[string]string{"x-0-data": "2Gi", "x-2-data": "2Gi"}
	if diff := cmp.Diff(want, g.claimRequests()); diff != "" {
		t.Errorf("claim requests (-want +got):\n%s", diff)
	}

	fresh()
	g.converge("x", 30)
	for _, m := range g.fake.Members() {
		if m.ID == old {
			t.Errorf("member %s still has the ID %x of the member whose data is gone", m.Name, old)
		}
	}
}

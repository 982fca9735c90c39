package controller_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/statusutil"
)

// memberID returns the etcd member ID of member name, 0 if etcd has none.
func (g *rig) memberID(name string) uint64 {
	for _, m := range g.fake.Members() {
		if m.Name == name {
			return m.ID
		}
	}
	return 0
}

// deletePodAndStop deletes member pod name and stops its fake member (it
// no longer answers), as when a size-1 cluster loses its only pod.
func (g *rig) deletePodAndStop(cluster, name string) {
	g.t.Helper()
	if err := g.c.Delete(g.t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: g.ns}}); err != nil {
		g.t.Fatal(err)
	}
	g.fake.SetHealthy(controller.PeerURL(g.get(cluster), name), false)
}

// TestClusterSize1DeletedPodIsRecreatedOnItsClaim: the only pod of a
// bootstrapped size-1 cluster with persistent storage is deleted, so no
// member answers; its pod is recreated with the same name on the same
// claim, joining as an existing member of the cluster recorded in status,
// and the member (same ID) is healthy again.
func TestClusterSize1DeletedPodIsRecreatedOnItsClaim(t *testing.T) {
	g := newRig(t)
	g.create(cluster("p", 1))
	g.converge("p", 10)
	c := g.get("p")
	before := g.fake.Members()
	var claim corev1.PersistentVolumeClaim
	if err := g.c.Get(t.Context(), types.NamespacedName{Namespace: g.ns, Name: "p-0-data"}, &claim); err != nil {
		t.Fatal(err)
	}

	g.deletePodAndStop("p", "p-0")
	if err := g.pass("p"); err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := g.c.Get(t.Context(), types.NamespacedName{Namespace: g.ns, Name: "p-0"}, &pod); err != nil {
		t.Fatalf("pod p-0 not recreated after one pass: %v; Progressing %+v", err, statusutil.Get(g.get("p"), v1alpha1.ConditionProgressing))
	}
	if got := statusutil.Get(g.get("p"), v1alpha1.ConditionProgressing); got == nil || got.Reason != "MemberRecreated" {
		t.Errorf("Progressing = %+v, want reason MemberRecreated", got)
	}
	i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "data" })
	if i < 0 || pod.Spec.Volumes[i].PersistentVolumeClaim == nil || pod.Spec.Volumes[i].PersistentVolumeClaim.ClaimName != "p-0-data" {
		t.Errorf("recreated pod's volumes %+v, want data on claim p-0-data", pod.Spec.Volumes)
	}
	args := pod.Spec.Containers[0].Args
	for _, want := range []string{"--initial-cluster=p-0=" + controller.PeerURL(c, "p-0"), "--initial-cluster-state=existing"} {
		if !slices.Contains(args, want) {
			t.Errorf("recreated pod's args %q lack %q", args, want)
		}
	}
	var after corev1.PersistentVolumeClaim
	if err := g.c.Get(t.Context(), types.NamespacedName{Namespace: g.ns, Name: "p-0-data"}, &after); err != nil {
		t.Fatal(err)
	}
	if after.UID != claim.UID || after.DeletionTimestamp != nil {
		t.Errorf("claim p-0-data replaced or deleted: UID %s -> %s, deletion %v", claim.UID, after.UID, after.DeletionTimestamp)
	}

	g.converge("p", 10)
	if diff := cmp.Diff(before, g.fake.Members()); diff != "" {
		t.Errorf("etcd members changed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"p-0"}, g.names(&corev1.PodList{})); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
	if c := g.get("p"); c.Status.ReadyMembers != 1 || !statusutil.IsFalse(c, v1alpha1.ConditionDegraded) {
		t.Errorf("after recreation: ready %d, Degraded %+v", c.Status.ReadyMembers, statusutil.Get(c, v1alpha1.ConditionDegraded))
	}
}

// TestClusterEphemeralDeletedPodIsNotRecreated: without persistent storage
// a recreated pod would start an empty member under an existing identity:
// the pod is not recreated and the cluster waits as lost.
func TestClusterEphemeralDeletedPodIsNotRecreated(t *testing.T) {
	g := newRig(t)
	c := cluster("e", 1)
	c.Spec.Storage.Ephemeral = true
	g.create(c)
	g.converge("e", 10)

	g.deletePodAndStop("e", "e-0")
	for range 3 {
		if err := g.pass("e"); err != nil {
			t.Fatal(err)
		}
	}
	if got := g.names(&corev1.PodList{}); len(got) != 0 {
		t.Errorf("pods %v recreated with ephemeral storage", got)
	}
	if got := statusutil.Get(g.get("e"), v1alpha1.ConditionProgressing); got == nil || got.Reason != "ClusterLost" {
		t.Errorf("Progressing = %+v, want reason ClusterLost", got)
	}
}

// TestClusterMemberWithoutClaimIsReplacedNotRecreated: a member of a
// persistent 3-member cluster loses its pod and its claim. Its data is
// gone, so it must not come back under its old identity (an empty member
// with the old ID could help elect a leader missing acknowledged writes):
// it is removed, and a new member with a new ID, on a new claim, takes its
// place.
func TestClusterMemberWithoutClaimIsReplacedNotRecreated(t *testing.T) {
	g := newRig(t)
	g.create(cluster("q", 3))
	g.converge("q", 30)
	lost := g.memberID("q-1")
	if lost == 0 {
		t.Fatalf("no member q-1 in %v", g.etcdMembers())
	}
	if err := g.c.Delete(t.Context(), &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "q-1-data", Namespace: g.ns}}); err != nil {
		t.Fatal(err)
	}
	g.deletePodAndStop("q", "q-1")

	if err := g.pass("q"); err != nil {
		t.Fatal(err)
	}
	if got := statusutil.Get(g.get("q"), v1alpha1.ConditionProgressing); got == nil || got.Reason != "MemberLost" {
		t.Errorf("Progressing = %+v, want reason MemberLost (removed for replacement)", got)
	}
	g.converge("q", 30)
	var names []string
	for _, m := range g.fake.Members() {
		if m.ID == lost {
			t.Errorf("member %s still has the lost member's ID %x", m.Name, lost)
		}
		if m.IsLearner {
			t.Errorf("member %s is still a learner", m.Name)
		}
		names = append(names, m.Name)
	}
	slices.Sort(names)
	// envtest runs no pvc-protection controller: q-1-data stays
	// terminating, so the replacement takes the next free name.
	if diff := cmp.Diff([]string{"q-0", "q-2", "q-3"}, names); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"q-0-data", "q-2-data", "q-3-data"}, g.names(&corev1.PersistentVolumeClaimList{})); diff != "" {
		t.Errorf("live claims (-want +got):\n%s", diff)
	}
}

// cacheKeepsClaims restarts the operator with a cache that lists the
// claims of the rig's namespace as they are now, until fresh is called.
func (g *rig) cacheKeepsClaims() (fresh func()) {
	g.t.Helper()
	var claims corev1.PersistentVolumeClaimList
	if err := g.c.List(g.t.Context(), &claims, client.InNamespace(g.ns)); err != nil {
		g.t.Fatal(err)
	}
	var stale atomic.Bool
	stale.Store(true)
	g.cache = interceptor.NewClient(g.c.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if l, ok := list.(*corev1.PersistentVolumeClaimList); ok && stale.Load() {
				claims.DeepCopyInto(l)
				return nil
			}
			return cl.List(ctx, list, opts...)
		},
	})
	g.startOperator()
	return func() { stale.Store(false) }
}

// cacheKeepsPods restarts the operator with a cache that lists pods as
// stale lists them.
func (g *rig) cacheKeepsPods(stale *corev1.PodList) {
	g.t.Helper()
	g.cache = interceptor.NewClient(g.c.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if l, ok := list.(*corev1.PodList); ok {
				stale.DeepCopyInto(l)
				return nil
			}
			return cl.List(ctx, list, opts...)
		},
	})
	g.startOperator()
}

// TestRecreatedMemberNeverGetsAnEmptyClaim: a member recreated under its
// old ID must start on the claim that holds its data. Here the operator's
// cache still lists the claim after it is gone, so the planner recreates
// the member's pod. Before the fix, creating it applied the claim, which
// made a new, empty one: etcd then took the registered ID with an empty
// log. The claim is now read from the API server and never created on
// this path; the member is replaced once the cache catches up.
func TestRecreatedMemberNeverGetsAnEmptyClaim(t *testing.T) {
	g := newRig(t)
	g.create(cluster("r", 3))
	g.converge("r", 30)
	old := g.memberID("r-1")
	fresh := g.cacheKeepsClaims()

	g.loseMember("r", "r-1")
	g.claimGone("r-1")
	for range 3 {
		_ = g.pass("r")
		var claim corev1.PersistentVolumeClaim
		if err := g.c.Get(t.Context(), client.ObjectKey{Namespace: g.ns, Name: "r-1-data"}, &claim); err == nil {
			t.Fatalf("claim r-1-data created again (UID %s) for member r-1, whose ID %x etcd still has: an empty member under an old ID", claim.UID, old)
		}
	}

	fresh()
	g.converge("r", 30)
	for _, m := range g.fake.Members() {
		if m.ID == old {
			t.Errorf("member %s still has the ID %x of the member whose data is gone", m.Name, old)
		}
	}
}

// TestRecreateRefusesAClaimNotItsOwn: a member recreated on its data is
// placed only on a claim the cluster controls. A claim of the member's
// name that is not the cluster's (made by hand after the member's own
// was lost, or an earlier cluster's) stops the cluster with reason
// ChildConflict, and no pod is placed on it.
func TestRecreateRefusesAClaimNotItsOwn(t *testing.T) {
	g := newRig(t)
	g.create(cluster("f", 3))
	g.converge("f", 30)
	g.loseMember("f", "f-1")
	g.claimGone("f-1")
	foreign := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "f-1-data", Namespace: g.ns,
			Labels: map[string]string{controller.LabelCluster: "f", controller.LabelMember: "f-1"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: controller.DefaultStorageSize}},
		},
	}
	if err := g.c.Create(t.Context(), foreign); err != nil {
		t.Fatal(err)
	}
	_ = g.pass("f")
	var pod corev1.Pod
	if err := g.c.Get(t.Context(), client.ObjectKey{Namespace: g.ns, Name: "f-1"}, &pod); err == nil {
		t.Errorf("pod f-1 created on claim f-1-data, which the cluster does not control")
	}
	rc := statusutil.Get(g.get("f"), statusutil.ConditionReconciling)
	if rc == nil || rc.Reason != controller.ReasonChildConflict || !strings.Contains(rc.Message, "f-1-data") {
		t.Errorf("Reconciling = %+v, want reason %s naming the claim", rc, controller.ReasonChildConflict)
	}
}

// TestStaleCacheDeletesNoReplacementPod: the operator's cache still lists
// a failed pod that has been replaced since, so the pass plans to delete
// it. Before, the deletion read the pod by name from a cache that had
// caught up and deleted the replacement, a healthy member; it now deletes
// only the pod that the plan was made on.
func TestStaleCacheDeletesNoReplacementPod(t *testing.T) {
	g := newRig(t)
	g.create(cluster("s", 3))
	g.converge("s", 30)
	var stale corev1.PodList
	if err := g.c.List(t.Context(), &stale, client.InNamespace(g.ns)); err != nil {
		t.Fatal(err)
	}
	for i := range stale.Items {
		if p := &stale.Items[i]; p.Name == "s-1" {
			p.Status.Phase = corev1.PodFailed
		}
	}
	g.deletePodAndStop("s", "s-1")
	g.converge("s", 30)
	var replacement corev1.Pod
	if err := g.c.Get(t.Context(), client.ObjectKey{Namespace: g.ns, Name: "s-1"}, &replacement); err != nil {
		t.Fatal(err)
	}

	g.cacheKeepsPods(&stale)
	g.drain()
	_ = g.pass("s")
	if events := g.drain(); len(events) > 0 {
		t.Errorf("events of a pass that deleted nothing: %q", events)
	}
	var got corev1.Pod
	if err := g.c.Get(t.Context(), client.ObjectKey{Namespace: g.ns, Name: "s-1"}, &got); err != nil || got.UID != replacement.UID || got.DeletionTimestamp != nil {
		t.Errorf("after a pass on a stale pod list: pod s-1 %v (UID %s, deletionTimestamp %v); want the replacement (UID %s) left running",
			err, got.UID, got.DeletionTimestamp, replacement.UID)
	}
}

package controller_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdtest"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
	"github.com/opkit-dev/opkit/examples/etcd/internal/seedrestore"
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
	if r := c.Status.LastRecovery; r == nil || r.Member != "q-1" || r.RaftIndex != 42 || r.StartTime == nil || r.EndTime == nil {
		t.Errorf("status.lastRecovery = %+v after the rebuild, want the record of the rebuild from q-1", r)
	}
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

// claimGone deletes member name's claim for good: envtest runs no
// pvc-protection controller, so its finalizer is taken off as that
// controller would once no pod uses the claim.
func (g *rig) claimGone(name string) {
	g.t.Helper()
	// The real claim-protection controller, where it runs, races this.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var claim corev1.PersistentVolumeClaim
		if err := g.c.Get(g.t.Context(), client.ObjectKey{Namespace: g.ns, Name: name + "-data"}, &claim); err != nil {
			return err
		}
		claim.Finalizers = nil
		return g.c.Update(g.t.Context(), &claim)
	})
	if client.IgnoreNotFound(err) != nil {
		g.t.Fatal(err)
	}
}

// backupOf takes the on-demand backup name of cluster into the PVC store
// "backups" and returns its ID.
func (g *rig) backupOf(cluster, name string) string {
	g.t.Helper()
	g.createBackup(name, v1alpha1.EtcdBackupSpec{ClusterName: cluster, StoreRef: v1alpha1.StoreReference{PVCName: "backups"}})
	if err := g.backupPass(name); err != nil {
		g.t.Fatal(err)
	}
	b := g.getBackup(name)
	if b.Status.Phase != v1alpha1.BackupSucceeded {
		g.t.Fatalf("backup %s: %+v", name, b.Status)
	}
	return b.Status.BackupID
}

// TestQuorumLossRebuildFromBackup: a 3-member cluster loses every member
// with its pod and claim. Without spec.recovery it is reported Degraded
// and nothing is created; with quorumLoss Rebuild it is rebuilt from the
// newest backup of it whose data verifies (a newer, corrupt one is
// skipped and named), recorded in status.recovery, loaded into a new seed
// before the cluster grows back to 3, with the backup's data key by key.
func TestQuorumLossRebuildFromBackup(t *testing.T) {
	g := newRig(t)
	g.createBackedUp("r", 3, 0, 20)

	want := map[string]string{}
	for i := range 120 {
		want[fmt.Sprintf("/app/key-%03d", i)] = fmt.Sprintf("value %d", i)
	}
	g.putKeys(want)
	good := g.backupOf("r", "b1")
	g.putKeys(map[string]string{"/app/later": "lost with the corrupt backup"})
	g.clock.advance(time.Second) // backup IDs are by the second
	corrupt := g.backupOf("r", "b2")
	etcdtest.Corrupt(t, filepath.Join(g.pvcStoreDir("backups"), g.ns, "r", backup.DataKeyFor(corrupt)))

	for _, m := range []string{"r-0", "r-1", "r-2"} {
		g.loseMember("r", m)
		g.claimGone(m)
	}
	// Every member and its data is gone: a new, empty etcd.
	g.fake = etcdclient.NewFake()
	g.drain()

	if err := g.pass("r"); err != nil {
		t.Fatal(err)
	}
	c := g.get("r")
	if cond := statusutil.Get(c, v1alpha1.ConditionDegraded); cond == nil || cond.Status != metav1.ConditionTrue ||
		cond.Reason != membership.ReasonMemberDataLost || !strings.Contains(cond.Message, "quorumLoss Rebuild") {
		t.Fatalf("Degraded = %+v, want True, reason %s, saying how to opt in; conditions %+v; pods %v", cond, membership.ReasonMemberDataLost, c.Status.Conditions, g.pods("r"))
	}
	if pods := g.pods("r"); len(pods) != 0 {
		t.Fatalf("%d pods created without opting in", len(pods))
	}

	c.Spec.Recovery = &v1alpha1.RecoverySpec{QuorumLoss: v1alpha1.QuorumLossRebuild}
	if err := g.c.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	// Pass 1: the backup is chosen and recorded; nothing is created.
	if err := g.pass("r"); err != nil {
		t.Fatal(err)
	}
	c = g.get("r")
	if r := c.Status.Recovery; r == nil || r.Backup != good || r.Revision == 0 || r.Member != "" || r.StartTime == nil {
		t.Fatalf("status.recovery = %+v, want backup %s with its revision; conditions %+v", r, good, c.Status.Conditions)
	}
	if len(c.Status.Members) != 0 || c.Status.Restored {
		t.Errorf("members %+v, restored %v: want the lost members forgotten, nothing restored yet", c.Status.Members, c.Status.Restored)
	}
	if cond := statusutil.Get(c, v1alpha1.ConditionDegraded); cond == nil || cond.Reason != membership.ReasonRebuildingFromBackup {
		t.Errorf("Degraded = %+v, want reason %s", cond, membership.ReasonRebuildingFromBackup)
	}
	if pods := g.pods("r"); len(pods) != 0 {
		t.Fatalf("%d pods created in the pass that chose the backup", len(pods))
	}
	events := strings.Join(g.drain(), "\n")
	if !strings.Contains(events, membership.ReasonRebuildingFromBackup) || !strings.Contains(events, corrupt+": ") || !strings.Contains(events, "sha256") {
		t.Errorf("events %q: want %s naming the corrupt backup %s it skipped", events, membership.ReasonRebuildingFromBackup, corrupt)
	}

	g.converge("r", 40)
	c = g.get("r")
	// A logical restore cannot move the revision on: the record says so.
	if r := c.Status.LastRecovery; r == nil || r.Backup != good || r.Revision == 0 || r.EndTime == nil || r.RevisionBump != 0 {
		t.Errorf("status.lastRecovery = %+v after the rebuild, want the record of the rebuild from %s", r, good)
	}
	if c.Status.Recovery != nil || !c.Status.Restored {
		t.Errorf("status.recovery = %+v, restored %v after the rebuild; want none, true", c.Status.Recovery, c.Status.Restored)
	}
	if diff := cmp.Diff(want, g.fake.Data()); diff != "" {
		t.Errorf("data after the rebuild (-backup %s +got):\n%s", good, diff)
	}
	if diff := cmp.Diff(voters("r-0", "r-1", "r-2"), g.etcdMembers()); diff != "" {
		t.Errorf("etcd members (-want +got):\n%s", diff)
	}
	if c.Status.ClusterToken == string(c.UID) {
		t.Errorf("cluster token %q: want a new one for the rebuilt cluster", c.Status.ClusterToken)
	}
	if !strings.Contains(strings.Join(g.drain(), "\n"), controller.EventRestored) {
		t.Error("no Restored event")
	}
}

// TestQuorumLossRebuildIsFenced: a lost member whose pod is still
// Terminating (its node partitioned: the kubelet never confirms) may still
// run with the other lost member's majority, so no rebuild starts until
// the pod is gone (the node deleted, or tainted out-of-service). Before,
// the survivor was restarted with --force-new-cluster at once: two
// clusters.
func TestQuorumLossRebuildIsFenced(t *testing.T) {
	g := newRig(t)
	c := cluster("fq", 3)
	c.Spec.Recovery = &v1alpha1.RecoverySpec{QuorumLoss: v1alpha1.QuorumLossRebuild}
	g.create(c)
	g.converge("fq", 20)
	c = g.get("fq")
	const partitioned = "example.com/unreachable-node"
	pod := g.podIfAny("fq-0")
	pod.Finalizers = append(pod.Finalizers, partitioned)
	if err := g.c.Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	g.loseMember("fq", "fq-0")
	g.loseMember("fq", "fq-2")
	g.fake.LoseQuorum()
	g.fake.SetRaftIndex(controller.PeerURL(c, "fq-1"), 42)
	for range 3 {
		if err := g.pass("fq"); err != nil {
			t.Fatal(err)
		}
	}
	c = g.get("fq")
	if c.Status.Recovery != nil {
		t.Fatalf("status.recovery = %+v while fq-0's pod is Terminating", c.Status.Recovery)
	}
	if pod := g.podIfAny("fq-1"); pod == nil || pod.DeletionTimestamp != nil || pod.Annotations[controller.AnnotationForceNewCluster] != "" {
		t.Fatalf("the survivor's pod was touched while fq-0's pod is Terminating: %+v", pod)
	}
	if cond := statusutil.Get(c, v1alpha1.ConditionDegraded); cond == nil || cond.Reason != membership.ReasonQuorumLost ||
		!strings.Contains(cond.Message, "fq-0 still exist") || !strings.Contains(cond.Message, "out-of-service") {
		t.Errorf("Degraded = %+v, want QuorumLost naming fq-0 and how to declare its node gone", cond)
	}

	// The node is declared gone: its pods go, and the rebuild starts.
	pod = g.podIfAny("fq-0")
	pod.Finalizers = slices.DeleteFunc(pod.Finalizers, func(f string) bool { return f == partitioned })
	if err := g.c.Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if err := g.pass("fq"); err != nil {
		t.Fatal(err)
	}
	if r := g.get("fq").Status.Recovery; r == nil || r.Member != "fq-1" {
		t.Errorf("status.recovery = %+v once fq-0's pod is gone, want the rebuild from fq-1", r)
	}
}

// loseQuorumOfRebuilt creates a 3-member cluster name with quorumLoss
// Rebuild, converges it, and loses members 0 and 2 with their claims and
// the quorum: member 1 survives.
func (g *rig) loseQuorumOfRebuilt(name string) {
	g.t.Helper()
	c := cluster(name, 3)
	c.Spec.Recovery = &v1alpha1.RecoverySpec{QuorumLoss: v1alpha1.QuorumLossRebuild}
	g.create(c)
	g.converge(name, 20)
	g.loseMember(name, name+"-0")
	g.loseMember(name, name+"-2")
	g.fake.LoseQuorum()
}

// TestQuorumLossRebuildMovesRevisionsOn: with the operator's image
// (RestoreImage), the survivor that answered with --force-new-cluster is
// restarted on its data restored with the revision moved on (its
// revisions may have been used by the lost majority for other writes):
// status.recovery.revisionBump is set first, the pod gets the rebuild's
// three init containers, and the rebuild ends, recorded in
// status.lastRecovery, once the survivor answers from that pod at a
// revision moved on. Killed before, its database behind its log, the
// survivor answers below it (the init containers restored nothing): it
// is restarted once more.
func TestQuorumLossRebuildMovesRevisionsOn(t *testing.T) {
	t.Run("stopped gracefully", func(t *testing.T) { rebuildMovesRevisionsOn(t, 0, 0) })
	t.Run("killed, its database behind its log", func(t *testing.T) { rebuildMovesRevisionsOn(t, 1, 0) })
	// Rebuilt before: its revision is past a bump already.
	t.Run("killed, its revision past the bump", func(t *testing.T) { rebuildMovesRevisionsOn(t, 1, 3*seedrestore.RevisionBump) })
}

// TestRebuildRestartsEnd: a survivor whose database stays behind its log
// at every stop (killed each time) moves no revision on however often it
// restarts. Before, the operator restarted the only member of the cluster
// for good; it now gives up after two more restarts, records the rebuild
// without a bump and warns that watchers must be restarted, and the
// cluster grows back.
func TestRebuildRestartsEnd(t *testing.T) {
	g, _ := bumpedRebuild(t, 0)
	g.rebuildsBehindLog = 100
	var events []string
	for i := 0; !strings.Contains(strings.Join(events, "\n"), "restarting q-1 once more"); i++ {
		if i == 20 {
			t.Fatalf("q-1 not restarted once more in 20 passes; events:\n%s", strings.Join(events, "\n"))
		}
		_ = g.pass("q")
		g.kubelet("q")
		events = append(events, g.drain()...)
	}
	// A restart that fails is no restart: it is not counted.
	g.faults.arm("delete", "Pod")
	g.converge("q", 40)
	c := g.get("q")
	if r := c.Status.LastRecovery; r == nil || r.Member != "q-1" || r.RevisionBump != 0 || r.EndTime == nil || c.Status.Recovery != nil {
		t.Errorf("status.lastRecovery = %+v, recovery %+v; want the rebuild from q-1 ended without a bump", r, c.Status.Recovery)
	}
	if diff := cmp.Diff(voters("q-1", "q-3", "q-4"), g.etcdMembers()); diff != "" {
		t.Errorf("etcd members (-want +got):\n%s", diff)
	}
	all := strings.Join(append(events, g.drain()...), "\n")
	if n := strings.Count(all, "restarting q-1 once more"); n != 2 {
		t.Errorf("restarted once more %d times, want 2; events:\n%s", n, all)
	}
	if !strings.Contains(all, "Warning "+controller.EventRevisionNotMoved) {
		t.Errorf("no %s warning in:\n%s", controller.EventRevisionNotMoved, all)
	}
}

// bumpedRebuild loses the quorum of a 3-member cluster q, with the
// revision at revision, and runs the rebuild from q-1 until its
// revisionBump is set; it returns the rebuild's token.
func bumpedRebuild(t *testing.T, revision int64) (*rig, string) {
	t.Helper()
	g := newRig(t)
	g.hooks.RestoreImage = restoreImage
	g.fake.MoveRevision(revision)
	g.loseQuorumOfRebuilt("q")
	g.drain()
	for range 2 { // the survivor's pod deleted, then created with the flag
		if err := g.pass("q"); err != nil {
			t.Fatal(err)
		}
	}
	c := g.get("q")
	if pod := g.podIfAny("q-1"); pod == nil || pod.Annotations[controller.AnnotationForceNewCluster] != "true" {
		t.Fatalf("survivor pod %+v, want it with --force-new-cluster", pod)
	}
	g.fake.ForceNewCluster(controller.PeerURL(c, "q-1"))
	g.kubelet("q")
	if err := g.pass("q"); err != nil {
		t.Fatal(err)
	}
	c = g.get("q")
	r := c.Status.Recovery
	if r == nil || r.Member != "q-1" || r.RevisionBump != seedrestore.RevisionBump || c.Status.LastRecovery != nil {
		t.Fatalf("status.recovery = %+v, lastRecovery %+v once q-1 answered with --force-new-cluster; want the rebuild from q-1 going on, revisionBump %d",
			r, c.Status.LastRecovery, seedrestore.RevisionBump)
	}
	token := fmt.Sprintf("q-1-%d-%d", r.RaftIndex, r.StartTime.Unix())
	return g, token
}

func rebuildMovesRevisionsOn(t *testing.T, behindLog int, revision int64) {
	g, token := bumpedRebuild(t, revision)
	g.rebuildsBehindLog = behindLog
	g.converge("q", 30)
	c := g.get("q")
	if r := c.Status.LastRecovery; r == nil || r.Member != "q-1" || r.RevisionBump != seedrestore.RevisionBump || r.EndTime == nil || c.Status.Recovery != nil {
		t.Errorf("status.lastRecovery = %+v, recovery %+v after the rebuild; want the rebuild from q-1 ended, revisionBump %d",
			r, c.Status.Recovery, seedrestore.RevisionBump)
	}
	pod := g.pod("q-1")
	peer := controller.PeerURL(c, "q-1")
	root := int64(0)
	wantInit := []initContainer{
		{Name: controller.InitContainerStageMember, Image: restoreImage,
			Args:   []string{"stage-member-data", "--data-dir=/var/lib/etcd", "--rebuild=" + token},
			Mounts: []string{"data:/var/lib/etcd"}, RunAsUser: &root},
		{Name: controller.InitContainerRestore, Image: "gcr.io/etcd-development/etcd:v3.6.16", Command: []string{"etcdutl"},
			Args: []string{"snapshot", "restore", "/var/lib/etcd/restore/snapshot.db", "--data-dir=/var/lib/etcd/restore/data",
				"--name=q-1", "--initial-cluster=q-1=" + peer, "--initial-cluster-token=" + c.Status.ClusterToken,
				"--initial-advertise-peer-urls=" + peer, "--bump-revision=1000000000", "--mark-compacted", "--skip-hash-check"},
			Mounts: []string{"data:/var/lib/etcd"}},
		{Name: controller.InitContainerFinish, Image: restoreImage,
			Args:   []string{"finish-restore", "--data-dir=/var/lib/etcd", "--rebuild=" + token},
			Mounts: []string{"data:/var/lib/etcd"}, RunAsUser: &root},
	}
	if diff := cmp.Diff(wantInit, initContainersOf(pod)); diff != "" {
		t.Errorf("init containers of the survivor's pod (-want +got):\n%s", diff)
	}
	if got := pod.Annotations[controller.AnnotationRebuild]; got != token || slices.Contains(pod.Spec.Containers[0].Args, "--force-new-cluster") {
		t.Errorf("survivor pod: annotation %q, args %q; want the rebuild %q, without --force-new-cluster", got, pod.Spec.Containers[0].Args, token)
	}
	if diff := cmp.Diff(voters("q-1", "q-3", "q-4"), g.etcdMembers()); diff != "" {
		t.Errorf("etcd members (-want +got):\n%s", diff)
	}
	for _, name := range []string{"q-3", "q-4"} {
		if p := g.pod(name); len(p.Spec.InitContainers) > 0 {
			t.Errorf("pod %s, not the survivor, has init containers %+v", name, initContainersOf(p))
		}
	}
	events := strings.Join(g.drain(), "\n")
	if !strings.Contains(events, "restarting q-1 on its data restored with the revision moved on") {
		t.Errorf("no event of the restart on restored data in:\n%s", events)
	}
	if again := strings.Contains(events, "restarting q-1 once more"); again != (behindLog > 0) {
		t.Errorf("restarted once more: %v, want %v; events:\n%s", again, behindLog > 0, events)
	}
	if rev := g.fake.Revision(); rev < revision+seedrestore.RevisionBump {
		t.Errorf("revision %d after the rebuild, want past %d", rev, revision+seedrestore.RevisionBump)
	}
}

// TestStaleRecoveryRestoresNoMemberOfAGrownCluster: a status.recovery
// with revisionBump left over (the survivor restarted under an operator
// without --restore-image, say) while the cluster grew back to 3: q-1's
// pod recreated on its data must not restore it as a one-member cluster,
// which would split it from the others; the record ends, without a bump,
// once q-1 answers from a pod without the rebuild.
func TestStaleRecoveryRestoresNoMemberOfAGrownCluster(t *testing.T) {
	g := newRig(t)
	g.hooks.RestoreImage = restoreImage
	g.create(cluster("q", 3))
	g.converge("q", 20)
	c := g.get("q")
	c.Status.Recovery = &v1alpha1.RecoveryStatus{Member: "q-1", RaftIndex: 7, RevisionBump: seedrestore.RevisionBump,
		StartTime: ptr.To(metav1.Now())}
	// Applied as the operator writes its status: the record is its own.
	c.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "EtcdCluster"}
	c.ManagedFields = nil
	if err := g.c.Status().Patch(t.Context(), c, client.Apply, client.FieldOwner(controller.FieldOwner), client.ForceOwnership); err != nil { //nolint:staticcheck // a typed apply of the whole status, as the reconciler's
		t.Fatal(err)
	}
	if err := g.c.Delete(t.Context(), g.pod("q-1")); err != nil {
		t.Fatal(err)
	}
	for range 6 {
		if err := g.pass("q"); err != nil {
			t.Log(err)
		}
		g.kubelet("q")
		if p := g.podIfAny("q-1"); p != nil && len(p.Spec.InitContainers) > 0 {
			t.Fatalf("q-1, a member of a 3-member cluster, recreated with init containers %+v", initContainersOf(p))
		}
	}
	c = g.get("q")
	if r := c.Status.LastRecovery; c.Status.Recovery != nil || r == nil || r.RevisionBump != 0 || r.EndTime == nil {
		t.Errorf("status.recovery = %+v, lastRecovery %+v; want the record ended without a bump", c.Status.Recovery, r)
	}
}

// TestRebuildInitFailureIsReported: an init container of the survivor's
// restart that fails stalls the cluster with reason RestoreFailed, naming
// it, its termination message and the way to run every step again, and
// the cluster does not grow.
func TestRebuildInitFailureIsReported(t *testing.T) {
	g := newRig(t)
	g.hooks.RestoreImage = restoreImage
	g.loseQuorumOfRebuilt("q")
	for range 2 {
		_ = g.pass("q")
	}
	g.fake.ForceNewCluster(controller.PeerURL(g.get("q"), "q-1"))
	g.kubelet("q")
	for range 4 { // revisionBump set; the forced pod deleted; the rebuild's pod created
		_ = g.pass("q")
		if p := g.podIfAny("q-1"); p != nil && p.Annotations[controller.AnnotationRebuild] != "" {
			break
		}
	}
	p := g.pod("q-1")
	if p.Annotations[controller.AnnotationRebuild] == "" {
		t.Fatalf("q-1's pod %+v, want the rebuild's", p.ObjectMeta)
	}
	g.fake.SetHealthy(controller.PeerURL(g.get("q"), "q-1"), false) // etcd waits for its init containers
	p.Status.Phase = corev1.PodPending
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{
		{Name: controller.InitContainerStageMember, Image: restoreImage,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}},
		{Name: controller.InitContainerRestore, Image: "etcd",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1,
				Message: `Error: data-dir "/var/lib/etcd/restore/data" not empty or could not be read`}}},
	}
	if err := g.c.Status().Update(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_ = g.pass("q")
	}
	c := g.get("q")
	stalled := statusutil.Get(c, statusutil.ConditionStalled)
	for _, want := range []string{"init container restore of pod q-1 exited with 1", "not empty", "delete pod q-1"} {
		if stalled == nil || stalled.Status != metav1.ConditionTrue || stalled.Reason != controller.ReasonRestoreFailed || !strings.Contains(stalled.Message, want) {
			t.Errorf("Stalled = %+v, want True, %s, mentioning %q", stalled, controller.ReasonRestoreFailed, want)
		}
	}
	if names := g.names(&corev1.PodList{}); !slices.Equal(names, []string{"q-1"}) {
		t.Errorf("pods %v, want q-1 alone", names)
	}

	// Retried, the container succeeds; its failure stays on the pod as
	// its last termination, and is history.
	p = g.pod("q-1")
	p.Status.InitContainerStatuses[1].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	if err := g.c.Status().Update(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	_ = g.pass("q")
	if cond := statusutil.Get(g.get("q"), statusutil.ConditionStalled); cond != nil && cond.Reason == controller.ReasonRestoreFailed {
		t.Errorf("Stalled = %+v after the container succeeded on its retry", cond)
	}
}

package controller_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/snapshot"
)

// writeKeys writes n keys under prefix as a client would and returns them:
// acknowledged writes.
func (g *rig) writeKeys(prefix string, n int) map[string]string {
	g.t.Helper()
	ec, err := g.fake.Factory().New(g.t.Context(), nil)
	if err != nil {
		g.t.Fatal(err)
	}
	want := map[string]string{}
	for i := range n {
		k, v := fmt.Sprintf("%s%03d", prefix, i), fmt.Sprintf("value %d", i)
		if err := ec.Put(g.t.Context(), []etcdclient.KeyValue{{Key: []byte(k), Value: []byte(v)}}); err != nil {
			g.t.Fatal(err)
		}
		want[k] = v
	}
	return want
}

// backupKeys returns the key space held by backup m of cluster, loaded into
// an empty fake cluster.
func (g *rig) backupKeys(cluster string, m backup.Manifest) map[string]string {
	g.t.Helper()
	return g.storeKeys(g.storeOf(cluster), m)
}

// storeKeys restores backup m of store into a fresh fake etcd and
// returns its keys.
func (g *rig) storeKeys(store backup.Store, m backup.Manifest) map[string]string {
	g.t.Helper()
	dst := etcdclient.NewFake()
	dst.Start("dst-0", "http://dst-0:2380", "http://dst-0:2379")
	ec, err := dst.Factory().New(g.t.Context(), nil)
	if err != nil {
		g.t.Fatal(err)
	}
	if _, err := backup.Restore(g.t.Context(), store, m.ID, &snapshot.Restorer{Client: ec, Dir: g.t.TempDir()}); err != nil {
		g.t.Fatalf("restoring backup %s: %v", m.ID, err)
	}
	return dst.Data()
}

// replaceWithLaggingLearner makes member name of cluster lose its pod and
// claim, then runs passes until its replacement, under the same name, runs
// as a learner that has applied nothing yet (etcd refuses to promote it).
func (g *rig) replaceWithLaggingLearner(cluster, name string) {
	g.t.Helper()
	ctx := g.t.Context()
	c := g.get(cluster)
	g.loseMember(cluster, name)
	g.claimGone(name)
	for range 5 {
		if err := g.pass(cluster); err != nil {
			g.t.Logf("pass: %v", err)
		}
		var pod corev1.Pod
		if err := g.c.Get(ctx, client.ObjectKey{Namespace: g.ns, Name: name}, &pod); err == nil && pod.DeletionTimestamp == nil {
			g.runPods(cluster, true)
			g.fake.SetApplied(controller.PeerURL(c, name), 0)
			break
		}
	}
	if err := g.pass(cluster); err != nil {
		g.t.Logf("pass: %v", err)
	}
	for _, m := range g.fake.Members() {
		if m.Name == name && m.IsLearner {
			return
		}
	}
	g.t.Fatalf("%s is not a running learner: etcd members %v", name, g.etcdMembers())
}

// TestBackupsHoldEveryAcknowledgedWrite: a backup streams from a member
// that has applied every write acknowledged before it started. Before the
// fix, the first healthy member by name was used: a replacement learner
// still catching up (it reuses the lowest ordinal) for the final backup,
// whose guard then let every claim go; a follower behind the leader for an
// on-demand backup.
func TestBackupsHoldEveryAcknowledgedWrite(t *testing.T) {
	tests := []struct {
		name string
		// lag makes bk-0 lag behind the writes.
		lag func(g *rig)
		// take takes the backup and returns it.
		take func(g *rig) backup.Manifest
	}{
		{"final backup while a replacement learner catches up", func(g *rig) { g.replaceWithLaggingLearner("bk", "bk-0") }, (*rig).finalBackupOf},
		{"on-demand backup from a follower behind the leader", func(g *rig) {
			c := g.get("bk")
			g.fake.SetLeader(controller.PeerURL(c, "bk-1"))
			g.fake.SetApplied(controller.PeerURL(c, "bk-0"), 0)
		}, func(g *rig) backup.Manifest {
			id := g.backupOf("bk", "od")
			for _, m := range g.storedBackups("bk") {
				if m.ID == id {
					return m
				}
			}
			g.t.Fatalf("backup %s not in the store", id)
			return backup.Manifest{}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newRig(t)
			g.createBackedUp("bk", 3, 0, 30)
			want := g.writeKeys("/acked/", 20)
			tt.lag(g)
			m := tt.take(g)
			if diff := cmp.Diff(want, g.backupKeys("bk", m)); diff != "" {
				t.Errorf("backup %s (revision %s) lacks acknowledged writes (-want +got):\n%s", m.ID, m.Snapshot.ConsistencyPoint, diff)
			}
		})
	}
}

// finalBackupOf deletes cluster "bk", runs passes until it is gone and
// returns its final backup.
func (g *rig) finalBackupOf() backup.Manifest {
	g.t.Helper()
	c := g.get("bk")
	if err := g.c.Delete(g.t.Context(), c); err != nil {
		g.t.Fatal(err)
	}
	for i := 0; i < 5 && g.exists(c); i++ {
		if err := g.pass("bk"); err != nil {
			g.t.Logf("pass: %v", err)
		}
	}
	if g.exists(c) {
		g.t.Fatalf("EtcdCluster still exists after 5 passes: %+v", g.get("bk").Status.Conditions)
	}
	for _, m := range g.storedBackups("bk") {
		if m.Snapshot.Extra[controller.ExtraTrigger] == controller.TriggerFinal {
			return m
		}
	}
	g.t.Fatal("no final backup")
	return backup.Manifest{}
}

// TestBackupTriesTheNextVoter: a snapshot that fails on one voting member
// (a reset connection, a member going down) is taken from the next, in
// the same attempt. Before, the first member's error failed the attempt,
// and a scheduled backup, which does not retry a failed attempt, was
// lost until the next scheduled time (issue #80, L2).
func TestBackupTriesTheNextVoter(t *testing.T) {
	g := newRig(t)
	g.mountPVCStore("backups")
	g.create(cluster("src", 3))
	g.converge("src", 30)
	g.fake.FailNext("Snapshot", errors.New("injected: connection reset by peer"), false)
	g.createBackup("eb", v1alpha1.EtcdBackupSpec{ClusterName: "src", StoreRef: v1alpha1.StoreReference{PVCName: "backups"}})
	if err := g.backupPass("eb"); err != nil {
		t.Fatal(err)
	}
	eb := g.getBackup("eb")
	got := []any{eb.Status.Phase, eb.Status.Operation.Attempts, g.snapshots(), len(g.storedBackups("src"))}
	want := []any{v1alpha1.BackupSucceeded, int32(1), 2, 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("phase, attempts, snapshots, backups stored (-want +got):\n%s", diff)
	}
}

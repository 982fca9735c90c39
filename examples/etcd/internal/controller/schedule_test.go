package controller_test

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/statusutil"
)

// TestScheduledBackups drives spec.backup.schedule on the fake clock: a
// backup is taken when one is due and not otherwise, the retention keeps
// the newest scheduled backups and never deletes an EtcdBackup's, a failed
// attempt is counted and leaves the last successful backup in the status,
// and the next scheduled time after a failure takes a backup again.
func TestScheduledBackups(t *testing.T) {
	g := newRig(t)
	g.mountPVCStore("backups")
	store := v1alpha1.StoreReference{PVCName: "backups"}
	c := cluster("sch", 1)
	c.Spec.Backup = &v1alpha1.BackupSpec{Schedule: "@every 1h", Retention: 2, StoreRef: store}
	g.create(c)
	g.converge("sch", 10)

	// An on-demand backup, older than every scheduled one.
	g.createBackup("manual", v1alpha1.EtcdBackupSpec{ClusterName: "sch", StoreRef: store})
	if err := g.backupPass("manual"); err != nil {
		t.Fatal(err)
	}
	manual := g.getBackup("manual").Status.BackupID
	if manual == "" {
		t.Fatalf("on-demand backup not taken: %+v", g.getBackup("manual").Status)
	}

	const (
		ok = controller.MetricBackups + "/scheduled/success"
		ko = controller.MetricBackups + "/scheduled/failure"
	)
	// stored returns the IDs in the store, oldest first, with manual as
	// "manual".
	stored := func() []string {
		var ids []string
		for _, m := range g.storedBackups("sch") {
			id := m.ID
			if id == manual {
				id = "manual"
			}
			ids = append(ids, id)
		}
		slices.Reverse(ids)
		return ids
	}
	var taken []string // scheduled backup IDs, oldest first
	steps := []struct {
		name string
		// advance moves the clock before the pass.
		advance time.Duration
		// fail makes the pass's snapshot fail.
		fail bool
		// taken is whether a scheduled backup is taken.
		taken bool
		// keep is how many of the newest scheduled backups the store holds.
		keep    int
		metrics map[string]float64
		// failures is status.backup.consecutiveFailures after the pass.
		failures int32
	}{
		{"not due yet", 0, false, false, 0, map[string]float64{}, 0},
		{"first", time.Hour + time.Minute, false, true, 1, map[string]float64{ok: 1}, 0},
		{"not due again", 30 * time.Minute, false, false, 1, map[string]float64{ok: 1}, 0},
		{"second", 31 * time.Minute, false, true, 2, map[string]float64{ok: 2}, 0},
		{"third: the first is pruned", time.Hour + time.Minute, false, true, 2, map[string]float64{ok: 3}, 0},
		{"fourth fails", time.Hour + time.Minute, true, false, 2, map[string]float64{ok: 3, ko: 1}, 1},
		{"after a failure: not retried before the next time", time.Minute, false, false, 2, map[string]float64{ok: 3, ko: 1}, 1},
		{"fifth", time.Hour, false, true, 2, map[string]float64{ok: 4, ko: 1}, 0},
	}
	for _, s := range steps {
		g.clock.advance(s.advance)
		if s.fail {
			g.fake.FailNext("Snapshot", errors.New("injected"), false)
		}
		err := g.operationPass("sch")
		if (err != nil) != s.fail {
			t.Fatalf("%s: pass error %v, want failure %v", s.name, err, s.fail)
		}
		c := g.get("sch")
		if s.taken {
			taken = append(taken, c.Status.Backup.LastBackupID)
		}
		want := append([]string{"manual"}, taken[len(taken)-s.keep:]...)
		if diff := cmp.Diff(want, stored()); diff != "" {
			t.Errorf("%s: backups in the store, oldest first (-want +got):\n%s", s.name, diff)
		}
		var last string
		if len(taken) > 0 {
			last = taken[len(taken)-1]
		}
		if got := c.Status.Backup.LastBackupID; got != last {
			t.Errorf("%s: status.backup.lastBackupID %q, want %q", s.name, got, last)
		}
		if got := c.Status.Backup.ConsecutiveFailures; got != s.failures {
			t.Errorf("%s: status.backup.consecutiveFailures %d, want %d", s.name, got, s.failures)
		}
		if s.failures > 0 && !strings.Contains(c.Status.Backup.LastFailureMessage, "injected") {
			t.Errorf("%s: status.backup.lastFailureMessage %q does not carry the snapshot's error", s.name, c.Status.Backup.LastFailureMessage)
		}
		got := map[string]float64{}
		for k, v := range clusterMetrics(t, g.ns, "sch") {
			if k == ok || k == ko {
				got[k] = v
			}
		}
		if diff := cmp.Diff(s.metrics, got); diff != "" {
			t.Errorf("%s: scheduled backup metrics (-want +got):\n%s", s.name, diff)
		}
	}
	if len(slices.Compact(slices.Clone(taken))) != 4 {
		t.Errorf("scheduled backup IDs %v, want 4 distinct ones", taken)
	}
}

// TestRetentionWithoutANewBackup: spec.backup.retention holds for the store
// also when no scheduled backup comes to apply it. Before, only a new
// scheduled backup pruned: lowering the retention while clearing the
// schedule, or restarting an operator that was stopped between a backup's
// commit and its prune, left more scheduled backups than the retention
// forever.
func TestRetentionWithoutANewBackup(t *testing.T) {
	store := v1alpha1.StoreReference{PVCName: "backups"}
	// scheduledIn returns the IDs of the scheduled backups in the store,
	// newest first.
	scheduledIn := func(g *rig, cluster string) []string {
		var ids []string
		for _, m := range g.storedBackups(cluster) {
			if m.Snapshot.Extra[controller.ExtraTrigger] == controller.TriggerSchedule {
				ids = append(ids, m.ID)
			}
		}
		return ids
	}
	// start makes a rig with cluster name, backed up every hour with
	// retention, and advances the clock past the schedule n times, each
	// pass taking a scheduled backup.
	start := func(t *testing.T, name string, retention int32, n int) *rig {
		t.Helper()
		g := newRig(t)
		g.mountPVCStore("backups")
		c := cluster(name, 1)
		c.Spec.Backup = &v1alpha1.BackupSpec{Schedule: "@every 1h", Retention: retention, StoreRef: store}
		g.create(c)
		g.converge(name, 10)
		for range n {
			g.clock.advance(time.Hour + time.Minute)
			if err := g.operationPass(name); err != nil {
				t.Fatal(err)
			}
		}
		return g
	}

	t.Run("lowered while the schedule is cleared", func(t *testing.T) {
		g := start(t, "lowered", 3, 3)
		taken := scheduledIn(g, "lowered")
		if len(taken) != 3 {
			t.Fatalf("scheduled backups in the store %v, want 3", taken)
		}

		g.drain()
		c := g.get("lowered")
		c.Spec.Backup.Schedule = ""
		c.Spec.Backup.Retention = 1
		if err := g.c.Update(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		g.clock.advance(time.Minute)
		if err := g.pass("lowered"); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(taken[:1], scheduledIn(g, "lowered")); diff != "" {
			t.Errorf("scheduled backups in the store, newest first (-want +got):\n%s", diff)
		}
		if n := g.snapshots(); n != 3 {
			t.Errorf("%d snapshots taken, want the 3 scheduled ones: applying the retention takes none", n)
		}
		want := []string{"Normal BackupsPruned deleted scheduled backups beyond the retention of 1: " + taken[1] + ", " + taken[2]}
		if diff := cmp.Diff(want, g.drain()); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
	})

	t.Run("a store that cannot be opened is tried again after a while", func(t *testing.T) {
		g := start(t, "away", 2, 2)
		taken := scheduledIn(g, "away")
		dir := g.pvcStoreDir("backups")
		if err := os.Rename(dir, dir+".away"); err != nil {
			t.Fatal(err)
		}
		c := g.get("away")
		c.Spec.Backup.Retention = 1
		if err := g.c.Update(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		g.clock.advance(time.Minute)
		if err := g.pass("away"); err != nil {
			t.Fatalf("the pass failed on the retention (it must go on): %v", err)
		}
		if err := os.Rename(dir+".away", dir); err != nil {
			t.Fatal(err)
		}
		for _, step := range []struct {
			advance time.Duration
			want    []string
		}{
			{time.Minute, taken},                   // not yet tried again
			{controller.RetentionRetry, taken[:1]}, // tried again
		} {
			g.clock.advance(step.advance)
			if err := g.pass("away"); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(step.want, scheduledIn(g, "away")); diff != "" {
				t.Errorf("after %s more: scheduled backups in the store, newest first (-want +got):\n%s", step.advance, diff)
			}
		}
	})

	// The store's prefix is namespace/name: a cluster re-created under the
	// same name, or another sharing the bucket and prefix, writes beside
	// this one. Before, the retention counted and deleted their scheduled
	// backups as this cluster's own.
	t.Run("another cluster's backups under the same prefix are kept", func(t *testing.T) {
		g := start(t, "shared", 1, 1)
		own := scheduledIn(g, "shared")
		var others []string
		for range 2 {
			m, err := backup.Backup(t.Context(), g.storeOf("shared"), backup.SnapshotterFunc(func(_ context.Context, w io.Writer) (backup.Metadata, error) {
				_, err := io.WriteString(w, "db")
				return backup.Metadata{Engine: "etcd", Format: "etcd-snapshot-db",
					Extra: map[string]string{controller.ExtraTrigger: controller.TriggerSchedule, controller.ExtraClusterUID: "uid-of-an-earlier-shared"}}, err
			}))
			if err != nil {
				t.Fatal(err)
			}
			others = append(others, m.ID)
		}
		g.drain()
		g.startOperator() // applies the retention once more
		g.clock.advance(time.Minute)
		if err := g.pass("shared"); err != nil {
			t.Fatal(err)
		}
		g.clock.advance(time.Hour)
		if err := g.operationPass("shared"); err != nil {
			t.Fatal(err)
		}
		var mine []string
		got := scheduledIn(g, "shared")
		for _, id := range got {
			if !slices.Contains(others, id) {
				mine = append(mine, id)
			}
		}
		if len(mine) != 1 || mine[0] == own[0] {
			t.Errorf("this cluster's scheduled backups %v after one more with a retention of 1, want one, not %s", mine, own[0])
		}
		if diff := cmp.Diff(slices.Sorted(slices.Values(append(mine, others...))), slices.Sorted(slices.Values(got))); diff != "" {
			t.Errorf("scheduled backups in the store (-want +got):\n%s", diff)
		}
		want := []string{"Normal BackupTaken", "Normal BackupsPruned deleted scheduled backups beyond the retention of 1: " + own[0]}
		var events []string
		for _, e := range g.drain() {
			if strings.HasPrefix(e, "Normal BackupTaken") {
				e = "Normal BackupTaken"
			}
			events = append(events, e)
		}
		if diff := cmp.Diff(want, events); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
	})

	t.Run("an operator restarted between a backup's commit and its prune", func(t *testing.T) {
		g := start(t, "restarted", 1, 1)
		c := g.get("restarted")

		// The backup a stopped operator committed and neither pruned
		// after nor recorded in the status.
		sub := g.storeOf("restarted")
		snap := backup.SnapshotterFunc(func(_ context.Context, w io.Writer) (backup.Metadata, error) {
			_, err := io.WriteString(w, "db")
			return backup.Metadata{Engine: "etcd", Format: "etcd-snapshot-db",
				Extra: map[string]string{controller.ExtraTrigger: controller.TriggerSchedule, controller.ExtraClusterUID: string(c.UID)}}, err
		})
		left, err := backup.Backup(t.Context(), sub, snap)
		if err != nil {
			t.Fatal(err)
		}
		if got := scheduledIn(g, "restarted"); len(got) != 2 {
			t.Fatalf("scheduled backups in the store %v, want 2", got)
		}

		g.startOperator()
		g.clock.advance(time.Minute) // the next scheduled backup is not due
		if err := g.pass("restarted"); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{left.ID}, scheduledIn(g, "restarted")); diff != "" {
			t.Errorf("scheduled backups in the store, newest first (-want +got):\n%s", diff)
		}

		// Once per process and generation: the store is not listed on every
		// pass, so a backup left now stays until the next backup, restart
		// or spec change.
		second, err := backup.Backup(t.Context(), sub, snap)
		if err != nil {
			t.Fatal(err)
		}
		g.clock.advance(time.Minute)
		if err := g.pass("restarted"); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{second.ID, left.ID}, scheduledIn(g, "restarted")); diff != "" {
			t.Errorf("a pass without a change: scheduled backups in the store, newest first (-want +got):\n%s", diff)
		}
		if n := g.snapshots(); n != 1 {
			t.Errorf("%d snapshots taken, want the 1 scheduled one", n)
		}
	})
}

// TestScheduledBackupsWhileDegraded: a member that stays down keeps the
// cluster waiting on a membership step, and scheduled backups go on from
// the quorum; without a quorum a due backup is skipped, and said so
// (status.backup, the metric, an event) rather than silently. Before, any
// membership wait returned first and the schedule stopped.
func TestScheduledBackupsWhileDegraded(t *testing.T) {
	g := newRig(t)
	g.mountPVCStore("backups")
	c := cluster("deg", 3)
	c.Spec.Backup = &v1alpha1.BackupSpec{Schedule: "@every 1h", StoreRef: v1alpha1.StoreReference{PVCName: "backups"}}
	g.create(c)
	g.converge("deg", 30)
	c = g.get("deg")
	g.fake.SetHealthy(controller.PeerURL(c, "deg-2"), false)
	g.drain()

	g.clock.advance(time.Hour + time.Minute)
	_ = g.operationPass("deg")
	if progressing := statusutil.Get(g.get("deg"), v1alpha1.ConditionProgressing); progressing == nil || progressing.Status != metav1.ConditionTrue {
		t.Fatalf("Progressing = %+v, want the pass waiting on deg-2", progressing)
	}
	if got := len(g.storedBackups("deg")); got != 1 {
		t.Errorf("%d backups stored while deg-2 is down, want 1 from the quorum", got)
	}

	g.fake.LoseQuorum()
	g.drain()
	g.clock.advance(time.Hour + time.Minute)
	_ = g.operationPass("deg")
	c = g.get("deg")
	if got := len(g.storedBackups("deg")); got != 1 {
		t.Errorf("%d backups stored without a quorum, want still 1", got)
	}
	if c.Status.Backup.ConsecutiveFailures != 1 || !strings.Contains(c.Status.Backup.LastFailureMessage, "no quorum") {
		t.Errorf("status.backup = %+v, want one failure saying the cluster has no quorum", c.Status.Backup)
	}
	if events := strings.Join(g.drain(), "\n"); !strings.Contains(events, controller.EventBackupFailed) {
		t.Errorf("events %q, want %s", events, controller.EventBackupFailed)
	}
	if got := clusterMetrics(t, g.ns, "deg")[controller.MetricBackups+"/scheduled/failure"]; got != 1 {
		t.Errorf("scheduled backup failures counted: %v, want 1", got)
	}
}

// TestScheduledBackupSurvivesRestart kills the operator at each step of a
// scheduled backup (status.backupOperation): the backup is recorded in
// status.backup once, and taken again only when the attempt that was cut
// short took none.
func TestScheduledBackupSurvivesRestart(t *testing.T) {
	for _, cut := range clusterCuts("s") {
		t.Run(cut.name, func(t *testing.T) {
			g := newRig(t)
			g.mountPVCStore("backups")
			c := cluster("s", 1)
			c.Spec.Backup = &v1alpha1.BackupSpec{Schedule: "@every 1h", StoreRef: v1alpha1.StoreReference{PVCName: "backups"}}
			g.create(c)
			g.converge("s", 10)
			g.clock.advance(time.Hour + time.Minute)
			cut.at(g)
			if err := g.operationPass("s"); err != nil {
				t.Fatal(err)
			}
			c = g.get("s")
			var ids []string
			for _, m := range g.storedBackups("s") {
				ids = append(ids, m.ID)
			}
			got := []any{ids, c.Status.Backup.ConsecutiveFailures, c.Status.BackupOperation == nil, g.snapshots()}
			want := []any{[]string{c.Status.Backup.LastBackupID}, int32(0), true, 1}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("backups stored, failures, operation cleared, snapshots (-want +got):\n%s", diff)
			}
		})
	}
}

// restartCut is where a test kills the operator during a backup of a
// cluster's passes.
type restartCut struct {
	name string
	at   func(g *rig)
}

// clusterCuts are the points of a cluster's backup operation at which
// the tests restart the operator: the attempt recorded but not run, the
// snapshot streaming, and the backup committed but not recorded.
func clusterCuts(name string) []restartCut {
	return []restartCut{
		{"the attempt recorded, before the run", func(g *rig) { mustClusterPass(g, name); g.startOperator() }},
		{"during the run", func(g *rig) {
			started, release := g.fake.HoldSnapshots()
			mustClusterPass(g, name)
			if err := g.passAsync(name); err != nil {
				g.t.Fatal(err)
			}
			<-started
			g.startOperator()
			release()
		}},
		{"after the backup's commit, before its status", func(g *rig) {
			mustClusterPass(g, name)
			mustClusterPass(g, name)
			g.waitStored(name, 1)
			g.startOperator()
		}},
	}
}

func mustClusterPass(g *rig, name string) {
	g.t.Helper()
	if err := g.pass(name); err != nil {
		g.t.Fatal(err)
	}
}

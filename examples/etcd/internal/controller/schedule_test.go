package controller_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
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
		err := g.pass("sch")
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

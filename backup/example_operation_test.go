package backup_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/fsstore"
	"github.com/opkit-dev/opkit/operation"
	"github.com/opkit-dev/opkit/reconcile"
)

// sampleDB stands in for a custom resource whose status embeds
// backup.Status.
type sampleDB struct {
	metav1.ObjectMeta
	Status struct{ Backup backup.Status }
}

// dbBackups is the backup part of a SampleDB operator: the schedule in
// every pass, the final backup in Finalize.
type dbBackups struct {
	scheduled backup.Scheduled
	final     backup.Final
}

func (b dbBackups) reconcile(ctx context.Context, db *sampleDB) reconcile.Result {
	after, err := b.scheduled.Step(ctx, db, &db.Status.Backup)
	if err != nil {
		return reconcile.Retry(err) // in Ready; the next backup waits for its time
	}
	return reconcile.RequeueAfter(after)
}

func (b dbBackups) finalize(ctx context.Context, db *sampleDB) reconcile.Result {
	done, after, err := b.final.Step(ctx, db, &db.Status.Backup)
	switch {
	case err != nil:
		return reconcile.Retry(err) // the deletion waits: never without its backup
	case !done:
		return reconcile.Waiting("FinalBackup", "taking the final backup", after)
	}
	return reconcile.Done()
}

// Scheduled and Final take a SampleDB's backups as recorded operations:
// passes start and record them, an operation.Runner takes them beside the
// passes, and the retention counts only this SampleDB's scheduled ones.
func ExampleScheduled() {
	dir, err := os.MkdirTemp("", "sampledb-backups")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	store, err := fsstore.New(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	now := func() time.Time { return time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC) }
	daily, _ := backup.ParseSchedule("0 3 * * *")
	runner := operation.NewRunner(now) // mgr.Add(runner) in an operator
	snap := snapOf([]byte("the database"))
	b := dbBackups{
		scheduled: backup.Scheduled{Runner: runner, Schedule: daily, Store: store, Snapshot: snap,
			Retention: &backup.Policy{KeepLast: 7}, Now: now},
		final: backup.Final{Runner: runner, Store: store, Snapshot: snap, Now: now},
	}
	db := &sampleDB{ObjectMeta: metav1.ObjectMeta{Name: "db", UID: "uid-1", CreationTimestamp: metav1.NewTime(now().Add(-time.Hour))}}

	ctx := context.Background()
	for db.Status.Backup.LastBackupID == "" { // passes, each followed by its status write
		b.reconcile(ctx, db)
		_ = runner.Wait(ctx)
	}
	fmt.Println("scheduled:", db.Status.Backup.LastBackupID != "", db.Status.Backup.Operation == nil)
	for b.finalize(ctx, db).Outcome() != reconcile.OutcomeDone {
		_ = runner.Wait(ctx)
	}
	fmt.Println("final:", db.Status.Backup.Operation.ID, strings.HasPrefix(db.Status.Backup.LastBackupID, "2026"))
	// Output:
	// scheduled: true true
	// final: final-20261207T030000Z true
}

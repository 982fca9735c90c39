package backup

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/operation"
)

// Keys of the manifest's Snapshot.Extra that Scheduled and Final write: a
// restarted operator finds a backup by its owner and operation, and the
// retention counts only the owner's own.
const (
	ExtraOwnerUID  = "backup.opkit.dev/owner-uid"
	ExtraOperation = "backup.opkit.dev/operation"
	ExtraTrigger   = "backup.opkit.dev/trigger"
)

// The operation types, and triggers, of Scheduled and Final.
const (
	TypeScheduled = "ScheduledBackup"
	TypeFinal     = "FinalBackup"
)

// ReasonSnapshotFailed is the Reason of a Record whose backup failed: a
// scheduled backup is not attempted again before its next time.
const ReasonSnapshotFailed = "SnapshotFailed"

// ErrBackupFailed is wrapped by the errors of Scheduled.Step and
// Final.Step that report a failed backup.
var ErrBackupFailed = errors.New("backup failed")

// Scheduled takes an owner's scheduled backups as recorded operations
// (package operation), one at a time, its Record in Status.Operation: a
// restarted operator neither forgets one nor takes it twice.
type Scheduled struct {
	Runner   *operation.Runner
	Schedule Schedule
	Store    Store
	Snapshot Snapshotter
	// Retention, if set, is applied after each success to the backups
	// this owner's schedule took, never to another owner's or a final
	// one (its Match narrows them further).
	Retention *Policy
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Step starts the backup the schedule has due since st.LastRun() (the
// owner's creation at first), advances the one st.Operation holds, and
// records the outcome in st. It returns how soon it wants the next pass;
// write st with the status after it. A failed backup is in st and the
// error (ErrBackupFailed); the next waits for the next scheduled time.
func (s Scheduled) Step(ctx context.Context, owner metav1.Object, st *Status) (time.Duration, error) {
	now := clock(s.Now)
	if st.Operation != nil && st.Operation.Type != TypeScheduled {
		return 0, fmt.Errorf("backup: Scheduled.Step: status holds a %s operation; a deleting owner steps Final", st.Operation.Type)
	}
	if st.Operation == nil {
		last := st.LastRun()
		if last.IsZero() {
			last = owner.GetCreationTimestamp().Time
		}
		due, after := s.Schedule.Next(last.UTC(), now.UTC())
		if !due {
			return after, nil
		}
		st.RecordAttempt(now)
		st.Operation = &operation.Record{}
		if err := operation.Start(st.Operation, TypeScheduled, now.UTC().Format(idTime), now); err != nil {
			return 0, err
		}
	}
	rec := st.Operation
	next := s.Runner.Step(ctx, owner, rec, op(TypeScheduled, owner, s.Store, s.Snapshot, s.Now, 2))
	switch rec.Phase {
	case operation.Succeeded:
		m, err := s.record(ctx, owner, st, now)
		if err != nil {
			return 0, err
		}
		if s.Retention != nil {
			p, match := *s.Retention, s.Retention.Match
			p.Match = func(o Manifest) bool { return takenBy(o, owner, TypeScheduled) && (match == nil || match(o)) }
			if _, err := Prune(ctx, s.Store, p, now); err != nil {
				return 0, fmt.Errorf("backup: applying the retention after %s: %w", m.ID, err)
			}
		}
		_, after := s.Schedule.Next(st.LastRun().UTC(), now.UTC())
		return after, nil
	case operation.Failed:
		err := failed(st, "scheduled", now)
		_, after := s.Schedule.Next(st.LastRun().UTC(), now.UTC())
		return after, err
	}
	return next, nil
}

// record finds the backup st.Operation took and records it in st: a
// backup gone from the store meanwhile is a failure.
func (s Scheduled) record(ctx context.Context, owner metav1.Object, st *Status, now time.Time) (Manifest, error) {
	m, err := taken(ctx, s.Store, owner, st, now)
	if err != nil {
		return Manifest{}, err
	}
	st.Operation = nil
	return m, nil
}

// taken finds the backup st.Operation, Succeeded, took and records it in
// st. A backup not in the store (pruned by another process, say) is
// recorded failed, and st.Operation dropped; a store that cannot be read
// leaves st as it is, for the next pass to look again.
func taken(ctx context.Context, store Store, owner metav1.Object, st *Status, now time.Time) (Manifest, error) {
	id := st.Operation.ID
	m, ok, err := FindTaken(ctx, store, owner, id)
	switch {
	case err != nil:
		return Manifest{}, fmt.Errorf("backup: reading the backup %s took: %w", id, err)
	case !ok:
		err := fmt.Errorf("%w: %s completed, but its backup is not in the store", ErrBackupFailed, id)
		st.Operation = nil
		st.RecordFailure(now, err)
		return Manifest{}, err
	}
	st.RecordSuccess(m)
	return m, nil
}

// Final takes an owner's final backup, as a recorded operation in
// Status.Operation, before the owner's data goes: call Step from Finalize
// until it reports done, holding the data meanwhile (package guard).
type Final struct {
	Runner   *operation.Runner
	Store    Store
	Snapshot Snapshotter
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Step cancels a scheduled backup under way, starts the final backup,
// advances it, and reports done while it is in the store, recorded in st
// (st.Operation stays, Succeeded, so that a later pass knows). A failed
// attempt, or a backup gone from the store, is in st and the error
// (ErrBackupFailed); the next Step starts another: the deletion waits, it
// never goes on without the backup.
func (f Final) Step(ctx context.Context, owner metav1.Object, st *Status) (done bool, after time.Duration, err error) {
	now := clock(f.Now)
	if rec := st.Operation; rec != nil && rec.Type != TypeFinal {
		f.Runner.CancelOperation(owner, rec.Type, rec.ID)
		st.Operation = nil
	}
	if st.Operation == nil {
		st.Operation = &operation.Record{}
		if err := operation.Start(st.Operation, TypeFinal, "final-"+now.UTC().Format(idTime), now); err != nil {
			return false, 0, err
		}
	}
	rec := st.Operation
	next := f.Runner.Step(ctx, owner, rec, op(TypeFinal, owner, f.Store, f.Snapshot, f.Now, 3))
	switch rec.Phase {
	case operation.Succeeded:
		// Looked up on every Step: done means the backup is there now.
		if _, err := taken(ctx, f.Store, owner, st, now); err != nil {
			return false, 0, err
		}
		return true, 0, nil
	case operation.Failed:
		return false, 0, failed(st, "final", now)
	}
	return false, next, nil
}

// idTime is the time in an operation's ID: sortable, and valid in an
// object key.
const idTime = "20060102T150405Z"

// failed records st.Operation, Failed, as a failure in st, drops it, and
// returns the error (ErrBackupFailed) naming the backup, of kind what.
func failed(st *Status, what string, now time.Time) error {
	rec := st.Operation
	st.Operation = nil
	st.RecordFailure(now, errors.New(rec.Message))
	return fmt.Errorf("%w: %s backup %s: %s", ErrBackupFailed, what, rec.ID, rec.Message)
}

// op is the operation of type typ backing owner up into store: its
// manifest carries the owner's UID, the operation's ID and the trigger.
func op(typ string, owner metav1.Object, store Store, snap Snapshotter, now func() time.Time, attempts int32) operation.Operation {
	return operation.Operation{
		Type:        typ,
		MaxAttempts: attempts,
		Run: func(ctx context.Context, id string, progress func(string)) error {
			progress("taking the backup")
			opts := []Option{WithExtra(map[string]string{ExtraOwnerUID: string(owner.GetUID()), ExtraOperation: id, ExtraTrigger: typ})}
			if now != nil {
				opts = append(opts, WithClock(now))
			}
			if _, err := Backup(ctx, store, snap, opts...); err != nil {
				if ctx.Err() != nil {
					return err // interrupted: Done decides
				}
				return operation.Permanent(ReasonSnapshotFailed, err)
			}
			return nil
		},
		Done: func(ctx context.Context, id string) (bool, error) {
			_, ok, err := FindTaken(ctx, store, owner, id)
			return ok, err
		},
	}
}

// FindTaken returns the backup of owner that operation id took, if it is
// in store.
func FindTaken(ctx context.Context, store Store, owner metav1.Object, id string) (Manifest, bool, error) {
	found, err := Find(ctx, store, func(m Manifest) bool {
		return m.Snapshot.Extra[ExtraOperation] == id && m.Snapshot.Extra[ExtraOwnerUID] == string(owner.GetUID())
	})
	if err != nil || len(found) == 0 {
		return Manifest{}, false, err
	}
	return found[0], true, nil
}

// takenBy says whether m is a backup of owner of the operation type typ.
func takenBy(m Manifest, owner metav1.Object, typ string) bool {
	return m.Snapshot.Extra[ExtraOwnerUID] == string(owner.GetUID()) && m.Snapshot.Extra[ExtraTrigger] == typ
}

func clock(now func() time.Time) time.Time {
	if now == nil {
		return time.Now()
	}
	return now()
}

package backup_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/operation"
)

// fakeClock is a clock the test moves. A Runner's operations read it from
// their own goroutines, hence the lock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// owner is an object created at created.
func owner(uid string, created time.Time) *metav1.ObjectMeta {
	return &metav1.ObjectMeta{Name: uid, UID: types.UID(uid), CreationTimestamp: metav1.NewTime(created)}
}

// stepScheduled steps s until st holds no operation or Step fails, waiting
// for the runs between passes, as a controller's passes would.
func stepScheduled(t *testing.T, s backup.Scheduled, o metav1.Object, st *backup.Status) error {
	t.Helper()
	for range 10 {
		_, err := s.Step(t.Context(), o, st)
		if err != nil || st.Operation == nil {
			return err
		}
		if err := s.Runner.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("the scheduled backup is still %s after 10 passes", st.Operation.Phase)
	return nil
}

// owned lists the IDs of the backups in store that uid's operations of
// trigger took.
func owned(t *testing.T, store backup.Store, uid, trigger string) []string {
	t.Helper()
	ms, err := backup.List(t.Context(), store)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range ms {
		if m.Snapshot.Extra[backup.ExtraOwnerUID] == uid && m.Snapshot.Extra[backup.ExtraTrigger] == trigger {
			ids = append(ids, m.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

func TestScheduledTakesRecordsAndPrunesOnlyItsOwn(t *testing.T) {
	store := newFS(t)
	clk := &fakeClock{t: time.Date(2026, 12, 7, 10, 30, 0, 0, time.UTC)}
	// Another owner's scheduled backup under the same prefix: a cluster
	// re-created under the name, or one given the same bucket.
	if _, err := backup.Backup(t.Context(), store, snapOf([]byte("b")), backup.WithClock(clk.now),
		backup.WithExtra(map[string]string{backup.ExtraOwnerUID: "uid-b", backup.ExtraTrigger: backup.TypeScheduled})); err != nil {
		t.Fatal(err)
	}
	sched, err := backup.ParseSchedule("@hourly")
	if err != nil {
		t.Fatal(err)
	}
	s := backup.Scheduled{Runner: operation.NewRunner(clk.now), Schedule: sched, Store: store, Snapshot: snapOf([]byte("a")),
		Retention: &backup.Policy{KeepLast: 1}, Now: clk.now}
	a := owner("uid-a", clk.t.Add(-time.Hour))
	var st backup.Status

	if err := stepScheduled(t, s, a, &st); err != nil {
		t.Fatal(err)
	}
	first := st.LastBackupID
	if first == "" || st.ConsecutiveFailures != 0 {
		t.Fatalf("after the first scheduled backup: %+v", st)
	}
	if after, err := s.Step(t.Context(), a, &st); err != nil || st.Operation != nil || after <= 0 {
		t.Fatalf("a Step before the next scheduled time: after %v, %v, operation %+v; want a wait and nothing started", after, err, st.Operation)
	}

	clk.advance(time.Hour)
	if err := stepScheduled(t, s, a, &st); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{st.LastBackupID}, owned(t, store, "uid-a", backup.TypeScheduled)); diff != "" || st.LastBackupID == first {
		t.Errorf("uid-a's scheduled backups after KeepLast 1 (-want +got):\n%s", diff)
	}
	if got := owned(t, store, "uid-b", backup.TypeScheduled); len(got) != 1 {
		t.Errorf("uid-b's scheduled backups: %v; want its one, which uid-a's retention must not count", got)
	}
}

// failingSnap fails every snapshot.
type failingSnap struct{}

func (failingSnap) Snapshot(context.Context, io.Writer) (backup.Metadata, error) {
	return backup.Metadata{}, errors.New("disk on fire")
}

func TestScheduledFailureWaitsForTheNextTime(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 12, 7, 10, 30, 0, 0, time.UTC)}
	sched, err := backup.ParseSchedule("@hourly")
	if err != nil {
		t.Fatal(err)
	}
	s := backup.Scheduled{Runner: operation.NewRunner(clk.now), Schedule: sched, Store: newFS(t), Snapshot: failingSnap{}, Now: clk.now}
	a := owner("uid-a", clk.t.Add(-time.Hour))
	var st backup.Status
	if err := stepScheduled(t, s, a, &st); !errors.Is(err, backup.ErrBackupFailed) {
		t.Fatalf("a failed scheduled backup: %v, want ErrBackupFailed", err)
	}
	if st.ConsecutiveFailures != 1 || st.LastFailureMessage == "" || st.Operation != nil {
		t.Errorf("status after the failure: %+v", st)
	}
	if _, err := s.Step(t.Context(), a, &st); err != nil || st.Operation != nil {
		t.Errorf("a Step right after the failure: %v, operation %+v; want the next scheduled time awaited", err, st.Operation)
	}
}

func TestScheduledFoundAfterARestart(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 12, 7, 10, 30, 0, 0, time.UTC)}
	sched, err := backup.ParseSchedule("@hourly")
	if err != nil {
		t.Fatal(err)
	}
	s := backup.Scheduled{Runner: operation.NewRunner(clk.now), Schedule: sched, Store: newFS(t), Snapshot: snapOf([]byte("a")), Now: clk.now}
	a := owner("uid-a", clk.t.Add(-time.Hour))
	var st backup.Status
	for range 2 { // recorded, then launched
		if _, err := s.Step(t.Context(), a, &st); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Runner.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The operator restarts before a pass saw the backup done.
	s.Runner = operation.NewRunner(clk.now)
	if err := stepScheduled(t, s, a, &st); err != nil {
		t.Fatal(err)
	}
	if got := owned(t, store(s), "uid-a", backup.TypeScheduled); len(got) != 1 || got[0] != st.LastBackupID {
		t.Errorf("backups %v, status %q: want the one backup, taken once and recorded", got, st.LastBackupID)
	}
}

func store(s backup.Scheduled) backup.Store { return s.Store }

// flakySnap fails its first snapshot.
type flakySnap struct{ failed bool }

func (f *flakySnap) Snapshot(ctx context.Context, w io.Writer) (backup.Metadata, error) {
	if !f.failed {
		f.failed = true
		return backup.Metadata{}, errors.New("the store's Secret is gone")
	}
	return snapOf([]byte("last")).Snapshot(ctx, w)
}

func TestFinalCancelsTheScheduledOneAndNeverSkips(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 12, 7, 10, 30, 0, 0, time.UTC)}
	fs := newFS(t)
	rn := operation.NewRunner(clk.now)
	a := owner("uid-a", clk.t.Add(-time.Hour))
	st := backup.Status{Operation: &operation.Record{}}
	if err := operation.Start(st.Operation, backup.TypeScheduled, "s-1", clk.t); err != nil {
		t.Fatal(err)
	}
	f := backup.Final{Runner: rn, Store: fs, Snapshot: &flakySnap{}, Now: clk.now}
	var failed bool
	for i := 0; ; i++ {
		if i == 10 {
			t.Fatalf("no final backup after 10 passes: %+v", st)
		}
		done, _, err := f.Step(t.Context(), a, &st)
		failed = failed || errors.Is(err, backup.ErrBackupFailed)
		if err != nil && !errors.Is(err, backup.ErrBackupFailed) {
			t.Fatal(err)
		}
		if done {
			break
		}
		clk.advance(time.Second) // another ID for the next attempt
		if err := rn.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if !failed || st.ConsecutiveFailures != 0 || st.LastFailureMessage == "" {
		t.Errorf("the failed first attempt is not reported: %+v", st)
	}
	if got := owned(t, fs, "uid-a", backup.TypeFinal); len(got) != 1 || got[0] != st.LastBackupID {
		t.Errorf("final backups %v, status %q: want the one taken, recorded", got, st.LastBackupID)
	}
	if got := owned(t, fs, "uid-a", backup.TypeScheduled); len(got) != 0 {
		t.Errorf("the canceled scheduled backup was taken: %v", got)
	}
	if done, _, err := f.Step(t.Context(), a, &st); !done || err != nil {
		t.Errorf("a Step after the final backup: done %v, %v; want done", done, err)
	}
}

// A final backup gone from the store before a pass recorded it (another
// process's prune, say) is taken again: Final never reports done without
// it.
func TestFinalNotDoneWithoutItsBackup(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 12, 7, 10, 30, 0, 0, time.UTC)}
	fs := newFS(t)
	rn := operation.NewRunner(clk.now)
	f := backup.Final{Runner: rn, Store: fs, Snapshot: snapOf([]byte("last")), Now: clk.now}
	a := owner("uid-a", clk.t.Add(-time.Hour))
	var st backup.Status
	for range 2 { // recorded, then launched
		if done, _, err := f.Step(t.Context(), a, &st); done || err != nil {
			t.Fatalf("done %v, %v before the backup ran", done, err)
		}
	}
	if err := rn.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	ms, err := backup.List(t.Context(), fs)
	if err != nil || len(ms) != 1 {
		t.Fatalf("backups %v, %v; want the final one", ms, err)
	}
	if err := fs.Delete(t.Context(), backup.ManifestKeyFor(ms[0].ID)); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if i == 10 {
			t.Fatalf("no final backup after 10 passes: %+v", st)
		}
		clk.advance(time.Second)
		done, _, err := f.Step(t.Context(), a, &st)
		if err != nil && !errors.Is(err, backup.ErrBackupFailed) {
			t.Fatal(err)
		}
		if done {
			break
		}
		if err := rn.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, err := backup.FindTaken(t.Context(), fs, a, st.Operation.ID); !ok || err != nil {
		t.Errorf("Final reported done, yet the backup of %s is not in the store (%v)", st.Operation.ID, err)
	}
}

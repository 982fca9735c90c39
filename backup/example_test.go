package backup_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/fsstore"
)

// kvSnapshotter stands in for a database: it streams its key/value pairs.
type kvSnapshotter struct {
	rev  int
	data map[string]string
}

func (s *kvSnapshotter) Snapshot(ctx context.Context, w io.Writer) (backup.Metadata, error) {
	for _, k := range []string{"a", "b"} {
		if _, err := fmt.Fprintf(w, "%s=%s\n", k, s.data[k]); err != nil {
			return backup.Metadata{}, err
		}
	}
	return backup.Metadata{Engine: "kvdb", EngineVersion: "1.2.3", ConsistencyPoint: fmt.Sprint(s.rev), Format: "kv-lines"}, nil
}

// kvRestorer stages into a buffer and swaps it in on Commit.
type kvRestorer struct {
	staging bytes.Buffer
	live    string
}

func (r *kvRestorer) Stage(ctx context.Context, rd io.Reader, m backup.Manifest) error {
	if m.Snapshot.Format != "kv-lines" {
		return fmt.Errorf("cannot restore format %q", m.Snapshot.Format)
	}
	r.staging.Reset()
	_, err := io.Copy(&r.staging, rd)
	return err
}

func (r *kvRestorer) Commit(ctx context.Context, m backup.Manifest) error {
	r.live = r.staging.String()
	return nil
}

func (r *kvRestorer) Abort(ctx context.Context, m backup.Manifest) error {
	r.staging.Reset()
	return nil
}

func Example() {
	dir, err := os.MkdirTemp("", "backups")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()
	store, err := fsstore.New(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()

	db := &kvSnapshotter{rev: 7, data: map[string]string{"a": "1", "b": "2"}}
	m, err := backup.Backup(ctx, store, db)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("backed up %d bytes of %s %s at revision %s, sha256 %s…\n",
		m.Size, m.Snapshot.Engine, m.Snapshot.EngineVersion, m.Snapshot.ConsistencyPoint, m.SHA256[:12])

	latest, err := backup.Latest(ctx, store)
	if err != nil {
		fmt.Println(err)
		return
	}
	r := &kvRestorer{}
	if _, err := backup.Restore(ctx, store, latest.ID, r); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print("restored:\n", r.live)
	// Output:
	// backed up 8 bytes of kvdb 1.2.3 at revision 7, sha256 4a73850fde34…
	// restored:
	// a=1
	// b=2
}

func ExampleRestore_corrupt() {
	dir, _ := os.MkdirTemp("", "backups")
	defer func() { _ = os.RemoveAll(dir) }()
	store, _ := fsstore.New(dir)
	ctx := context.Background()

	m, _ := backup.Backup(ctx, store, &kvSnapshotter{rev: 1, data: map[string]string{"a": "1", "b": "2"}})
	// Someone overwrites the data object with different bytes of the same size.
	_, _ = store.Put(ctx, m.DataKey, strings.NewReader("a=9\nb=9\n"))

	r := &kvRestorer{live: "untouched"}
	_, err := backup.Restore(ctx, store, m.ID, r)
	fmt.Println(errors.Is(err, backup.ErrChecksumMismatch))
	fmt.Println(r.live)
	// Output:
	// true
	// untouched
}

func ExamplePrune() {
	dir, _ := os.MkdirTemp("", "backups")
	defer func() { _ = os.RemoveAll(dir) }()
	store, _ := fsstore.New(dir)
	ctx := context.Background()

	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for day := range 5 {
		now := start.Add(time.Duration(day) * 24 * time.Hour)
		_, _ = backup.Backup(ctx, store, &kvSnapshotter{rev: day, data: map[string]string{}},
			backup.WithClock(func() time.Time { return now }))
	}
	res, err := backup.Prune(ctx, store, backup.Policy{KeepLast: 2, MaxAge: 30 * 24 * time.Hour}, start.Add(5*24*time.Hour))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("kept", len(res.Kept), "deleted", len(res.Deleted))
	left, _ := backup.List(ctx, store)
	for _, m := range left {
		fmt.Println(m.StartTime.Format(time.DateOnly), "revision", m.Snapshot.ConsistencyPoint)
	}
	// Output:
	// kept 2 deleted 3
	// 2026-03-05 revision 4
	// 2026-03-04 revision 3
}

// Keep the newest two scheduled backups and every on-demand one in a
// shared store: what took each backup is recorded in its metadata, which
// Policy.Match and Find select by.
func ExampleFind() {
	dir, _ := os.MkdirTemp("", "backups")
	defer func() { _ = os.RemoveAll(dir) }()
	store, _ := fsstore.New(dir)
	ctx := context.Background()

	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for i, trigger := range []string{"schedule", "on-demand", "schedule", "schedule", "schedule"} {
		now := start.Add(time.Duration(i) * time.Hour)
		snap := backup.SnapshotterFunc(func(_ context.Context, w io.Writer) (backup.Metadata, error) {
			_, err := fmt.Fprintf(w, "backup %d\n", i)
			return backup.Metadata{Engine: "kvdb", ConsistencyPoint: fmt.Sprint(i), Extra: map[string]string{"trigger": trigger}}, err
		})
		_, _ = backup.Backup(ctx, store, snap, backup.WithClock(func() time.Time { return now }))
	}
	by := func(trigger string) func(backup.Manifest) bool {
		return func(m backup.Manifest) bool { return m.Snapshot.Extra["trigger"] == trigger }
	}
	res, err := backup.Prune(ctx, store, backup.Policy{KeepLast: 2, Match: by("schedule")}, start.Add(24*time.Hour))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("scheduled: kept", len(res.Kept), "deleted", len(res.Deleted))
	onDemand, _ := backup.Find(ctx, store, by("on-demand"))
	for _, m := range onDemand {
		fmt.Println("on-demand backup at revision", m.Snapshot.ConsistencyPoint, "kept")
	}
	// Output:
	// scheduled: kept 2 deleted 2
	// on-demand backup at revision 1 kept
}

func ExampleSchedule_Next() {
	s, err := backup.ParseSchedule("0 3 * * *") // daily at 03:00
	if err != nil {
		fmt.Println(err)
		return
	}
	// In a reconciler, lastRun comes from Status.LastScheduleTime.
	lastRun := time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)
	now := time.Date(2026, 3, 1, 22, 0, 0, 0, time.UTC)
	due, requeueAfter := s.Next(lastRun, now)
	fmt.Println(due, requeueAfter)

	now = time.Date(2026, 3, 2, 3, 0, 5, 0, time.UTC)
	due, requeueAfter = s.Next(lastRun, now)
	fmt.Println(due, requeueAfter)
	// Output:
	// false 5h0m0s
	// true 23h59m55s
}

func ExampleStatus_RecordSuccess() {
	var st backup.Status
	st.RecordAttempt(time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC))
	st.RecordSuccess(backup.Manifest{
		ID: "20260301T030000Z-0123abcd", Size: 1 << 20,
		SHA256:  "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		EndTime: time.Date(2026, 3, 1, 3, 1, 0, 0, time.UTC),
	})
	fmt.Println(st.LastSuccessfulTime.UTC().Format(time.RFC3339), st.LastBackupID, st.LastSizeBytes)
	// Output:
	// 2026-03-01T03:01:00Z 20260301T030000Z-0123abcd 1048576
}

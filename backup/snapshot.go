package backup

import (
	"context"
	"io"
)

// Metadata is what a [Snapshotter] reports about the snapshot it wrote. It is
// recorded in the backup's [Manifest].
type Metadata struct {
	// Engine names the database engine, for example "etcd" or "postgresql".
	// Required.
	Engine string `json:"engine"`
	// EngineVersion is the engine's version, for example "3.6.4".
	EngineVersion string `json:"engineVersion,omitempty"`
	// ConsistencyPoint identifies the state the snapshot is consistent at, in
	// the engine's own terms: an etcd revision, a PostgreSQL LSN, a MySQL
	// GTID set.
	ConsistencyPoint string `json:"consistencyPoint,omitempty"`
	// Format describes the byte format of the data, for example
	// "etcd-snapshot-db" or "tar+zstd", so a restorer can refuse what it does
	// not understand.
	Format string `json:"format,omitempty"`
	// Extra holds engine-specific details worth keeping with the backup.
	Extra map[string]string `json:"extra,omitempty"`
}

// Snapshotter writes a consistent snapshot of a workload.
type Snapshotter interface {
	// Snapshot streams a consistent snapshot into w and returns its
	// metadata. It must stop and return an error when ctx is cancelled or a
	// write to w fails. Returning an error discards everything written: no
	// backup is recorded. Snapshot must not retain w after returning.
	Snapshot(ctx context.Context, w io.Writer) (Metadata, error)
}

// SnapshotterFunc adapts a function to the [Snapshotter] interface.
type SnapshotterFunc func(ctx context.Context, w io.Writer) (Metadata, error)

// Snapshot calls f(ctx, w).
func (f SnapshotterFunc) Snapshot(ctx context.Context, w io.Writer) (Metadata, error) {
	return f(ctx, w)
}

// Quiescer is implemented by a [Snapshotter] whose workload must be paused
// for the snapshot to be consistent (for example a database without an
// online snapshot facility). [Backup] calls Quiesce before the snapshot starts
// and Resume once the data is stored or the backup failed.
type Quiescer interface {
	// Quiesce pauses writes. If it returns an error the backup is aborted
	// and Resume is not called.
	Quiesce(ctx context.Context) error
	// Resume undoes Quiesce. It is called exactly once after a successful
	// Quiesce, with a context that is not cancelled when the backup's
	// context is, so that a cancelled backup still resumes the workload.
	Resume(ctx context.Context) error
}

// Restorer restores a snapshot in two phases so that corrupt data is never
// made live: [Restore] calls Stage with the data, verifies the data against
// the manifest, and only then calls Commit. If staging or verification fails
// it calls Abort instead.
//
// The footgun: a Restorer that overwrites live data inside Stage defeats the
// verification. Stage into a scratch directory, a new volume or a temporary
// database, and switch over in Commit.
type Restorer interface {
	// Stage reads the snapshot from r and stores it somewhere that is not
	// yet live. Reads from r fail with a [*VerificationError] as soon as the
	// stream is known not to match the manifest. Stage need not read r to
	// the end; [Restore] reads and verifies what is left.
	Stage(ctx context.Context, r io.Reader, m Manifest) error
	// Commit makes the staged snapshot live. It is called only after the
	// whole data object was read and matched the manifest's size and
	// SHA-256. Abort is not called after Commit.
	Commit(ctx context.Context, m Manifest) error
	// Abort discards staged data after Stage or verification failed. It is
	// called with a context that is not cancelled when the restore's context
	// is.
	Abort(ctx context.Context, m Manifest) error
}

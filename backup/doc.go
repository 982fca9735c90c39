// Package backup is a backup abstraction for stateful operators in which a
// backup is either complete and verifiable, or does not exist.
//
// An operator implements two small interfaces for its workload: a
// [Snapshotter] that streams a consistent snapshot of the database into an
// [io.Writer] and reports where the snapshot is consistent (a revision, an LSN,
// a GTID set), and a [Restorer] that stages a snapshot read from an
// [io.Reader] and commits it only when asked to. Backups go to a [Store]:
// package [github.com/opkit-dev/opkit/backup/fsstore] writes to a mounted
// volume, package [github.com/opkit-dev/opkit/backup/s3] to any S3-compatible
// object store (it lives in its own package so that users of the filesystem
// store do not pull in an S3 SDK).
//
// # Commit protocol
//
// [Backup] streams the snapshot into the store as the object "<id>.data"
// while hashing it, and only when the data is stored writes the manifest
// "<id>.manifest.json" ([Manifest]: size, SHA-256, start and end time, the
// snapshotter's [Metadata] and the opkit version). The manifest is the commit
// point: [List], [Latest] and [Restore] offer only backups with a readable
// manifest whose data object exists with the manifest's size. [Prune]
// deletes only what is provably unfinished: a data object without any
// manifest, once older than [Policy.IncompleteGrace]. A backup whose
// manifest exists but cannot be read (damaged, or of a newer formatVersion
// after a rollback of your operator: [ErrBadManifest]) or disagrees with its
// data is never deleted; Prune reports it in [PruneResult.Unreadable].
//
// [Restore] verifies size and SHA-256 while streaming and calls
// [Restorer.Commit] only after the whole object was read and matched the
// manifest. A mismatch is reported as a [*VerificationError] (matching
// [ErrChecksumMismatch] or [ErrSizeMismatch] with [errors.Is]) and the
// restorer's staged data is discarded with [Restorer.Abort].
//
// # Retention and scheduling
//
// [Prune] applies a [Policy] (keep the newest N, optional daily and weekly
// tiers, a maximum age) and never deletes the newest complete backup. When the
// store cannot be listed it returns the error and deletes nothing.
//
// [Schedule] evaluates a cron expression against the time of the last run and
// tells a reconciler whether a backup is due and when to requeue, so no
// goroutine or timer is kept per custom resource. [Status] is a small struct a
// custom resource status can embed to report the last successful backup and
// the failed attempts since.
//
// # Backups as operations
//
// [Scheduled] and [Final] take an owner's scheduled and final backups as
// recorded operations (package operation), held in [Status.Operation]: a
// restarted operator finds each by the owner's UID and the operation's ID
// in its manifest, the retention counts only the owner's scheduled backups,
// and a final backup that fails is tried again, never skipped.
//
// # Footguns
//
//   - A Restorer must not make data live in [Restorer.Stage]: the stream is
//     only known to be intact after Stage returned. Write to a staging
//     directory or a temporary database and switch over in Commit.
//   - A Snapshotter must write a consistent snapshot: either use the engine's
//     own snapshot facility (etcd snapshot, pg_basebackup, mysqldump
//     --single-transaction) or implement [Quiescer] to pause writes.
//   - [Policy.IncompleteGrace] must be longer than your longest backup if
//     backups and pruning run concurrently in different processes; in S3 a
//     finished multipart upload is dated when it started.
//   - Keys are restricted (see [CheckKey]) so that they are portable between
//     stores; names starting with "." are reserved for stores' temporary
//     files.
package backup

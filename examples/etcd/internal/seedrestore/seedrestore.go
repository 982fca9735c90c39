// Package seedrestore prepares the data directory of the seed member of a
// restored EtcdCluster from a backup, before etcd starts: the physical
// restore. Its two steps are the operator's subcommands that run as init
// containers of the seed pod, around the cluster's own etcdutl:
//
//  1. fetch-backup (Fetch, in the operator's image) streams the backup from
//     its store into <data-dir>/restore/snapshot.db, verifying its size and
//     SHA-256 against the manifest and etcd's own trailing checksum. A
//     mismatch leaves no file behind.
//  2. restore (the cluster's etcd image) runs `etcdutl snapshot restore
//     <data-dir>/restore/snapshot.db --data-dir <data-dir>/restore/data`
//     with the member's name, initial cluster, token and peer URL, and
//     moves the revision on (RestoreArgs).
//  3. finish-restore (Finish, in the operator's image) moves the restored
//     <data-dir>/restore/data/member to <data-dir>/member, where etcd
//     started with --data-dir <data-dir> finds it, and removes
//     <data-dir>/restore.
//
// etcdutl restores only into an empty directory, and the data volume's
// root is not empty (the staged snapshot, a file system's lost+found), so
// it restores below the staging directory and Finish moves the result.
//
// The steps are idempotent, because a pod's init containers run again when
// the pod restarts. The official etcd images have no shell to guard
// etcdutl with, so the guard is in Fetch: once <data-dir>/member exists the
// member has its data, and Fetch writes a placeholder snapshot instead (an
// empty etcd database, a few kilobytes) so that etcdutl has something to
// restore, quickly, and Finish then discards the result. The backup is not
// read again, so a seed restarts even after its backup was deleted.
//
// The same steps restore a surviving member's own data when the cluster is
// rebuilt from it after a lost quorum, to move its revision on
// (StageMember, FinishRebuild).
package seedrestore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/examples/etcd/internal/snapshot"
)

// The names of the operator's subcommands that run the steps.
const (
	CommandFetch  = "fetch-backup"
	CommandFinish = "finish-restore"
)

// Paths below a member's data directory.
const (
	// StagingDir holds the snapshot and etcdutl's output until Finish.
	StagingDir = "restore"
	// SnapshotFile is the staged snapshot, in StagingDir.
	SnapshotFile = "snapshot.db"
	// OutputDir is etcdutl's --data-dir, in StagingDir.
	OutputDir = "data"
	// MemberDir is where etcd keeps a member's data, in its data
	// directory and in etcdutl's output.
	MemberDir = "member"
)

// RevisionBump is how far a restore moves the revision past the backup's
// (etcdutl --bump-revision, with --mark-compacted): clients that watched
// the cluster before, at revisions the backup may not have reached, get
// "compacted" and re-list instead of waiting for revisions that came and
// went. A billion leaves room for a billion writes since the backup.
const RevisionBump = 1_000_000_000

// RestoreArgs are the arguments of `etcdutl snapshot restore` for the
// member data directory dataDir: the member's name, the initial cluster,
// token and peer URL; with bump (etcdutl 3.5.10 and later), RevisionBump.
func RestoreArgs(dataDir, name, initialCluster, token, peerURL string, bump bool) []string {
	args := []string{"snapshot", "restore", SnapshotPath(dataDir),
		"--data-dir=" + RestoreDataDir(dataDir),
		"--name=" + name,
		"--initial-cluster=" + initialCluster,
		"--initial-cluster-token=" + token,
		"--initial-advertise-peer-urls=" + peerURL,
	}
	if bump {
		args = append(args, fmt.Sprintf("--bump-revision=%d", RevisionBump), "--mark-compacted")
	}
	return args
}

// SnapshotPath returns the staged snapshot's path for dataDir.
func SnapshotPath(dataDir string) string {
	return filepath.Join(dataDir, StagingDir, SnapshotFile)
}

// RestoreDataDir returns etcdutl's --data-dir for dataDir.
func RestoreDataDir(dataDir string) string {
	return filepath.Join(dataDir, StagingDir, OutputDir)
}

// HasData reports whether the member data directory dataDir holds a
// member's data.
func HasData(dataDir string) (bool, error) {
	_, err := os.Stat(filepath.Join(dataDir, MemberDir))
	if err == nil {
		return true, nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return false, fmt.Errorf("checking for member data in %s: %w", dataDir, err)
}

// FetchResult says what Fetch did.
type FetchResult struct {
	// Fetched is true when the backup was written; false when the member
	// already had data and a placeholder was written instead.
	Fetched bool
	// Manifest is the backup's manifest, when Fetched.
	Manifest backup.Manifest
}

// Fetch stages backup id of store as the snapshot etcdutl restores into
// the member data directory dataDir, or a placeholder when dataDir already
// holds the member's data (see the package documentation). The snapshot is
// written to a temporary file and renamed into place only once it matches
// the manifest and etcd's trailing checksum, so a failed Fetch leaves no
// snapshot; its error wraps backup.ErrNotFound for a missing backup and is
// a *backup.VerificationError for a corrupt one.
func Fetch(ctx context.Context, store backup.Store, id, dataDir string) (FetchResult, error) {
	if dataDir == "" {
		return FetchResult{}, errors.New("data directory is empty; pass the member's --data-dir")
	}
	has, err := HasData(dataDir)
	if err != nil {
		return FetchResult{}, err
	}
	staging := filepath.Join(dataDir, StagingDir)
	if has {
		// A restarted pod: leave the member alone, give etcdutl a
		// placeholder into an empty output directory.
		return FetchResult{}, placeholder(dataDir)
	}
	if store == nil {
		return FetchResult{}, errors.New("no backup store given")
	}
	if id == "" {
		return FetchResult{}, errors.New("backup ID is empty; pass --backup-id")
	}
	// Leftovers of an interrupted attempt are redone from the start.
	if err := os.RemoveAll(staging); err != nil {
		return FetchResult{}, fmt.Errorf("removing the staging directory of an earlier attempt: %w", err)
	}
	if err := os.MkdirAll(staging, 0o700); err != nil {
		return FetchResult{}, fmt.Errorf("creating the staging directory: %w", err)
	}
	fr := &fileRestorer{path: SnapshotPath(dataDir)}
	m, err := backup.Restore(ctx, store, id, fr)
	if err != nil {
		return FetchResult{}, fmt.Errorf("fetching backup %s: %w", id, err)
	}
	return FetchResult{Fetched: true, Manifest: m}, nil
}

// fileRestorer is a backup.Restorer that writes the snapshot to path,
// through a temporary file renamed into place by Commit.
type fileRestorer struct {
	path string
	tmp  string
}

// Stage writes the snapshot, checksum included (etcdutl verifies it too),
// to a temporary file next to path and checks etcd's trailing checksum.
func (r *fileRestorer) Stage(ctx context.Context, in io.Reader, m backup.Manifest) error {
	path, err := snapshot.StageFile(ctx, in, m, filepath.Dir(r.path), ".snapshot-*.tmp", true)
	r.tmp = path
	return err
}

// Commit renames the verified snapshot into place.
func (r *fileRestorer) Commit(context.Context, backup.Manifest) error {
	if err := os.Rename(r.tmp, r.path); err != nil {
		return fmt.Errorf("moving the snapshot into place: %w", err)
	}
	return syncDir(filepath.Dir(r.path))
}

// Abort removes the temporary file.
func (r *fileRestorer) Abort(context.Context, backup.Manifest) error {
	if r.tmp == "" {
		return nil
	}
	if err := os.Remove(r.tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the partial snapshot: %w", err)
	}
	return nil
}

// placeholderBuckets are those etcdutl's restore writes to: the
// consistent index to meta, and, with --bump-revision, a revision to key.
var placeholderBuckets = [][]byte{[]byte("meta"), []byte("key")}

// WritePlaceholder writes an empty etcd database followed by its SHA-256,
// in the format of etcd's snapshot stream, to path: what etcdutl restores
// on a restarted pod, whose result Finish discards.
func WritePlaceholder(path string) error {
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		return fmt.Errorf("creating the placeholder snapshot: %w", err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range placeholderBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("creating the placeholder snapshot: %w", err)
	}
	data, err := os.ReadFile(tmp)
	if err != nil {
		return fmt.Errorf("reading the placeholder snapshot: %w", err)
	}
	sum := sha256.Sum256(data)
	if err := os.WriteFile(tmp, append(data, sum[:]...), 0o600); err != nil {
		return fmt.Errorf("writing the placeholder snapshot: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("moving the placeholder snapshot into place: %w", err)
	}
	return nil
}

// Finish moves the member restored by etcdutl into the member data
// directory dataDir, unless dataDir already holds a member (a restarted
// pod), and removes the staging directory. It reports whether it moved a
// restored member into place.
func Finish(dataDir string) (bool, error) {
	if dataDir == "" {
		return false, errors.New("data directory is empty; pass the member's --data-dir")
	}
	has, err := HasData(dataDir)
	if err != nil {
		return false, err
	}
	installed := false
	if !has {
		restored := filepath.Join(RestoreDataDir(dataDir), MemberDir)
		if _, err := os.Stat(restored); err != nil {
			return false, fmt.Errorf("no restored member at %s (did etcdutl snapshot restore run?): %w", restored, err)
		}
		if err := os.Rename(restored, filepath.Join(dataDir, MemberDir)); err != nil {
			return false, fmt.Errorf("moving the restored member into %s: %w", dataDir, err)
		}
		if err := syncDir(dataDir); err != nil {
			return false, err
		}
		installed = true
	}
	if err := os.RemoveAll(filepath.Join(dataDir, StagingDir)); err != nil {
		return installed, fmt.Errorf("removing the staging directory: %w", err)
	}
	return installed, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

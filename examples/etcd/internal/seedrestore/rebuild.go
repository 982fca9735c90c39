package seedrestore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// The rebuild from a surviving member restarts it on its own data, restored
// by the same three init containers: stage-member-data (StageMember)
// stages the member's database, etcdutl restores it with the revision moved
// on, and finish-restore --rebuild (FinishRebuild) replaces the member's
// data with the result. etcd's --force-new-cluster keeps the survivor's
// revisions, which clients of the lost majority may have seen used for
// other writes; after this they are marked compacted instead.
//
// The database is staged after a run with --force-new-cluster and a
// graceful stop, which leaves etcd's whole log applied to it. After a kill
// it may lack the last entries; StageMember then restores nothing
// (StagedBehindLog) and etcd applies its log on this start.

// CommandStageMember is the subcommand that runs StageMember.
const CommandStageMember = "stage-member-data"

// FlagRebuild names the rebuild (a token unique to it) on the command
// lines of stage-member-data and finish-restore.
const FlagRebuild = "rebuild"

// RebuiltFile is the file, in a member's data directory, that holds the
// token of the last rebuild whose restore was put in place: that
// rebuild's steps are then no-ops.
const RebuiltFile = "rebuilt"

// replacedDir, in StagingDir, holds the member's data FinishRebuild
// replaces until the restored data is in place.
const replacedDir = "replaced-member"

// Staged says what StageMember staged.
type Staged int

const (
	// StagedDatabase is the member's database, to restore.
	StagedDatabase Staged = iota
	// StagedRebuilt is a placeholder: the rebuild is in place already.
	StagedRebuilt
	// StagedBehindLog is a placeholder: the member's database lacks
	// entries of its write-ahead log (etcd did not stop gracefully):
	// etcd starts on its data as it is, applies them, and a later
	// restart of the member stages its database.
	StagedBehindLog
)

// StageMember stages the database of the member in dataDir as the
// snapshot etcdutl restores for the rebuild named token, or a placeholder
// (see Staged) whose restore FinishRebuild discards.
func StageMember(dataDir, token string) (Staged, error) {
	if dataDir == "" || token == "" {
		return 0, errors.New("the data directory and the rebuild token are required")
	}
	done, err := rebuilt(dataDir, token)
	if err != nil {
		return 0, err
	}
	if done {
		return StagedRebuilt, placeholder(dataDir)
	}
	staging := filepath.Join(dataDir, StagingDir)
	member := filepath.Join(dataDir, MemberDir)
	// FinishRebuild stopped between moving the member's data aside and
	// moving the restored data in: the data moved aside is still the
	// member's, and is staged again.
	if _, err := os.Stat(member); errors.Is(err, os.ErrNotExist) {
		if err := os.Rename(filepath.Join(staging, replacedDir), member); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("moving the member's data back into %s: %w", dataDir, err)
		}
	}
	db := filepath.Join(member, "snap", "db")
	if _, err := os.Stat(db); err != nil {
		return 0, fmt.Errorf("no member database to rebuild from: %w", err)
	}
	facts, err := readDatabase(db)
	if err != nil {
		return 0, err
	}
	behind, err := behindLog(dataDir, facts.applied)
	if err != nil {
		return 0, err
	}
	if behind {
		if err := placeholder(dataDir); err != nil {
			return 0, err
		}
		return StagedBehindLog, writeFileSynced(filepath.Join(staging, behindFile), nil)
	}
	// The restore makes a one-member cluster: of a member whose cluster
	// has others, it would make a second cluster beside them.
	if facts.members > 1 {
		return 0, fmt.Errorf("the member's database records %d members: a rebuild restores only the survivor of a cluster rebuilt with --force-new-cluster, alone", facts.members)
	}
	if err := os.RemoveAll(staging); err != nil {
		return 0, fmt.Errorf("removing the staging directory of an earlier attempt: %w", err)
	}
	if err := os.MkdirAll(staging, 0o700); err != nil {
		return 0, fmt.Errorf("creating the staging directory: %w", err)
	}
	if err := copyFile(db, SnapshotPath(dataDir)); err != nil {
		return 0, err
	}
	return StagedDatabase, nil
}

// behindFile, in StagingDir, tells FinishRebuild that StageMember found
// the database behind its log and staged a placeholder.
const behindFile = "behind-log"

// FinishRebuild puts the member etcdutl restored for the rebuild named
// token in place of the member's data in dataDir, records the rebuild in
// RebuiltFile and removes the staging directory; once the rebuild is
// recorded it only removes the staging directory. It reports whether it
// put the restored member in place. Stopped after the restored member is
// in place but before the record, the next run restores that member once
// more: the revision moves on twice, which keeps every guarantee.
func FinishRebuild(dataDir, token string) (bool, error) {
	if dataDir == "" || token == "" {
		return false, errors.New("the data directory and the rebuild token are required")
	}
	staging := filepath.Join(dataDir, StagingDir)
	done, err := rebuilt(dataDir, token)
	if err != nil {
		return false, err
	}
	_, err = os.Stat(filepath.Join(staging, behindFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("reading what stage-member-data staged: %w", err)
	}
	if done || err == nil {
		if err := os.RemoveAll(staging); err != nil {
			return false, fmt.Errorf("removing the staging directory: %w", err)
		}
		return false, nil
	}
	restored := filepath.Join(RestoreDataDir(dataDir), MemberDir)
	member := filepath.Join(dataDir, MemberDir)
	switch _, err := os.Stat(restored); {
	case err == nil:
		if err := os.Rename(member, filepath.Join(staging, replacedDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("moving the member's data aside: %w", err)
		}
		if err := os.Rename(restored, member); err != nil {
			return false, fmt.Errorf("moving the restored member into %s: %w", dataDir, err)
		}
	case swapped(dataDir):
		// This step failed after the swap and the kubelet retries it
		// alone: the restored member is in place, to be recorded.
	default:
		return false, fmt.Errorf("no restored member at %s (did etcdutl snapshot restore run?): %w", restored, err)
	}
	if err := syncDir(dataDir); err != nil {
		return false, err
	}
	if err := writeFileSynced(filepath.Join(dataDir, RebuiltFile), []byte(token+"\n")); err != nil {
		return true, err
	}
	if err := os.RemoveAll(staging); err != nil {
		return true, fmt.Errorf("removing the staging directory: %w", err)
	}
	return true, nil
}

// swapped reports whether FinishRebuild put a restored member in place of
// the member's data in dataDir, which it moved aside, without recording
// the rebuild yet.
func swapped(dataDir string) bool {
	_, errMember := os.Stat(filepath.Join(dataDir, MemberDir))
	_, errAside := os.Stat(filepath.Join(dataDir, StagingDir, replacedDir))
	return errMember == nil && errAside == nil
}

// RebuildArgs are the arguments of `etcdutl snapshot restore` for a
// rebuild: RestoreArgs with the revision moved on, and no check of the
// trailing checksum a database copied from a data directory lacks.
func RebuildArgs(dataDir, name, initialCluster, token, peerURL string) []string {
	return append(RestoreArgs(dataDir, name, initialCluster, token, peerURL, true), "--skip-hash-check")
}

// rebuilt reports whether dataDir records the rebuild named token.
func rebuilt(dataDir, token string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, RebuiltFile))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the rebuild record: %w", err)
	}
	return strings.TrimSpace(string(b)) == token, nil
}

// placeholder stages a placeholder snapshot into an empty output
// directory, for a restore whose result is discarded.
func placeholder(dataDir string) error {
	if err := os.RemoveAll(RestoreDataDir(dataDir)); err != nil {
		return fmt.Errorf("removing the previous restore output: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dataDir, StagingDir), 0o700); err != nil {
		return fmt.Errorf("creating the staging directory: %w", err)
	}
	return WritePlaceholder(SnapshotPath(dataDir))
}

// copyFile copies from to a temporary file next to to, synced, and
// renames it into place.
func copyFile(from, to string) (err error) {
	in, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("reading the member's database: %w", err)
	}
	defer func() { _ = in.Close() }()
	tmp, err := os.CreateTemp(filepath.Dir(to), ".snapshot-*.tmp")
	if err != nil {
		return fmt.Errorf("staging the member's database: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	_, err = io.Copy(tmp, in)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("staging the member's database: %w", err)
	}
	if err := os.Rename(tmp.Name(), to); err != nil {
		return fmt.Errorf("staging the member's database: %w", err)
	}
	return syncDir(filepath.Dir(to))
}

// writeFileSynced writes data to path through a synced temporary file.
func writeFileSynced(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

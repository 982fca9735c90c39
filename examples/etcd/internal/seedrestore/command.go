package seedrestore

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/fsstore"
	"github.com/opkit-dev/opkit/backup/s3"
)

// Flags of the fetch-backup subcommand, as the operator writes them into
// the seed pod.
const (
	FlagDataDir     = "data-dir"
	FlagBackupID    = "backup-id"
	FlagPrefix      = "prefix"
	FlagStoreDir    = "store-dir"
	FlagS3SecretDir = "s3-secret-dir"
)

// RunFetch is the fetch-backup subcommand: it parses args and runs Fetch
// with the store they name, writing one line about what it did to out.
//
//	fetch-backup --data-dir=DIR --backup-id=ID --prefix=NAMESPACE/CLUSTER
//	  (--store-dir=DIR | --s3-secret-dir=DIR)
//
// --store-dir is a PVC store's mounted directory; --s3-secret-dir is an S3
// store's Secret mounted as a volume (one file per key, read as
// backup/s3.ConfigFromSecret reads the Secret). --prefix is the part of the
// store holding the source cluster's backups.
func RunFetch(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet(CommandFetch, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var dataDir, id, prefix, storeDir, secretDir string
	fs.StringVar(&dataDir, FlagDataDir, "", "the member's data directory (etcd's --data-dir)")
	fs.StringVar(&id, FlagBackupID, "", "the ID of the backup to fetch")
	fs.StringVar(&prefix, FlagPrefix, "", "the key prefix of the source cluster's backups in the store, <namespace>/<cluster>")
	fs.StringVar(&storeDir, FlagStoreDir, "", "directory of a PVC backup store")
	fs.StringVar(&secretDir, FlagS3SecretDir, "", "directory holding the keys of an S3 store's Secret")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%s: %w", CommandFetch, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", CommandFetch, fs.Args())
	}
	if dataDir == "" {
		return fmt.Errorf("%s: --%s is required: the member's data directory", CommandFetch, FlagDataDir)
	}
	has, err := HasData(dataDir)
	if err != nil {
		return fmt.Errorf("%s: %w", CommandFetch, err)
	}
	if has {
		if _, err := Fetch(ctx, nil, "", dataDir); err != nil {
			return fmt.Errorf("%s: %w", CommandFetch, err)
		}
		_, _ = fmt.Fprintf(out, "%s: %s already holds the member's data; wrote a placeholder snapshot, the backup is not read\n", CommandFetch, dataDir)
		return nil
	}
	switch {
	case id == "":
		return fmt.Errorf("%s: --%s is required", CommandFetch, FlagBackupID)
	case prefix == "":
		return fmt.Errorf("%s: --%s is required: <namespace>/<cluster> of the backed-up cluster", CommandFetch, FlagPrefix)
	case (storeDir == "") == (secretDir == ""):
		return fmt.Errorf("%s: pass exactly one of --%s and --%s", CommandFetch, FlagStoreDir, FlagS3SecretDir)
	}
	store, err := openStore(storeDir, secretDir)
	if err != nil {
		return fmt.Errorf("%s: %w", CommandFetch, err)
	}
	sub, err := backup.Sub(store, prefix)
	if err != nil {
		return fmt.Errorf("%s: --%s=%q: %w", CommandFetch, FlagPrefix, prefix, err)
	}
	res, err := Fetch(ctx, sub, id, dataDir)
	if err != nil {
		return fmt.Errorf("%s: %w", CommandFetch, err)
	}
	_, _ = fmt.Fprintf(out, "%s: fetched backup %s (%d bytes, sha256 %s, revision %s) into %s\n", CommandFetch,
		id, res.Manifest.Size, res.Manifest.SHA256, res.Manifest.Snapshot.ConsistencyPoint, SnapshotPath(dataDir))
	return nil
}

// openStore opens the store of a fetch-backup command line.
func openStore(storeDir, secretDir string) (backup.Store, error) {
	if storeDir != "" {
		st, err := fsstore.New(storeDir)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", FlagStoreDir, err)
		}
		return st, nil
	}
	sec, err := secretFromDir(secretDir)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", FlagS3SecretDir, err)
	}
	cfg, err := s3.ConfigFromSecret(sec)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", FlagS3SecretDir, err)
	}
	st, err := s3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", FlagS3SecretDir, err)
	}
	return st, nil
}

// secretFromDir reads a Secret mounted as a volume: one file per key. The
// volume's own entries (..data and friends) are skipped.
func secretFromDir(dir string) (*corev1.Secret, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the mounted Secret: %w", err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: dir}, Data: map[string][]byte{}}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := os.Stat(path) // keys are symlinks into ..data
		if err != nil {
			return nil, fmt.Errorf("reading the mounted Secret: %w", err)
		}
		if fi.IsDir() {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading the mounted Secret: %w", err)
		}
		sec.Data[e.Name()] = b
	}
	if len(sec.Data) == 0 {
		return nil, errors.New("the mounted Secret has no keys")
	}
	return sec, nil
}

// RunFinish is the finish-restore subcommand: it parses args
// (--data-dir=DIR, and --rebuild=TOKEN for a rebuild) and runs Finish, or
// FinishRebuild, writing one line about what it did to out.
func RunFinish(_ context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet(CommandFinish, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var dataDir, token string
	fs.StringVar(&dataDir, FlagDataDir, "", "the member's data directory (etcd's --data-dir)")
	fs.StringVar(&token, FlagRebuild, "", "the rebuild the restore is for: replace the member's data once")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%s: %w", CommandFinish, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", CommandFinish, fs.Args())
	}
	if dataDir == "" {
		return fmt.Errorf("%s: --%s is required: the member's data directory", CommandFinish, FlagDataDir)
	}
	finish := Finish
	if token != "" {
		finish = func(dataDir string) (bool, error) { return FinishRebuild(dataDir, token) }
	}
	installed, err := finish(dataDir)
	if err != nil {
		return fmt.Errorf("%s: %w", CommandFinish, err)
	}
	switch {
	case installed:
		_, _ = fmt.Fprintf(out, "%s: the restored member is in place in %s\n", CommandFinish, dataDir)
	case token != "":
		_, _ = fmt.Fprintf(out, "%s: %s already holds the member rebuilt by %s; discarded the placeholder restore\n", CommandFinish, dataDir, token)
	default:
		_, _ = fmt.Fprintf(out, "%s: %s already held the member's data; discarded the placeholder restore\n", CommandFinish, dataDir)
	}
	return nil
}

// RunStageMember is the stage-member-data subcommand: it parses args
// (--data-dir=DIR --rebuild=TOKEN) and runs StageMember, writing one line
// about what it did to out.
func RunStageMember(_ context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet(CommandStageMember, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var dataDir, token string
	fs.StringVar(&dataDir, FlagDataDir, "", "the member's data directory (etcd's --data-dir)")
	fs.StringVar(&token, FlagRebuild, "", "the rebuild the member's data is restored for")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%s: %w", CommandStageMember, err)
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%s: unexpected arguments %q", CommandStageMember, fs.Args())
	case dataDir == "":
		return fmt.Errorf("%s: --%s is required: the member's data directory", CommandStageMember, FlagDataDir)
	case token == "":
		return fmt.Errorf("%s: --%s is required: the rebuild's token", CommandStageMember, FlagRebuild)
	}
	staged, err := StageMember(dataDir, token)
	if err != nil {
		return fmt.Errorf("%s: %w", CommandStageMember, err)
	}
	switch staged {
	case StagedDatabase:
		_, _ = fmt.Fprintf(out, "%s: staged the member's database of %s for rebuild %s\n", CommandStageMember, dataDir, token)
	case StagedRebuilt:
		_, _ = fmt.Fprintf(out, "%s: %s already holds the member rebuilt by %s; wrote a placeholder snapshot\n", CommandStageMember, dataDir, token)
	case StagedBehindLog:
		_, _ = fmt.Fprintf(out, "%s: the database in %s lacks entries of its write-ahead log (etcd did not stop gracefully); wrote a placeholder snapshot: etcd applies them on this start, and the member's next restart moves its revision on\n",
			CommandStageMember, dataDir)
	}
	return nil
}

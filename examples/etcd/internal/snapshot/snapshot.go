// Package snapshot connects etcd to opkit's backup package: Snapshotter
// streams an etcd snapshot into a backup.Store, and Restorer loads a verified
// snapshot into a fresh cluster.
//
// # How a restore works
//
// Restorer is a logical restore: Stage writes the snapshot to a scratch file
// and checks etcd's own trailing SHA-256 (on top of the backup manifest's,
// which backup.Restore checks); Commit reads the newest version of every key
// from the snapshot's database and writes them, in transactions of at most
// BatchSize keys and BatchBytes bytes, to the cluster's seed member before the cluster grows and
// before clients are let in. Because it goes through the client API it needs
// no access to the member's volume and works for every etcd version the
// client speaks to, in-cluster and from a developer's machine alike.
//
// The footguns, all by design of a logical restore: revisions restart (the
// restored keys get new mod revisions, so watchers must not resume from a
// revision taken before the restore), the key history before the snapshot is
// not carried over, and keys attached to a lease are skipped (their lease
// would have expired; Restorer.Loaded reports how many).
//
// The operator uses Restorer only when it has no image to run in the seed
// pod (--restore-image); otherwise it restores physically, with etcdutl,
// keeping revisions and leases (package internal/seedrestore).
package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
)

// Engine and Format are recorded in the backup manifests this package writes
// and checked by Restorer.
const (
	Engine = "etcd"
	Format = "etcd-snapshot-db"
)

// BatchSize is the most keys Restorer writes per transaction; etcd's
// default --max-txn-ops is 128.
const BatchSize = 100

// BatchBytes bounds the keys and values of one transaction: etcd refuses a
// request above its --max-request-bytes (1.5 MiB by default) and its client
// sends at most 2 MiB. A single key and value larger than this goes alone
// (and etcd holds nothing larger than its limit).
const BatchBytes = 1 << 20

// Snapshotter takes etcd snapshots through a Client. It implements
// backup.Snapshotter.
type Snapshotter struct {
	Client etcdclient.Client
	// Extra is recorded in the manifest's Snapshot.Extra, for example to
	// find the backup again by what took it.
	Extra map[string]string
}

// Snapshot streams a snapshot into w and reports its revision and the
// version of the member that took it.
func (s Snapshotter) Snapshot(ctx context.Context, w io.Writer) (backup.Metadata, error) {
	info, err := s.Client.Snapshot(ctx, w)
	if err != nil {
		return backup.Metadata{}, err
	}
	return backup.Metadata{
		Engine:           Engine,
		EngineVersion:    info.Version,
		ConsistencyPoint: strconv.FormatInt(info.Revision, 10),
		Format:           Format,
		Extra:            maps.Clone(s.Extra),
	}, nil
}

// Revision returns the etcd revision recorded in m, 0 if there is none.
func Revision(m backup.Metadata) int64 {
	r, _ := strconv.ParseInt(m.ConsistencyPoint, 10, 64)
	return r
}

// LoadStats reports what a restore wrote.
type LoadStats struct {
	// Keys is the number of keys written.
	Keys int
	// SkippedLeased is the number of keys skipped because a lease held
	// them.
	SkippedLeased int
}

// Restorer loads a snapshot into the cluster reached by Client. It
// implements backup.Restorer; use it with backup.Restore.
type Restorer struct {
	// Client reaches the (empty) seed member.
	Client etcdclient.Client
	// Dir is the scratch directory for the staged snapshot; os.TempDir()
	// if empty.
	Dir string

	// Loaded is set by Commit.
	Loaded LoadStats

	staged string
}

// ErrWrongFormat is returned (wrapped) by Stage for a backup that is not an
// etcd snapshot.
var ErrWrongFormat = errors.New("backup is not an etcd snapshot")

// Stage writes the snapshot to a scratch file and checks etcd's trailing
// checksum. Nothing is written to etcd.
func (r *Restorer) Stage(ctx context.Context, in io.Reader, m backup.Manifest) error {
	path, err := StageFile(ctx, in, m, r.Dir, "etcd-restore-*.db", false)
	r.staged = path
	return err
}

// StageFile writes the etcd snapshot stream in, of the backup m describes,
// to a new file in dir (os.CreateTemp with pattern; os.TempDir() if dir is
// empty), verifies etcd's trailing SHA-256 while writing, and fsyncs it.
// With withChecksum the file is the stream as etcd wrote it, what `etcdutl
// snapshot restore` expects; without, the checksum is cut off, leaving the
// plain bbolt database that Load and ReadKeys read. A backup of another
// engine or format is refused with ErrWrongFormat. On any error the file is
// removed and path is empty.
func StageFile(ctx context.Context, in io.Reader, m backup.Manifest, dir, pattern string, withChecksum bool) (path string, err error) {
	if m.Snapshot.Engine != Engine || m.Snapshot.Format != Format {
		return "", fmt.Errorf("%w: engine %q, format %q", ErrWrongFormat, m.Snapshot.Engine, m.Snapshot.Format)
	}
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return "", fmt.Errorf("staging snapshot: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(f.Name())
			path = ""
		}
	}()
	cw := etcdclient.NewChecksumWriter(f)
	n, err := io.Copy(cw, readerCtx{ctx, in})
	if err == nil {
		err = cw.Verify()
	}
	if err == nil && !withChecksum {
		// Drop the checksum so that the file is a plain bbolt database.
		err = f.Truncate(n - 32)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("staging snapshot: %w", err)
	}
	return f.Name(), nil
}

// Commit writes the newest version of every key in the staged snapshot to
// the cluster and removes the scratch file.
func (r *Restorer) Commit(ctx context.Context, _ backup.Manifest) error {
	defer func() { _ = os.Remove(r.staged) }()
	stats, err := Load(ctx, r.staged, r.Client)
	r.Loaded = stats
	return err
}

// Abort removes the scratch file.
func (r *Restorer) Abort(context.Context, backup.Manifest) error {
	if r.staged == "" {
		return nil
	}
	if err := os.Remove(r.staged); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing staged snapshot: %w", err)
	}
	return nil
}

type readerCtx struct {
	ctx context.Context
	r   io.Reader
}

func (r readerCtx) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

// keyBucket is the bbolt bucket in which etcd keeps key revisions, keyed by
// revision (8 bytes main, '_', 8 bytes sub, and a 't' for tombstones).
var keyBucket = []byte("key")

const revBytesLen = 17

// ReadKeys returns the newest live version of every key in the etcd database
// file at path (a snapshot without its trailing checksum), in key order.
func ReadKeys(path string) ([]*mvccpb.KeyValue, error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("opening snapshot database: %w", err)
	}
	defer func() { _ = db.Close() }()
	latest := map[string]*mvccpb.KeyValue{}
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(keyBucket)
		if b == nil {
			return errors.New(`snapshot database has no "key" bucket`)
		}
		return b.ForEach(func(k, v []byte) error {
			kv := &mvccpb.KeyValue{}
			if err := proto.Unmarshal(v, kv); err != nil {
				return fmt.Errorf("decoding revision %x: %w", k, err)
			}
			if len(k) == revBytesLen+1 && k[revBytesLen] == 't' {
				delete(latest, string(kv.Key))
				return nil
			}
			latest[string(kv.Key)] = kv
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	out := make([]*mvccpb.KeyValue, 0, len(latest))
	for _, kv := range latest {
		out = append(out, kv)
	}
	slices.SortFunc(out, func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Key, b.Key) })
	return out, nil
}

// Load writes the keys of the database file at path to c in batches of at
// most BatchSize keys and BatchBytes bytes, skipping keys held by a lease.
func Load(ctx context.Context, path string, c etcdclient.Client) (LoadStats, error) {
	var stats LoadStats
	kvs, err := ReadKeys(path)
	if err != nil {
		return stats, err
	}
	batch := make([]etcdclient.KeyValue, 0, BatchSize)
	var batchBytes int
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := c.Put(ctx, batch); err != nil {
			return fmt.Errorf("restoring keys after %d written (a batch of %d keys, %d bytes): %w", stats.Keys, len(batch), batchBytes, err)
		}
		stats.Keys += len(batch)
		batch, batchBytes = batch[:0], 0
		return nil
	}
	for _, kv := range kvs {
		if kv.Lease != 0 {
			stats.SkippedLeased++
			continue
		}
		size := len(kv.Key) + len(kv.Value)
		if len(batch) == BatchSize || (len(batch) > 0 && batchBytes+size > BatchBytes) {
			if err := flush(); err != nil {
				return stats, err
			}
		}
		batch = append(batch, etcdclient.KeyValue{Key: kv.Key, Value: kv.Value})
		batchBytes += size
	}
	return stats, flush()
}

// Package snapshot connects etcd to opkit's backup package: Snapshotter
// streams an etcd snapshot into a backup.Store, and Restorer loads a verified
// snapshot into a fresh cluster.
//
// # How a restore works
//
// Restorer is a logical restore: Stage writes the snapshot to a scratch file
// (which needs free space for the whole snapshot: StageFile refuses to
// start without it) and checks etcd's own trailing SHA-256 (on top of the
// backup manifest's, which backup.Restore checks); Commit reads the newest
// version of every key from the snapshot's database and writes them, in
// transactions of at most BatchSize keys and BatchBytes bytes, to the
// cluster's seed member before the cluster grows and before clients are let
// in. Its memory grows with the number of keys (their names), never with
// their values (see Load). Because it goes through the client API it needs
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
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/encoding/protowire"

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
	// MinRevision, when set, refuses a snapshot older than this revision
	// with ErrBehind (backup.Backup then writes no manifest): a member
	// that has not applied every acknowledged write.
	MinRevision int64
}

// ErrBehind is returned (wrapped) for a snapshot older than
// Snapshotter.MinRevision.
var ErrBehind = errors.New("member behind the cluster")

// Snapshot streams a snapshot into w and reports its revision and the
// version of the member that took it.
func (s Snapshotter) Snapshot(ctx context.Context, w io.Writer) (backup.Metadata, error) {
	info, err := s.Client.Snapshot(ctx, w)
	if err != nil {
		return backup.Metadata{}, err
	}
	if info.Revision < s.MinRevision {
		return backup.Metadata{}, fmt.Errorf("%w: snapshot at revision %d, the cluster had reached %d", ErrBehind, info.Revision, s.MinRevision)
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
// plain bbolt database that Load reads. A backup of another engine or
// format is refused with ErrWrongFormat, and one larger than dir's free
// space with ErrNoSpace, before anything is written. On any error the file
// is removed and path is empty.
func StageFile(ctx context.Context, in io.Reader, m backup.Manifest, dir, pattern string, withChecksum bool) (path string, err error) {
	if m.Snapshot.Engine != Engine || m.Snapshot.Format != Format {
		return "", fmt.Errorf("%w: engine %q, format %q", ErrWrongFormat, m.Snapshot.Engine, m.Snapshot.Format)
	}
	if err := checkSpace(dir, m.Size); err != nil {
		return "", fmt.Errorf("staging snapshot: %w", err)
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
// revision (8 bytes main, '_', 8 bytes sub, and a 't' for tombstones), so
// that a cursor walks them in the order they were written.
var keyBucket = []byte("key")

const revBytesLen = 17

// Load writes the newest live version of every key in the etcd database
// file at path (a snapshot without its trailing checksum) to c, in batches
// of at most BatchSize keys and BatchBytes bytes, skipping keys held by a
// lease. Keys are written in the order of their newest revisions.
//
// Memory is bounded by the keys, not the values: a first walk over the
// revisions records, for every key, the revision of its newest version
// (etcd's own index holds as much); a second walk writes the versions so
// recorded, reading their values from the memory-mapped database as it
// goes, one batch at a time.
func Load(ctx context.Context, path string, c etcdclient.Client) (LoadStats, error) {
	var stats LoadStats
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		return stats, fmt.Errorf("opening snapshot database: %w", err)
	}
	defer func() { _ = db.Close() }()
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(keyBucket)
		if b == nil {
			return errors.New(`snapshot database has no "key" bucket`)
		}
		newest, err := newestRevisions(ctx, b)
		if err != nil {
			return err
		}
		return writeNewest(ctx, b, newest, c, &stats)
	})
	return stats, err
}

// newestRevisions maps every key that is live at the end of the bucket's
// history to the revision of its newest version.
func newestRevisions(ctx context.Context, b *bolt.Bucket) (map[string]string, error) {
	newest := map[string]string{}
	cur := b.Cursor()
	for rev, v := cur.First(); rev != nil; rev, v = cur.Next() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if len(rev) < revBytesLen {
			return nil, fmt.Errorf("revision %x: want at least %d bytes", rev, revBytesLen)
		}
		e, err := decodeKeyValue(v)
		if err != nil {
			return nil, fmt.Errorf("decoding revision %x: %w", rev, err)
		}
		if tombstone(rev) {
			delete(newest, string(e.key))
			continue
		}
		newest[string(e.key)] = string(rev[:revBytesLen])
	}
	return newest, nil
}

// writeNewest writes to c the versions newest names, walking the bucket in
// revision order.
func writeNewest(ctx context.Context, b *bolt.Bucket, newest map[string]string, c etcdclient.Client, stats *LoadStats) error {
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
		clear(batch)
		batch, batchBytes = batch[:0], 0
		return nil
	}
	cur := b.Cursor()
	for rev, v := cur.First(); rev != nil; rev, v = cur.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if tombstone(rev) {
			continue
		}
		e, err := decodeKeyValue(v)
		if err != nil {
			return fmt.Errorf("decoding revision %x: %w", rev, err)
		}
		if newest[string(e.key)] != string(rev[:revBytesLen]) {
			continue // an older version, or a key deleted later
		}
		if e.lease != 0 {
			stats.SkippedLeased++
			continue
		}
		size := len(e.key) + len(e.value)
		if len(batch) == BatchSize || (len(batch) > 0 && batchBytes+size > BatchBytes) {
			if err := flush(); err != nil {
				return err
			}
		}
		// Copied: the database's memory is only valid in this
		// transaction, and the batch must not pin it.
		batch = append(batch, etcdclient.KeyValue{Key: bytes.Clone(e.key), Value: bytes.Clone(e.value)})
		batchBytes += size
	}
	return flush()
}

// tombstone reports whether rev is the revision of a deletion.
func tombstone(rev []byte) bool { return len(rev) == revBytesLen+1 && rev[revBytesLen] == 't' }

// keyValue is the part of an mvccpb.KeyValue a restore reads. Its slices
// point into the encoded message.
type keyValue struct {
	key, value []byte
	lease      int64
}

// The field numbers of mvccpb.KeyValue that decodeKeyValue reads.
const (
	fieldKey   protowire.Number = 1
	fieldValue protowire.Number = 5
	fieldLease protowire.Number = 6
)

// decodeKeyValue reads the key, value and lease of an encoded
// mvccpb.KeyValue without copying the value (proto.Unmarshal would copy
// every version's value, which is what a restore must not hold).
func decodeKeyValue(b []byte) (keyValue, error) {
	var e keyValue
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return e, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case (num == fieldKey || num == fieldValue) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return e, protowire.ParseError(n)
			}
			if num == fieldKey {
				e.key = v
			} else {
				e.value = v
			}
			b = b[n:]
		case num == fieldLease && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return e, protowire.ParseError(n)
			}
			e.lease = int64(v)
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return e, protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return e, nil
}

package backup

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"time"
)

// cleanupTimeout bounds the best-effort deletes done after a failed backup.
const cleanupTimeout = 30 * time.Second

// writeBufferSize batches small writes of a Snapshotter; larger writes pass
// through without a copy.
const writeBufferSize = 256 << 10

// Option configures [Backup].
type Option func(*options)

type options struct {
	now   func() time.Time
	extra map[string]string
}

// WithExtra records extra in the manifest's Snapshot.Extra, over the
// Snapshotter's own entries of the same keys: tags such as the trigger or
// the owner's UID, without wrapping the Snapshotter (which would hide its
// Quiescer or Restorer).
func WithExtra(extra map[string]string) Option {
	return func(o *options) { o.extra = maps.Clone(extra) }
}

// WithClock makes [Backup] read the time from now instead of [time.Now]. It
// is meant for tests.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// Backup takes a snapshot with snap and stores it in store following the
// commit protocol: the data object first, then the manifest. It returns the
// manifest of the complete backup.
//
// If snap implements [Quiescer], the workload is quiesced before the snapshot
// starts and resumed once the data is stored (or the backup failed). A failed
// Resume fails the backup, so that a workload left paused does not go
// unnoticed; the data is discarded.
//
// On any error (snapshot error, store error, cancelled ctx) no manifest is
// written and the backup is not listed; Backup deletes what it stored on a
// best-effort basis and [Prune] removes anything left over.
func Backup(ctx context.Context, store Store, snap Snapshotter, opts ...Option) (Manifest, error) {
	o := options{now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	if store == nil {
		return Manifest{}, errors.New("backup: store is nil")
	}
	if snap == nil {
		return Manifest{}, errors.New("backup: snapshotter is nil")
	}
	start := o.now().UTC()
	id, err := newID(start)
	if err != nil {
		return Manifest{}, err
	}

	if q, ok := snap.(Quiescer); ok {
		if err := q.Quiesce(ctx); err != nil {
			return Manifest{}, fmt.Errorf("backup %s: quiesce: %w", id, err)
		}
		resumed := false
		resume := func() error {
			if resumed {
				return nil
			}
			resumed = true
			if err := q.Resume(context.WithoutCancel(ctx)); err != nil {
				return fmt.Errorf("backup %s: resume after quiesce: %w", id, err)
			}
			return nil
		}
		defer func() { _ = resume() }()
		return backupData(ctx, store, snap, id, start, o, resume)
	}
	return backupData(ctx, store, snap, id, start, o, func() error { return nil })
}

// backupData streams the snapshot into the data object, calls resume, and
// writes the manifest.
func backupData(ctx context.Context, store Store, snap Snapshotter, id string, start time.Time, o options, resume func() error) (Manifest, error) {
	dataKey := DataKeyFor(id)
	meta, size, sum, err := streamSnapshot(ctx, store, snap, dataKey)
	if rerr := resume(); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if len(o.extra) > 0 {
		// A copy: the map may be the Snapshotter's own.
		extra := maps.Clone(meta.Extra)
		if extra == nil {
			extra = map[string]string{}
		}
		maps.Copy(extra, o.extra)
		meta.Extra = extra
	}
	if err == nil && meta.Engine == "" {
		err = errors.New("snapshotter returned Metadata with an empty Engine; set Engine to the database engine's name, for example \"etcd\"")
	}
	if err != nil {
		cleanup(ctx, store, dataKey)
		return Manifest{}, fmt.Errorf("backup %s: %w", id, err)
	}

	m := Manifest{
		FormatVersion: ManifestFormatVersion,
		ID:            id,
		DataKey:       dataKey,
		Size:          size,
		SHA256:        sum,
		StartTime:     start,
		EndTime:       o.now().UTC(),
		Snapshot:      meta,
		OpkitVersion:  Version(),
	}
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		cleanup(ctx, store, dataKey)
		return Manifest{}, fmt.Errorf("backup %s: encoding manifest: %w", id, err)
	}
	if _, err := store.Put(ctx, ManifestKeyFor(id), bytes.NewReader(raw)); err != nil {
		// The manifest may or may not have been committed (a timeout after
		// the store committed it). Remove it first so the backup cannot be
		// listed without data, then the data.
		cleanup(ctx, store, ManifestKeyFor(id), dataKey)
		return Manifest{}, fmt.Errorf("backup %s: writing manifest (the commit point): %w", id, err)
	}
	return m, nil
}

// streamSnapshot runs the snapshotter in a goroutine writing into a pipe that
// store.Put reads from, hashing and counting on the writer side so that
// hashing overlaps with the store's writes.
func streamSnapshot(ctx context.Context, store Store, snap Snapshotter, key string) (Metadata, int64, string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	pr, pw := io.Pipe()
	hw := &hashWriter{w: pw, h: sha256.New()}
	bw := bufio.NewWriterSize(hw, writeBufferSize)

	type result struct {
		meta Metadata
		err  error
	}
	done := make(chan result, 1)
	go func() {
		meta, err := snap.Snapshot(ctx, bw)
		if err == nil {
			err = bw.Flush()
		}
		if err != nil {
			err = fmt.Errorf("snapshot: %w", err)
			pw.CloseWithError(err)
		} else {
			_ = pw.Close()
		}
		done <- result{meta, err}
	}()

	n, putErr := store.Put(ctx, key, pr)
	if putErr != nil {
		// Unblock and stop the snapshotter.
		pr.CloseWithError(fmt.Errorf("store: %w", putErr))
		cancel()
	}
	res := <-done
	switch {
	case res.err != nil && putErr != nil && errors.Is(putErr, res.err):
		// The snapshot failed first; the store saw its error.
		return Metadata{}, 0, "", res.err
	case res.err != nil && putErr != nil && errors.Is(res.err, putErr):
		// The store failed first; the snapshotter saw its error.
		return Metadata{}, 0, "", fmt.Errorf("storing data: %w", putErr)
	case res.err != nil && putErr != nil:
		return Metadata{}, 0, "", fmt.Errorf("storing data: %w (%w)", putErr, res.err)
	case res.err != nil:
		// The store must not have committed; the caller deletes anyway.
		return Metadata{}, 0, "", res.err
	case putErr != nil:
		return Metadata{}, 0, "", fmt.Errorf("storing data: %w", putErr)
	case n != hw.n:
		return Metadata{}, 0, "", fmt.Errorf("store reported %d bytes stored but %d were written", n, hw.n)
	}
	return res.meta, hw.n, hex.EncodeToString(hw.h.Sum(nil)), nil
}

// hashWriter hashes and counts what the store actually received.
type hashWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (w *hashWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	w.h.Write(p[:n])
	w.n += int64(n)
	return n, err
}

// cleanup deletes keys best-effort with a context that survives
// cancellation of ctx.
func cleanup(ctx context.Context, store Store, keys ...string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	for _, k := range keys {
		_ = store.Delete(ctx, k)
	}
}

func newID(t time.Time) (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("backup: generating ID: %w", err)
	}
	return t.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:]), nil
}

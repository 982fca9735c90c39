package backup_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/fsstore"
)

func newFS(t *testing.T) *fsstore.Store {
	t.Helper()
	s, err := fsstore.New(t.TempDir())
	if err != nil {
		t.Fatalf("fsstore.New: %v", err)
	}
	return s
}

// bytesSnap is a Snapshotter writing data in chunks of chunk bytes.
type bytesSnap struct {
	data  []byte
	chunk int
	meta  backup.Metadata
	err   error // returned after writing failAt bytes
	// failAt < 0: never fail.
	failAt int
}

func snapOf(data []byte) *bytesSnap {
	return &bytesSnap{data: data, chunk: 4096, failAt: -1, meta: backup.Metadata{Engine: "testdb", EngineVersion: "1.0", ConsistencyPoint: "rev-42"}}
}

func (s *bytesSnap) Snapshot(ctx context.Context, w io.Writer) (backup.Metadata, error) {
	for off := 0; off < len(s.data); off += s.chunk {
		if s.failAt >= 0 && off >= s.failAt {
			return backup.Metadata{}, s.err
		}
		if err := ctx.Err(); err != nil {
			return backup.Metadata{}, err
		}
		end := min(off+s.chunk, len(s.data))
		if _, err := w.Write(s.data[off:end]); err != nil {
			return backup.Metadata{}, err
		}
	}
	return s.meta, nil
}

// quiesceSnap records quiesce/resume calls around a bytesSnap.
type quiesceSnap struct {
	*bytesSnap
	mu         sync.Mutex
	calls      []string
	quiesceErr error
	resumeErr  error
	onSnapshot func() // called before the snapshot is written
}

func (q *quiesceSnap) record(s string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.calls = append(q.calls, s)
}

func (q *quiesceSnap) Quiesce(ctx context.Context) error {
	q.record("quiesce")
	return q.quiesceErr
}

func (q *quiesceSnap) Snapshot(ctx context.Context, w io.Writer) (backup.Metadata, error) {
	q.record("snapshot")
	if q.onSnapshot != nil {
		q.onSnapshot()
	}
	return q.bytesSnap.Snapshot(ctx, w)
}

func (q *quiesceSnap) Resume(ctx context.Context) error {
	if ctx.Err() != nil {
		q.record("resume-with-cancelled-ctx")
	}
	q.record("resume")
	return q.resumeErr
}

// memRestorer stages into memory.
type memRestorer struct {
	staged    []byte
	committed []byte
	aborted   bool
	readLimit int // if > 0 Stage reads at most this many bytes
	stageErr  error
	commitErr error
}

func (r *memRestorer) Stage(ctx context.Context, rd io.Reader, m backup.Manifest) error {
	if r.stageErr != nil {
		return r.stageErr
	}
	if r.readLimit > 0 {
		rd = io.LimitReader(rd, int64(r.readLimit))
	}
	b, err := io.ReadAll(rd)
	r.staged = b
	return err
}

func (r *memRestorer) Commit(ctx context.Context, m backup.Manifest) error {
	if r.commitErr != nil {
		return r.commitErr
	}
	r.committed = r.staged
	return nil
}

func (r *memRestorer) Abort(ctx context.Context, m backup.Manifest) error {
	r.aborted = true
	r.staged = nil
	return nil
}

// faultStore wraps a Store and injects errors.
type faultStore struct {
	backup.Store
	listErr    error
	putErr     map[string]error // by key suffix
	getErr     error
	deleteErr  error
	mu         sync.Mutex
	deleted    []string
	putCommits bool // Put the object even though putErr is returned
}

func (f *faultStore) List(ctx context.Context, prefix string) ([]backup.ObjectInfo, error) {
	if f.listErr != nil {
		return nil, f.listErr
	}
	return f.Store.List(ctx, prefix)
}

func (f *faultStore) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	for suffix, err := range f.putErr {
		if len(key) >= len(suffix) && key[len(key)-len(suffix):] == suffix {
			if f.putCommits {
				_, _ = f.Store.Put(ctx, key, r)
			}
			return 0, err
		}
	}
	return f.Store.Put(ctx, key, r)
}

func (f *faultStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if f.getErr != nil {
		return nil, f.getErr
	}
	return f.Store.Get(ctx, key)
}

func (f *faultStore) Delete(ctx context.Context, key string) error {
	f.mu.Lock()
	f.deleted = append(f.deleted, key)
	f.mu.Unlock()
	if f.deleteErr != nil {
		return f.deleteErr
	}
	return f.Store.Delete(ctx, key)
}

var errUnreachable = errors.New("dial tcp 127.0.0.1:1: connection refused")

// clock returns a WithClock option starting at t and advancing by step per
// call.
func clock(t time.Time, step time.Duration) backup.Option {
	var mu sync.Mutex
	return backup.WithClock(func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now := t
		t = t.Add(step)
		return now
	})
}

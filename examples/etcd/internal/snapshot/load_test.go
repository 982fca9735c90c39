package snapshot_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/snapshot"
)

// revision is one write in a synthetic etcd database: a put of Value (with
// Lease) or, with Delete, a tombstone of Key.
type revision struct {
	Key, Value string
	Lease      int64
	Delete     bool
}

// writeDB writes an etcd database file (the "key" bucket as etcd's mvcc
// keeps it: one entry per revision, keyed by 8 bytes of main revision, '_',
// 8 bytes of sub revision, and 't' for a tombstone) holding revs in order.
func writeDB(t *testing.T, revs []revision) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "snapshot.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		for i, r := range revs {
			k := make([]byte, 17, 18)
			binary.BigEndian.PutUint64(k, uint64(i+2))
			k[8] = '_'
			kv := &mvccpb.KeyValue{Key: []byte(r.Key), ModRevision: int64(i + 2), Lease: r.Lease}
			if r.Delete {
				k = append(k, 't')
			} else {
				kv.Value = []byte(r.Value)
			}
			v, err := proto.Marshal(kv)
			if err != nil {
				return err
			}
			if err := b.Put(k, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// sink is an etcd client whose Put keeps only what a test asks it to.
type sink struct {
	etcdclient.Client
	put func([]etcdclient.KeyValue)
}

func (s *sink) Put(_ context.Context, kvs []etcdclient.KeyValue) error {
	s.put(kvs)
	return nil
}

// TestLoadWritesTheNewestLiveVersions: every key's newest version is
// written once; deleted keys and keys held by a lease are not.
func TestLoadWritesTheNewestLiveVersions(t *testing.T) {
	path := writeDB(t, []revision{
		{Key: "a", Value: "a1"}, {Key: "b", Value: "b1"}, {Key: "a", Value: "a2"},
		{Key: "c", Value: "c1"}, {Key: "c", Delete: true},
		{Key: "d", Value: "d1", Lease: 7},
		{Key: "e", Value: "e1", Lease: 7}, {Key: "e", Value: "e2"},
		{Key: "f", Value: "f1"}, {Key: "f", Delete: true}, {Key: "f", Value: "f2"},
	})
	got := map[string]string{}
	writes := 0
	stats, err := snapshot.Load(t.Context(), path, &sink{put: func(kvs []etcdclient.KeyValue) {
		for _, kv := range kvs {
			got[string(kv.Key)] = string(kv.Value)
			writes++
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"a": "a2", "b": "b1", "e": "e2", "f": "f2"}, got); diff != "" {
		t.Errorf("keys written (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(snapshot.LoadStats{Keys: 4, SkippedLeased: 1}, stats); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	if writes != 4 {
		t.Errorf("%d keys written, want each of the 4 once", writes)
	}
}

// TestLoadHoldsOneBatchOfValues: a restore's memory does not grow with the
// size of the values in the snapshot (etcd databases go up to 8 GiB), only
// with its keys (as etcd's own index does) and one batch (BatchBytes). The
// live heap is measured after a collection at every write: the values of
// 64 MiB of keys (and as much again of older versions) must not be held.
// Before, every key's newest version was read into memory first.
func TestLoadHoldsOneBatchOfValues(t *testing.T) {
	const keys, valueSize = 256, 256 << 10
	var revs []revision
	for round := range 2 {
		for i := range keys {
			revs = append(revs, revision{Key: fmt.Sprintf("k%04d", i), Value: strings.Repeat(string(rune('a'+round)), valueSize)})
		}
	}
	path := writeDB(t, revs)
	liveHeap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := liveHeap()
	var peak uint64
	written := 0
	_, err := snapshot.Load(t.Context(), path, &sink{put: func(kvs []etcdclient.KeyValue) {
		written += len(kvs)
		if h := liveHeap(); h > base {
			peak = max(peak, h-base)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if written != keys {
		t.Fatalf("%d keys written, want %d", written, keys)
	}
	const limit = 4 * snapshot.BatchBytes
	if peak > limit {
		t.Errorf("live heap grew by %d MiB while loading %d MiB of values; want at most %d MiB (a batch and the key index)",
			peak>>20, keys*valueSize>>20, limit>>20)
	}
	t.Logf("live heap grew by at most %.1f MiB for %d MiB of values", float64(peak)/(1<<20), keys*valueSize>>20)
}

package seedrestore_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdtest"
	"github.com/opkit-dev/opkit/examples/etcd/internal/seedrestore"
	"github.com/opkit-dev/opkit/internal/repo"
)

// rebuildSteps runs the rebuild pod's three init containers on m's data
// directory for token, with the real etcdutl.
func rebuildSteps(t *testing.T, m *etcdtest.Member, token string) {
	t.Helper()
	if err := seedrestore.RunStageMember(t.Context(), []string{"--data-dir=" + m.DataDir, "--rebuild=" + token}, io.Discard); err != nil {
		t.Fatal(err)
	}
	bin, err := repo.Tool("etcdutl", "etcd")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, seedrestore.RebuildArgs(m.DataDir, m.Name, etcdtest.InitialCluster(m), "opkit-test", m.PeerURL)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
	}
	if err := seedrestore.RunFinish(t.Context(), []string{"--data-dir=" + m.DataDir, "--rebuild=" + token}, io.Discard); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationRebuildMovesRevisionsOn: a 3-member cluster on real etcd
// goes on writing without one member, then loses the other two. The
// survivor, started with --force-new-cluster, serves revisions the lost
// majority had already used for other writes. Restarted on its data
// through the rebuild's steps, it keeps every key it had and moves the
// revision past RevisionBump, older revisions compacted: a watcher of
// the lost majority re-lists. The steps run again (a restarted pod) leave
// the member as it is.
func TestIntegrationRebuildMovesRevisionsOn(t *testing.T) {
	ctx := t.Context()
	ms := etcdtest.StartTLSCluster(t, "q", 3, nil)
	w := etcdtest.RawClient(t, ms...)
	want := map[string]string{}
	put := func(c *clientv3.Client, k, v string) int64 {
		t.Helper()
		resp, err := c.Put(ctx, k, v)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	for i := range 20 {
		k := fmt.Sprintf("/app/%02d", i)
		want[k] = "before"
		put(w, k, "before")
	}
	survivor := ms[1]
	survivor.Stop()
	var seen int64
	for i := range 30 {
		seen = put(w, fmt.Sprintf("/lost/%02d", i), "acknowledged by the lost majority")
	}
	ms[2].Kill()
	ms[0].Stop()
	// The data of a member of the 3-member cluster is never restored.
	if _, err := seedrestore.StageMember(ms[0].DataDir, "rebuild-1"); err == nil || !strings.Contains(err.Error(), "records 3 members") {
		t.Errorf("StageMember of a member of 3: %v, want it refused", err)
	}

	survivor.ExtraArgs = []string{"--force-new-cluster"}
	survivor.Start(t, etcdtest.InitialCluster(ms...), "existing")
	etcdtest.WaitHealthy(t, survivor, 20*time.Second)
	forced := etcdtest.RawClient(t, survivor)
	if rev := put(forced, "/app/forced", "written"); rev > seen {
		t.Fatalf("the survivor wrote at revision %d, after the lost majority's %d: it did not lag", rev, seen)
	}
	want["/app/forced"] = "written"
	survivor.Stop()

	survivor.ExtraArgs = nil
	rebuildSteps(t, survivor, "rebuild-1")
	survivor.Start(t, etcdtest.InitialCluster(survivor), "existing")
	etcdtest.WaitHealthy(t, survivor, 20*time.Second)
	c := etcdtest.RawClient(t, survivor)
	if diff := cmp.Diff(want, etcdtest.Keys(t, c, "/app/")); diff != "" {
		t.Errorf("keys after the rebuild (-want +got):\n%s", diff)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if wr := <-c.Watch(wctx, "/lost/", clientv3.WithPrefix(), clientv3.WithRev(seen)); wr.CompactRevision == 0 {
		t.Errorf("a watch from revision %d, which the lost majority served: %+v, %v; want it compacted", seen, wr, wr.Err())
	}
	after := put(c, "/app/after", "rebuild")
	if after <= seedrestore.RevisionBump {
		t.Errorf("a write after the rebuild got revision %d, want past %d", after, seedrestore.RevisionBump)
	}

	survivor.Stop()
	rebuildSteps(t, survivor, "rebuild-1")
	survivor.Start(t, etcdtest.InitialCluster(survivor), "existing")
	etcdtest.WaitHealthy(t, survivor, 20*time.Second)
	resp, err := etcdtest.RawClient(t, survivor).Get(ctx, "/app/after")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || resp.Header.Revision != after {
		t.Errorf("after the steps ran again: %v at revision %d, want /app/after at revision %d", resp.Kvs, resp.Header.Revision, after)
	}
}

// TestRebuildStepsResume: the steps resume a FinishRebuild stopped after
// moving the member's data aside (the pod restarted) or after the swap
// (finish-restore retried alone), and do nothing to a member whose
// rebuild is recorded.
func TestRebuildStepsResume(t *testing.T) {
	write := func(t *testing.T, path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	read := func(t *testing.T, path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	t.Run("moved aside", func(t *testing.T) {
		dir := t.TempDir()
		writeDB(t, filepath.Join(dir, "restore/replaced-member/snap/db"))
		want := read(t, filepath.Join(dir, "restore/replaced-member/snap/db"))
		write(t, filepath.Join(dir, "restore/data/member/snap/db"), "restored")
		if _, err := seedrestore.StageMember(dir, "r"); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"member/snap/db", "restore/snapshot.db"}, files(t, dir)); diff != "" {
			t.Errorf("files (-want +got):\n%s", diff)
		}
		if got := read(t, seedrestore.SnapshotPath(dir)); got != want {
			t.Error("staged something else than the member's database")
		}
	})
	t.Run("recorded", func(t *testing.T) {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "member/snap/db"), "rebuilt data")
		write(t, filepath.Join(dir, seedrestore.RebuiltFile), "r\n")
		staged, err := seedrestore.StageMember(dir, "r")
		if err != nil || staged != seedrestore.StagedRebuilt {
			t.Fatalf("StageMember = %v, %v; want a placeholder", staged, err)
		}
		write(t, filepath.Join(dir, "restore/data/member/snap/db"), "placeholder restored")
		installed, err := seedrestore.FinishRebuild(dir, "r")
		if err != nil || installed {
			t.Fatalf("FinishRebuild = %v, %v; want nothing put in place", installed, err)
		}
		if diff := cmp.Diff([]string{"member/snap/db", seedrestore.RebuiltFile}, files(t, dir)); diff != "" {
			t.Errorf("files (-want +got):\n%s", diff)
		}
		if got := read(t, filepath.Join(dir, "member/snap/db")); got != "rebuilt data" {
			t.Errorf("member data %q, want it untouched", got)
		}
	})
	// The kubelet retries a failed init container alone: finish-restore
	// failed after the swap, before the record.
	t.Run("swapped, not recorded", func(t *testing.T) {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "member/snap/db"), "restored")
		write(t, filepath.Join(dir, "restore/replaced-member/snap/db"), "member data")
		installed, err := seedrestore.FinishRebuild(dir, "r")
		if err != nil || !installed {
			t.Fatalf("FinishRebuild = %v, %v; want the swap recorded", installed, err)
		}
		if diff := cmp.Diff([]string{"member/snap/db", seedrestore.RebuiltFile}, files(t, dir)); diff != "" {
			t.Errorf("files (-want +got):\n%s", diff)
		}
		if got := read(t, filepath.Join(dir, "member/snap/db")); got != "restored" {
			t.Errorf("member data %q, want the restored", got)
		}
	})
	t.Run("no member", func(t *testing.T) {
		if _, err := seedrestore.StageMember(t.TempDir(), "r"); err == nil {
			t.Error("StageMember of an empty directory succeeded")
		}
	})
}

// writeDB writes an etcd database at path that records consistent index
// 5, with no write-ahead log beside it.
func writeDB(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("meta"))
		if err != nil {
			return err
		}
		return b.Put([]byte("consistent_index"), binary.BigEndian.AppendUint64(nil, 5))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationRebuildAfterAKill: the survivor is killed right after
// writes acknowledged under --force-new-cluster, before its database
// took them (etcd commits it every 100 ms; a graceful stop commits it
// too). The steps then restore nothing: etcd starts on its data and
// applies its log, every write there. The next restart, graceful, moves
// the revision on with every write kept.
func TestIntegrationRebuildAfterAKill(t *testing.T) {
	ctx := t.Context()
	ms := etcdtest.StartTLSCluster(t, "k", 3, nil)
	survivor := ms[1]
	for _, m := range ms {
		m.Kill()
	}
	survivor.ExtraArgs = []string{"--force-new-cluster"}
	survivor.Start(t, etcdtest.InitialCluster(ms...), "existing")
	etcdtest.WaitHealthy(t, survivor, 20*time.Second)
	forced := etcdtest.RawClient(t, survivor)
	const n = 50
	for i := range n {
		if _, err := forced.Put(ctx, fmt.Sprintf("/ack/%02d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	survivor.Kill()
	survivor.ExtraArgs = nil
	count := func() (int64, int64) {
		t.Helper()
		survivor.Start(t, etcdtest.InitialCluster(survivor), "existing")
		etcdtest.WaitHealthy(t, survivor, 20*time.Second)
		resp, err := etcdtest.RawClient(t, survivor).Get(ctx, "/ack/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		survivor.Stop()
		return resp.Count, resp.Header.Revision
	}
	rebuildSteps(t, survivor, "r")
	if got, rev := count(); got != n || rev >= seedrestore.RevisionBump {
		t.Errorf("after the kill and the steps: %d of %d acknowledged keys at revision %d; want all, the revision not moved on yet", got, n, rev)
	}
	rebuildSteps(t, survivor, "r")
	if got, rev := count(); got != n || rev < seedrestore.RevisionBump {
		t.Errorf("after a graceful stop and the steps: %d of %d acknowledged keys at revision %d; want all, past %d", got, n, rev, seedrestore.RevisionBump)
	}
}

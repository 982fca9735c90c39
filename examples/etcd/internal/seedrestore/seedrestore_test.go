package seedrestore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/fsstore"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdtest"
	"github.com/opkit-dev/opkit/examples/etcd/internal/seedrestore"
	"github.com/opkit-dev/opkit/examples/etcd/internal/snapshot"
	"github.com/opkit-dev/opkit/internal/repo"
)

const prefix = "ns/src"

// fakeBackup takes a backup of a fake etcd holding a few keys into a PVC
// store at a new directory and returns the store's directory, the manifest
// and the backup's data bytes.
func fakeBackup(t *testing.T) (string, backup.Manifest, []byte) {
	t.Helper()
	f := etcdclient.NewFake()
	f.Start("src-0", "http://src-0:2380", "http://src-0:2379")
	ec, err := f.Factory().New(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var kvs []etcdclient.KeyValue
	for i := range 10 {
		kvs = append(kvs, etcdclient.KeyValue{Key: fmt.Appendf(nil, "/k%d", i), Value: fmt.Appendf(nil, "v%d", i)})
	}
	if err := ec.Put(t.Context(), kvs); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st, err := fsstore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := backup.Sub(st, prefix)
	if err != nil {
		t.Fatal(err)
	}
	m, err := backup.Backup(t.Context(), sub, snapshot.Snapshotter{Client: ec})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, prefix, m.DataKey))
	if err != nil {
		t.Fatal(err)
	}
	return dir, m, data
}

// files returns the names of the files below dir, relative to it.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func fetchArgs(dataDir, storeDir, id string) []string {
	return []string{"--data-dir=" + dataDir, "--backup-id=" + id, "--prefix=" + prefix, "--store-dir=" + storeDir}
}

// TestFetchWritesTheBackup: the snapshot staged is the backup's bytes,
// etcd's checksum included, and nothing else is left in the data
// directory.
func TestFetchWritesTheBackup(t *testing.T) {
	storeDir, m, data := fakeBackup(t)
	dataDir := t.TempDir()
	var out bytes.Buffer
	if err := seedrestore.RunFetch(t.Context(), fetchArgs(dataDir, storeDir, m.ID), &out); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(seedrestore.SnapshotPath(dataDir))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("staged snapshot: %d bytes, want the backup's %d bytes", len(got), len(data))
	}
	if diff := cmp.Diff([]string{"restore/snapshot.db"}, files(t, dataDir)); diff != "" {
		t.Errorf("files in the data directory (-want +got):\n%s", diff)
	}
	if !strings.Contains(out.String(), "fetched backup "+m.ID) {
		t.Errorf("output %q does not say what was fetched", out.String())
	}
}

// TestFetchRefusesBadBackups: a corrupt or missing backup is an error
// saying so, and leaves no snapshot, partial or whole, behind; nor does a
// leftover of an earlier attempt survive.
func TestFetchRefusesBadBackups(t *testing.T) {
	tests := []struct {
		name string
		// breakIt damages the store and returns the backup ID to fetch.
		breakIt func(t *testing.T, storeDir string, m backup.Manifest) string
		check   func(error) bool
		wantMsg string
	}{
		{"corrupt data", func(t *testing.T, storeDir string, m backup.Manifest) string {
			etcdtest.Corrupt(t, filepath.Join(storeDir, prefix, m.DataKey))
			return m.ID
		}, func(err error) bool { var ve *backup.VerificationError; return errors.As(err, &ve) }, "is corrupt"},
		{"truncated data", func(t *testing.T, storeDir string, m backup.Manifest) string {
			path := filepath.Join(storeDir, prefix, m.DataKey)
			if err := os.Truncate(path, m.Size/2); err != nil {
				t.Fatal(err)
			}
			return m.ID
		}, func(err error) bool { return errors.Is(err, backup.ErrSizeMismatch) }, "is corrupt"},
		{"missing backup", func(*testing.T, string, backup.Manifest) string { return "20060102T150405Z-0123abcd" },
			func(err error) bool { return errors.Is(err, backup.ErrNotFound) }, "20060102T150405Z-0123abcd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			storeDir, m, _ := fakeBackup(t)
			id := tt.breakIt(t, storeDir, m)
			dataDir := t.TempDir()
			// A leftover of an earlier, interrupted attempt.
			if err := os.MkdirAll(filepath.Join(dataDir, seedrestore.StagingDir), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(seedrestore.SnapshotPath(dataDir), []byte("partial"), 0o600); err != nil {
				t.Fatal(err)
			}
			err := seedrestore.RunFetch(t.Context(), fetchArgs(dataDir, storeDir, id), io.Discard)
			if err == nil || !tt.check(err) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("RunFetch: %v, want an error mentioning %q", err, tt.wantMsg)
			}
			if got := files(t, dataDir); len(got) != 0 {
				t.Errorf("files left in the data directory: %q", got)
			}
		})
	}
}

// TestFetchFlags: missing or conflicting flags are errors naming the flag.
func TestFetchFlags(t *testing.T) {
	dataDir := t.TempDir()
	tests := []struct {
		name    string
		args    []string
		wantMsg string
	}{
		{"no data dir", []string{"--backup-id=x", "--prefix=a/b", "--store-dir=/x"}, "--data-dir is required"},
		{"no backup ID", []string{"--data-dir=" + dataDir, "--prefix=a/b", "--store-dir=/x"}, "--backup-id is required"},
		{"no prefix", []string{"--data-dir=" + dataDir, "--backup-id=x", "--store-dir=/x"}, "--prefix is required"},
		{"no store", []string{"--data-dir=" + dataDir, "--backup-id=x", "--prefix=a/b"}, "exactly one of --store-dir and --s3-secret-dir"},
		{"two stores", []string{"--data-dir=" + dataDir, "--backup-id=x", "--prefix=a/b", "--store-dir=/x", "--s3-secret-dir=/y"},
			"exactly one of --store-dir and --s3-secret-dir"},
		{"store not mounted", []string{"--data-dir=" + dataDir, "--backup-id=x", "--prefix=a/b", "--store-dir=" + filepath.Join(dataDir, "nope")},
			"--store-dir"},
		{"unknown flag", []string{"--data-dir=" + dataDir, "--bogus=1"}, "bogus"},
		{"S3 Secret without keys", []string{"--data-dir=" + dataDir, "--backup-id=x", "--prefix=a/b", "--s3-secret-dir=" + t.TempDir()},
			"--s3-secret-dir: the mounted Secret has no keys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := seedrestore.RunFetch(t.Context(), tt.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("RunFetch(%q) = %v, want an error mentioning %q", tt.args, err, tt.wantMsg)
			}
		})
	}
}

// TestRestartedPodKeepsItsData: once the member has data, fetch-backup
// reads no backup (its store may be gone) and writes a placeholder, and
// finish-restore leaves the member alone and removes the staging
// directory.
func TestRestartedPodKeepsItsData(t *testing.T) {
	dataDir := t.TempDir()
	member := filepath.Join(dataDir, seedrestore.MemberDir, "snap")
	if err := os.MkdirAll(member, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(member, "db"), []byte("member data"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A leftover etcdutl output of an earlier run.
	if err := os.MkdirAll(filepath.Join(seedrestore.RestoreDataDir(dataDir), "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	args := fetchArgs(dataDir, filepath.Join(dataDir, "store-is-gone"), "gone")
	var out bytes.Buffer
	if err := seedrestore.RunFetch(t.Context(), args, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "placeholder") {
		t.Errorf("output %q does not mention the placeholder", out.String())
	}
	if diff := cmp.Diff([]string{"member/snap/db", "restore/snapshot.db"}, files(t, dataDir)); diff != "" {
		t.Errorf("files after fetch-backup (-want +got):\n%s", diff)
	}
	if err := seedrestore.RunFinish(t.Context(), []string{"--data-dir=" + dataDir}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"member/snap/db"}, files(t, dataDir)); diff != "" {
		t.Errorf("files after finish-restore (-want +got):\n%s", diff)
	}
	if b, _ := os.ReadFile(filepath.Join(member, "db")); string(b) != "member data" {
		t.Errorf("member data changed to %q", b)
	}
}

// TestFinishWithoutRestore: finish-restore without etcdutl's output fails
// and says what is missing.
func TestFinishWithoutRestore(t *testing.T) {
	err := seedrestore.RunFinish(t.Context(), []string{"--data-dir=" + t.TempDir()}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "did etcdutl snapshot restore run?") {
		t.Errorf("RunFinish = %v, want an error saying etcdutl's output is missing", err)
	}
}

// etcdutl runs bin/etcdutl snapshot restore into dataDir's staging
// directory with m's identity, as the seed pod's restore init container
// does.
func etcdutl(t *testing.T, dataDir string, m *etcdtest.Member) {
	t.Helper()
	bin, err := repo.Tool("etcdutl", "etcd")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, seedrestore.RestoreArgs(dataDir, m.Name, etcdtest.InitialCluster(m), "opkit-test", m.PeerURL, true)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
	}
}

// TestIntegrationPhysicalRestore runs the three steps of the seed pod
// with a backup of a real etcd member and the real etcdutl (`make etcd`):
// the member started on the result holds the keys at the backup's
// revision moved on by RevisionBump, older revisions compacted. Then it runs them again, as a restarted pod does: the member
// keeps its data, including a key written after the restore. It does so
// for a plain cluster and for one with TLS (https peer URLs in etcdutl's
// flags, the member serving TLS on the restored data).
func TestIntegrationPhysicalRestore(t *testing.T) {
	t.Run("plain", func(t *testing.T) { physicalRestore(t, nil) })
	t.Run("tls", func(t *testing.T) { physicalRestore(t, etcdtest.NewCerts(t)) })
}

func physicalRestore(t *testing.T, certs *etcdtest.Certs) {
	ctx := t.Context()
	src := etcdtest.StartTLSCluster(t, "src", 1, certs)
	raw := etcdtest.RawClient(t, src[0])
	want := map[string]string{}
	var rev int64
	for i := range 30 {
		k, v := fmt.Sprintf("/app/%02d", i), fmt.Sprintf("value %d", i)
		resp, err := raw.Put(ctx, k, v)
		if err != nil {
			t.Fatal(err)
		}
		want[k] = v
		rev = resp.Header.Revision
	}
	storeDir := t.TempDir()
	st, err := fsstore.New(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := backup.Sub(st, prefix)
	if err != nil {
		t.Fatal(err)
	}
	m, err := backup.Backup(ctx, sub, snapshot.Snapshotter{Client: etcdtest.Client(t, src[0])})
	if err != nil {
		t.Fatal(err)
	}

	seed := etcdtest.NewTLSMember(t, "seed-0", certs)
	steps := func() {
		t.Helper()
		if err := seedrestore.RunFetch(ctx, fetchArgs(seed.DataDir, storeDir, m.ID), io.Discard); err != nil {
			t.Fatal(err)
		}
		etcdutl(t, seed.DataDir, seed)
		if err := seedrestore.RunFinish(ctx, []string{"--data-dir=" + seed.DataDir}, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(seed.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	steps()
	seed.Start(t, etcdtest.InitialCluster(seed), "new")
	etcdtest.WaitHealthy(t, seed, 20*time.Second)
	c := etcdtest.RawClient(t, seed)
	assertKeys(t, c, want, rev+seedrestore.RevisionBump)
	// A watcher of the cluster before, at a revision the backup had not
	// reached, is told to re-list instead of waiting for it.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w := <-c.Watch(wctx, "/app/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	if w.CompactRevision == 0 {
		t.Errorf("a watch from revision %d after the restore: %+v, %v; want it compacted", rev+1, w, w.Err())
	}

	resp, err := c.Put(ctx, "/after", "restore")
	if err != nil {
		t.Fatal(err)
	}
	want["/after"] = "restore"
	seed.Stop()
	// The backup is gone: a restarted pod must not need it.
	if err := os.RemoveAll(storeDir); err != nil {
		t.Fatal(err)
	}
	steps()
	seed.Start(t, etcdtest.InitialCluster(seed), "new")
	etcdtest.WaitHealthy(t, seed, 20*time.Second)
	assertKeys(t, etcdtest.RawClient(t, seed), want, resp.Header.Revision)
}

// assertKeys checks the keys and the revision of the member c reaches.
func assertKeys(t *testing.T, c *clientv3.Client, want map[string]string, rev int64) {
	t.Helper()
	resp, err := c.Get(t.Context(), "/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("keys of the restored member (-want +got):\n%s", diff)
	}
	if resp.Header.Revision != rev {
		t.Errorf("revision of the restored member: %d, want %d", resp.Header.Revision, rev)
	}
}

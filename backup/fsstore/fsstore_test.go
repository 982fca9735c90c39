package fsstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/fsstore"
	"github.com/opkit-dev/opkit/backup/storetest"
)

func newStore(t *testing.T, opts ...fsstore.Option) *fsstore.Store {
	t.Helper()
	s, err := fsstore.New(t.TempDir(), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name   string
		direct bool
	}{
		{"direct I/O", true},
		{"buffered", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) backup.Store { return newStore(t, fsstore.WithDirectIO(tc.direct)) },
				storetest.Options{LargeSize: 20<<20 + 7})
		})
	}
}

// Sizes around the direct-I/O chunk (4 MiB) and alignment (4 KiB): every
// byte arrives, whichever part went through O_DIRECT and whichever through
// the page cache.
func TestPutSizes(t *testing.T) {
	const chunk, align = 4 << 20, 4096
	for _, size := range []int64{0, 1, align - 1, align, align + 1, chunk - 1, chunk, chunk + 1, 2*chunk + align, 3*chunk - 17} {
		for _, direct := range []bool{true, false} {
			s := newStore(t, fsstore.WithDirectIO(direct))
			n, err := s.Put(t.Context(), "obj", storetest.NewGenerator(size))
			if err != nil {
				t.Fatalf("size %d, direct %v: Put: %v", size, direct, err)
			}
			if n != size {
				t.Errorf("size %d, direct %v: Put returned %d", size, direct, n)
			}
			got, err := os.ReadFile(filepath.Join(s.Root(), "obj"))
			if err != nil {
				t.Fatal(err)
			}
			want, err := io.ReadAll(storetest.NewGenerator(size))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("size %d, direct %v: stored %d bytes that differ from the %d written", size, direct, len(got), len(want))
			}
		}
	}
}

func TestNew(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, root, wantErr string
	}{
		{"ok", dir, ""},
		{"empty", "", "root is empty"},
		{"missing", filepath.Join(dir, "missing"), "mount the backup volume"},
		{"file", file, "is not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := fsstore.New(tc.root)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("New(%q): %v", tc.root, err)
				}
				if s.Root() != tc.root {
					t.Errorf("Root() = %q, want %q", s.Root(), tc.root)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("New(%q) error = %v, want it to contain %q", tc.root, err, tc.wantErr)
			}
		})
	}
}

func TestUnmountedRootIsUnavailable(t *testing.T) {
	root := filepath.Join(t.TempDir(), "vol")
	if err := os.Mkdir(root, 0o750); err != nil {
		t.Fatal(err)
	}
	s, err := fsstore.New(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(root); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	_, putErr := s.Put(ctx, "k", strings.NewReader("x"))
	_, getErr := s.Get(ctx, "k")
	_, listErr := s.List(ctx, "")
	delErr := s.Delete(ctx, "k")
	_, cleanErr := s.CleanIncomplete(ctx, "", time.Now())
	for name, err := range map[string]error{"Put": putErr, "Get": getErr, "List": listErr, "Delete": delErr, "CleanIncomplete": cleanErr} {
		if !errors.Is(err, backup.ErrStoreUnavailable) {
			t.Errorf("%s on a removed root: error = %v, want ErrStoreUnavailable", name, err)
		}
	}
}

func TestCleanIncomplete(t *testing.T) {
	s := newStore(t)
	old := time.Now().Add(-48 * time.Hour)
	mk := func(rel string, mod time.Time) string {
		t.Helper()
		p := filepath.Join(s.Root(), filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mod, mod); err != nil {
			t.Fatal(err)
		}
		return p
	}
	oldTmp := mk("a/.x.data.tmp-123", old)
	newTmp := mk("a/.y.data.tmp-456", time.Now())
	otherPrefix := mk("b/.z.data.tmp-789", old)
	hidden := mk("a/.keep", old)
	storetest.MustPut(t, s, "a/real.data", []byte("real"))

	if diff := cmp.Diff([]string{"a/real.data"}, storetest.Keys(t, s, "")); diff != "" {
		t.Errorf("List hides temporary files (-want +got):\n%s", diff)
	}
	n, err := s.CleanIncomplete(t.Context(), "a/", time.Now().Add(-time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("CleanIncomplete = %d, %v; want 1, nil", n, err)
	}
	for p, want := range map[string]bool{oldTmp: false, newTmp: true, otherPrefix: true, hidden: true} {
		_, err := os.Stat(p)
		if got := err == nil; got != want {
			t.Errorf("%s exists = %v, want %v", p, got, want)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.CleanIncomplete(ctx, "", time.Now()); !errors.Is(err, context.Canceled) {
		t.Errorf("CleanIncomplete with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestPutCreatesPrivateFiles(t *testing.T) {
	s := newStore(t)
	storetest.MustPut(t, s, "d/secret.data", []byte("s3cr3t"))
	fi, err := os.Stat(filepath.Join(s.Root(), "d", "secret.data"))
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("mode = %v, want 0600", perm)
	}
	if err := os.Mkdir(filepath.Join(s.Root(), "dir.data"), 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(t.Context(), "dir.data"); !errors.Is(err, backup.ErrNotFound) {
		t.Errorf("Get of a directory = %v, want ErrNotFound", err)
	}
}

func TestErrors(t *testing.T) {
	s := newStore(t)
	storetest.MustPut(t, s, "file", []byte("x"))
	storetest.MustPut(t, s, "dir/inner", []byte("x"))
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tc := range []struct {
		name    string
		run     func() error
		wantErr string
	}{
		{"put below a file", func() error { _, err := s.Put(t.Context(), "file/sub", strings.NewReader("x")); return err }, "not a directory"},
		{"put over a directory", func() error { _, err := s.Put(t.Context(), "dir", strings.NewReader("x")); return err }, "rename"},
		{"put cancelled", func() error { _, err := s.Put(cancelled, "k", strings.NewReader("x")); return err }, "context canceled"},
		{"get cancelled", func() error { _, err := s.Get(cancelled, "file"); return err }, "context canceled"},
		{"list cancelled", func() error { _, err := s.List(cancelled, ""); return err }, "context canceled"},
		{"delete cancelled", func() error { return s.Delete(cancelled, "file") }, "context canceled"},
		{"delete a non-empty directory", func() error { return s.Delete(t.Context(), "dir") }, "directory not empty"},
		{"get below a file", func() error { _, err := s.Get(t.Context(), "file/sub"); return err }, "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
	// Failed Puts leave no temporary files behind.
	n, err := s.CleanIncomplete(t.Context(), "", time.Now().Add(time.Hour))
	if err != nil || n != 0 {
		t.Errorf("CleanIncomplete after failed Puts = %d, %v; want 0 leftovers", n, err)
	}
}

const benchSize = 64 << 20

// BenchmarkPlainCopy is the baseline for BenchmarkBackup: io.Copy of the same
// synthetic snapshot into a file, with fsync.
func BenchmarkPlainCopy(b *testing.B) {
	dir := b.TempDir()
	b.SetBytes(benchSize)
	for b.Loop() {
		f, err := os.Create(filepath.Join(dir, "plain"))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(f, storetest.NewGenerator(benchSize)); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBackup backs up a 64 MiB synthetic snapshot into an fsstore. The
// 1 GiB measurement with peak RSS is backup/s3/internal/benchprog.
func BenchmarkBackup(b *testing.B) {
	s, err := fsstore.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(benchSize)
	for b.Loop() {
		m, err := backup.Backup(b.Context(), s, backup.SnapshotterFunc(func(ctx context.Context, w io.Writer) (backup.Metadata, error) {
			_, err := storetest.NewGenerator(benchSize).WriteTo(w)
			return backup.Metadata{Engine: "synthetic"}, err
		}))
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Delete(b.Context(), m.DataKey); err != nil {
			b.Fatal(err)
		}
	}
}

func TestListSkipsHiddenAndSpecialFiles(t *testing.T) {
	s := newStore(t)
	storetest.MustPut(t, s, "a/b.data", []byte("x"))
	for _, p := range []string{".snapshot/x.data", "a/.hidden/y.data"} {
		full := filepath.Join(s.Root(), filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("b.data", filepath.Join(s.Root(), "a", "link.data")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a/b.data"}, storetest.Keys(t, s, "")); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if n, err := s.CleanIncomplete(t.Context(), "zzz/", time.Now().Add(time.Hour)); err != nil || n != 0 {
		t.Errorf("CleanIncomplete(other prefix) = %d, %v", n, err)
	}
}

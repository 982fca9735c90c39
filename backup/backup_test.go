package backup_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/storetest"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func TestBackupRestoreRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		size  int64
		chunk int
	}{
		{"empty", 0, 1},
		{"tiny writes", 5000, 1},
		{"medium", 300 << 10, 4096},
		{"large writes", 3 << 20, 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newFS(t)
			data := storetest.Pattern(tc.size)
			snap := snapOf(data)
			snap.chunk = tc.chunk
			m, err := backup.Backup(t.Context(), store, snap, clock(t0, time.Minute))
			if err != nil {
				t.Fatalf("Backup: %v", err)
			}
			want := backup.Manifest{
				FormatVersion: backup.ManifestFormatVersion,
				ID:            m.ID,
				DataKey:       m.ID + ".data",
				Size:          tc.size,
				SHA256:        sum(data),
				StartTime:     t0,
				EndTime:       t0.Add(time.Minute),
				Snapshot:      snap.meta,
				OpkitVersion:  "(devel)",
			}
			if diff := cmp.Diff(want, m); diff != "" {
				t.Errorf("manifest (-want +got):\n%s", diff)
			}
			if err := backup.CheckID(m.ID); err != nil || !strings.HasPrefix(m.ID, "20260301T120000Z-") {
				t.Errorf("ID %q: %v; want 20260301T120000Z-<hex>", m.ID, err)
			}
			list, err := backup.List(t.Context(), store)
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			if diff := cmp.Diff([]backup.Manifest{want}, list); diff != "" {
				t.Errorf("List (-want +got):\n%s", diff)
			}
			r := &memRestorer{}
			got, err := backup.Restore(t.Context(), store, m.ID, r)
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Restore manifest (-want +got):\n%s", diff)
			}
			if !bytes.Equal(r.committed, data) || r.aborted {
				t.Errorf("restorer committed %d bytes (aborted=%v), want the %d backed up", len(r.committed), r.aborted, len(data))
			}
		})
	}
}

func TestBackupQuiesce(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name      string
		snap      func() *quiesceSnap
		cancelled bool
		wantErr   string
		wantCalls []string
	}{
		{
			name:      "success",
			snap:      func() *quiesceSnap { return &quiesceSnap{bytesSnap: snapOf([]byte("data"))} },
			wantCalls: []string{"quiesce", "snapshot", "resume"},
		},
		{
			name:      "quiesce fails",
			snap:      func() *quiesceSnap { return &quiesceSnap{bytesSnap: snapOf([]byte("data")), quiesceErr: boom} },
			wantErr:   "quiesce: boom",
			wantCalls: []string{"quiesce"},
		},
		{
			name:      "resume fails",
			snap:      func() *quiesceSnap { return &quiesceSnap{bytesSnap: snapOf([]byte("data")), resumeErr: boom} },
			wantErr:   "resume after quiesce: boom",
			wantCalls: []string{"quiesce", "snapshot", "resume"},
		},
		{
			name: "snapshot fails",
			snap: func() *quiesceSnap {
				s := snapOf(storetest.Pattern(1 << 20))
				s.failAt, s.err = 4096, boom
				return &quiesceSnap{bytesSnap: s}
			},
			wantErr:   "snapshot: boom",
			wantCalls: []string{"quiesce", "snapshot", "resume"},
		},
		{
			name:      "context cancelled still resumes",
			snap:      func() *quiesceSnap { return &quiesceSnap{bytesSnap: snapOf([]byte("data"))} },
			cancelled: true,
			wantErr:   "context canceled",
			wantCalls: []string{"quiesce", "snapshot", "resume"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newFS(t)
			snap := tc.snap()
			ctx := t.Context()
			if tc.cancelled {
				c, cancel := context.WithCancel(ctx)
				ctx = c
				snap.onSnapshot = cancel
			}
			_, err := backup.Backup(ctx, store, snap)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("Backup: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Backup error = %v, want it to contain %q", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantCalls, snap.calls); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			if tc.wantErr != "" {
				if keys := storetest.Keys(t, store, ""); len(keys) != 0 {
					t.Errorf("store after failed backup holds %v, want nothing", keys)
				}
			}
		})
	}
}

func TestBackupFailuresLeaveNothingListed(t *testing.T) {
	boom := errors.New("boom")
	big := storetest.Pattern(4 << 20)
	for _, tc := range []struct {
		name    string
		store   func(t *testing.T) backup.Store
		snap    func(cancel func()) backup.Snapshotter
		wantErr string
		wantIs  error
	}{
		{
			name: "snapshot fails mid-stream (writer killed)",
			snap: func(func()) backup.Snapshotter {
				s := snapOf(big)
				s.failAt, s.err = 2<<20, boom
				return s
			},
			wantErr: "snapshot: boom",
			wantIs:  boom,
		},
		{
			name: "context cancelled mid-upload",
			snap: func(cancel func()) backup.Snapshotter {
				var written int
				return backup.SnapshotterFunc(func(ctx context.Context, w io.Writer) (backup.Metadata, error) {
					for written < len(big) {
						n, err := w.Write(big[written : written+64<<10])
						written += n
						if err != nil {
							return backup.Metadata{}, err
						}
						if written == 1<<20 {
							cancel()
						}
					}
					return backup.Metadata{Engine: "x"}, nil
				})
			},
			wantErr: "context canceled",
			wantIs:  context.Canceled,
		},
		{
			name: "data put fails",
			store: func(t *testing.T) backup.Store {
				return &faultStore{Store: newFS(t), putErr: map[string]error{".data": errUnreachable}}
			},
			snap:    func(func()) backup.Snapshotter { return snapOf(big) },
			wantErr: "storing data",
			wantIs:  errUnreachable,
		},
		{
			name: "manifest put fails after committing",
			store: func(t *testing.T) backup.Store {
				return &faultStore{Store: newFS(t), putErr: map[string]error{".manifest.json": errUnreachable}, putCommits: true}
			},
			snap:    func(func()) backup.Snapshotter { return snapOf(big) },
			wantErr: "writing manifest",
			wantIs:  errUnreachable,
		},
		{
			name: "snapshotter returns no engine",
			snap: func(func()) backup.Snapshotter {
				s := snapOf([]byte("x"))
				s.meta = backup.Metadata{}
				return s
			},
			wantErr: "empty Engine",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var store backup.Store
			if tc.store != nil {
				store = tc.store(t)
			} else {
				store = newFS(t)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			_, err := backup.Backup(ctx, store, tc.snap(cancel))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Backup error = %v, want it to contain %q", err, tc.wantErr)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("Backup error = %v, want errors.Is %v", err, tc.wantIs)
			}
			list, err := backup.List(t.Context(), store)
			if err != nil || len(list) != 0 {
				t.Errorf("List after failed backup = %v, %v; want nothing", list, err)
			}
			if keys := storetest.Keys(t, store, ""); len(keys) != 0 {
				t.Errorf("store after failed backup holds %v, want nothing", keys)
			}
		})
	}
}

func TestBackupArgs(t *testing.T) {
	store := newFS(t)
	if _, err := backup.Backup(t.Context(), nil, snapOf(nil)); err == nil {
		t.Error("Backup(nil store) succeeded")
	}
	if _, err := backup.Backup(t.Context(), store, nil); err == nil {
		t.Error("Backup(nil snapshotter) succeeded")
	}
	if _, err := backup.Restore(t.Context(), store, "20260301T120000Z-00000000", nil); err == nil {
		t.Error("Restore(nil restorer) succeeded")
	}
	if _, err := backup.Verify(t.Context(), nil, "20260301T120000Z-00000000"); err == nil {
		t.Error("Verify(nil store) succeeded")
	}
}

// corrupt rewrites the data file of backup id in an fsstore with f.
func corrupt(t *testing.T, root, id string, f func([]byte) []byte) {
	t.Helper()
	p := filepath.Join(root, backup.DataKeyFor(id))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, f(b), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestRestoreRefusesCorruptData(t *testing.T) {
	data := storetest.Pattern(1 << 20)
	for _, tc := range []struct {
		name      string
		mutate    func([]byte) []byte
		restorer  *memRestorer
		wantIs    error
		wantField string
	}{
		{"flipped byte", func(b []byte) []byte { b[len(b)/2] ^= 1; return b }, &memRestorer{}, backup.ErrChecksumMismatch, "sha256"},
		{"flipped last byte, restorer reads only the start", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, &memRestorer{readLimit: 1000}, backup.ErrChecksumMismatch, "sha256"},
		{"truncated", func(b []byte) []byte { return b[:len(b)-10] }, &memRestorer{}, backup.ErrSizeMismatch, "size"},
		{"extended", func(b []byte) []byte { return append(b, "junk"...) }, &memRestorer{}, backup.ErrSizeMismatch, "size"},
		{"truncated, restorer reads only the start", func(b []byte) []byte { return b[:len(b)-10] }, &memRestorer{readLimit: 10}, backup.ErrSizeMismatch, "size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newFS(t)
			m, err := backup.Backup(t.Context(), store, snapOf(data))
			if err != nil {
				t.Fatal(err)
			}
			corrupt(t, store.Root(), m.ID, tc.mutate)
			_, err = backup.Restore(t.Context(), store, m.ID, tc.restorer)
			var verr *backup.VerificationError
			if !errors.As(err, &verr) || !errors.Is(err, tc.wantIs) {
				t.Fatalf("Restore error = %v, want a *VerificationError matching %v", err, tc.wantIs)
			}
			if verr.Field != tc.wantField || verr.ID != m.ID {
				t.Errorf("VerificationError = %+v, want Field %q and ID %q", verr, tc.wantField, m.ID)
			}
			if !strings.Contains(err.Error(), "is corrupt") {
				t.Errorf("error %q does not say the backup is corrupt", err)
			}
			if tc.restorer.committed != nil || !tc.restorer.aborted {
				t.Errorf("restorer committed=%d bytes aborted=%v, want nothing committed and aborted", len(tc.restorer.committed), tc.restorer.aborted)
			}
			if _, err := backup.Verify(t.Context(), store, m.ID); !errors.Is(err, tc.wantIs) {
				t.Errorf("Verify error = %v, want %v", err, tc.wantIs)
			}
		})
	}
}

// swallowingRestorer ignores read errors and returns nil from Stage.
type swallowingRestorer struct{ memRestorer }

func (s *swallowingRestorer) Stage(ctx context.Context, r io.Reader, m backup.Manifest) error {
	_, _ = io.ReadAll(r)
	return nil
}

func TestRestoreFailures(t *testing.T) {
	boom := errors.New("boom")
	store := newFS(t)
	m, err := backup.Backup(t.Context(), store, snapOf([]byte("hello")))
	if err != nil {
		t.Fatal(err)
	}
	incomplete, err := backup.Backup(t.Context(), store, snapOf([]byte("world")))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(t.Context(), backup.ManifestKeyFor(incomplete.ID)); err != nil {
		t.Fatal(err)
	}
	badJSON, err := backup.Backup(t.Context(), store, snapOf([]byte("json")))
	if err != nil {
		t.Fatal(err)
	}
	storetest.MustPut(t, store, backup.ManifestKeyFor(badJSON.ID), []byte("{not json"))
	swallowed, err := backup.Backup(t.Context(), store, snapOf([]byte("swallow")))
	if err != nil {
		t.Fatal(err)
	}
	corrupt(t, store.Root(), swallowed.ID, func(b []byte) []byte { b[0] ^= 1; return b })

	for _, tc := range []struct {
		name     string
		store    backup.Store
		id       string
		restorer backup.Restorer
		wantErr  string
		wantIs   error
		aborted  bool
	}{
		{name: "missing", store: store, id: "20200101T000000Z-00000000", restorer: &memRestorer{}, wantErr: "no manifest", wantIs: backup.ErrNotFound},
		{name: "incomplete", store: store, id: incomplete.ID, restorer: &memRestorer{}, wantErr: "incomplete", wantIs: backup.ErrNotFound},
		{name: "invalid id", store: store, id: "../etc", restorer: &memRestorer{}, wantIs: backup.ErrInvalidKey},
		{name: "bad manifest", store: store, id: badJSON.ID, restorer: &memRestorer{}, wantErr: "unusable manifest"},
		{name: "store unreachable", store: &faultStore{Store: store, getErr: errUnreachable}, id: m.ID, restorer: &memRestorer{}, wantIs: errUnreachable},
		{name: "stage fails", store: store, id: m.ID, restorer: &memRestorer{stageErr: boom}, wantIs: boom, aborted: true},
		{name: "commit fails", store: store, id: m.ID, restorer: &memRestorer{commitErr: boom}, wantIs: boom},
		{name: "stage swallows corruption", store: store, id: swallowed.ID, restorer: &swallowingRestorer{}, wantIs: backup.ErrChecksumMismatch, aborted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := backup.Restore(t.Context(), tc.store, tc.id, tc.restorer)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || (tc.wantIs != nil && !errors.Is(err, tc.wantIs)) {
				t.Fatalf("Restore error = %v, want it to contain %q and match %v", err, tc.wantErr, tc.wantIs)
			}
			var aborted bool
			switch r := tc.restorer.(type) {
			case *memRestorer:
				aborted = r.aborted
			case *swallowingRestorer:
				aborted = r.aborted
			}
			if aborted != tc.aborted {
				t.Errorf("aborted = %v, want %v", aborted, tc.aborted)
			}
		})
	}
}

func TestListAndLatest(t *testing.T) {
	store := newFS(t)
	if _, err := backup.Latest(t.Context(), store); !errors.Is(err, backup.ErrNoBackup) {
		t.Fatalf("Latest on an empty store = %v, want ErrNoBackup", err)
	}
	var ids []string
	for i := range 3 {
		m, err := backup.Backup(t.Context(), store, snapOf([]byte{byte(i)}), clock(t0.Add(time.Duration(i)*time.Hour), time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ids = append([]string{m.ID}, ids...)
	}
	// Objects that are not backups, and a data object without manifest.
	storetest.MustPut(t, store, "README.txt", []byte("hi"))
	storetest.MustPut(t, store, "not-an-id.data", []byte("hi"))
	storetest.MustPut(t, store, "20990101T000000Z-00000000.data", []byte("orphan"))
	// A manifest whose data has a different size.
	m, err := backup.Backup(t.Context(), store, snapOf([]byte("abc")), clock(t0.Add(10*time.Hour), time.Second))
	if err != nil {
		t.Fatal(err)
	}
	storetest.MustPut(t, store, m.DataKey, []byte("abcd"))

	list, err := backup.List(t.Context(), store)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range list {
		got = append(got, m.ID)
	}
	if diff := cmp.Diff(ids, got); diff != "" {
		t.Errorf("List IDs, newest first (-want +got):\n%s", diff)
	}
	latest, err := backup.Latest(t.Context(), store)
	if err != nil || latest.ID != ids[0] {
		t.Errorf("Latest = %s, %v; want %s", latest.ID, err, ids[0])
	}
	bad := &faultStore{Store: store, listErr: errUnreachable}
	if _, err := backup.List(t.Context(), bad); !errors.Is(err, errUnreachable) {
		t.Errorf("List on an unreachable store = %v, want it to wrap the store error", err)
	}
	if _, err := backup.Latest(t.Context(), bad); !errors.Is(err, errUnreachable) {
		t.Errorf("Latest on an unreachable store = %v, want it to wrap the store error", err)
	}
	if _, err := backup.List(t.Context(), &faultStore{Store: store, getErr: errUnreachable}); !errors.Is(err, errUnreachable) {
		t.Errorf("List when manifests cannot be read = %v, want the store error", err)
	}
}

func TestSub(t *testing.T) {
	root := newFS(t)
	a, err := backup.Sub(root, "ns/a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := backup.Sub(root, "ns/b")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := a.(backup.IncompleteCleaner); !ok {
		t.Error("Sub of an IncompleteCleaner is not an IncompleteCleaner")
	}
	ma, err := backup.Backup(t.Context(), a, snapOf([]byte("a")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backup.Backup(t.Context(), b, snapOf([]byte("b"))); err != nil {
		t.Fatal(err)
	}
	list, err := backup.List(t.Context(), a)
	if err != nil || len(list) != 1 || list[0].ID != ma.ID {
		t.Fatalf("List(a) = %v, %v; want only %s", list, err, ma.ID)
	}
	if diff := cmp.Diff([]string{"ns/a/" + ma.DataKey, "ns/a/" + backup.ManifestKeyFor(ma.ID)}, storetest.Keys(t, root, "ns/a/")); diff != "" {
		t.Errorf("keys under ns/a/ (-want +got):\n%s", diff)
	}
	r := &memRestorer{}
	if _, err := backup.Restore(t.Context(), a, ma.ID, r); err != nil || string(r.committed) != "a" {
		t.Errorf("Restore via Sub = %q, %v", r.committed, err)
	}
	if n, err := a.(backup.IncompleteCleaner).CleanIncomplete(t.Context(), "", time.Now()); err != nil || n != 0 {
		t.Errorf("CleanIncomplete = %d, %v", n, err)
	}
	for _, k := range []string{"../x", ""} {
		if _, err := a.Put(t.Context(), k, strings.NewReader("x")); !errors.Is(err, backup.ErrInvalidKey) {
			t.Errorf("Sub Put(%q) = %v, want ErrInvalidKey", k, err)
		}
		if _, err := a.Get(t.Context(), k); !errors.Is(err, backup.ErrInvalidKey) {
			t.Errorf("Sub Get(%q) = %v, want ErrInvalidKey", k, err)
		}
		if err := a.Delete(t.Context(), k); !errors.Is(err, backup.ErrInvalidKey) {
			t.Errorf("Sub Delete(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
	if _, err := backup.Sub(root, "/bad"); !errors.Is(err, backup.ErrInvalidKey) {
		t.Errorf("Sub(/bad) = %v, want ErrInvalidKey", err)
	}
	if _, err := backup.Sub(nil, "x"); err == nil {
		t.Error("Sub(nil) succeeded")
	}
	plain, err := backup.Sub(&faultStore{Store: root, listErr: errUnreachable}, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := plain.(backup.IncompleteCleaner); ok {
		t.Error("Sub of a plain Store is an IncompleteCleaner")
	}
	if _, err := plain.List(t.Context(), ""); !errors.Is(err, errUnreachable) {
		t.Errorf("Sub List = %v, want the store error", err)
	}
}

func TestCheckKey(t *testing.T) {
	long := strings.Repeat("a", 513)
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"a", true}, {"a/b.c_d-e", true}, {"20260301T120000Z-0123abcd.data", true},
		{"", false}, {long, false}, {"/a", false}, {"a/", false}, {"a//b", false},
		{".a", false}, {"a/..", false}, {"a b", false}, {"ä", false}, {`a\b`, false},
	} {
		if err := backup.CheckKey(tc.key); (err == nil) != tc.ok {
			t.Errorf("CheckKey(%.20q) = %v, want ok=%v", tc.key, err, tc.ok)
		}
	}
}

func TestVersion(t *testing.T) {
	if v := backup.Version(); v == "" {
		t.Error("Version() is empty")
	}
}

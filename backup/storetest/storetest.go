package storetest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/opkit-dev/opkit/backup"
)

// Options tunes the suite to a store.
type Options struct {
	// LargeSize is the size of the object used to exercise multi-chunk
	// uploads (for S3: larger than one part).
	LargeSize int64
}

// Run runs the conformance suite against an empty store made by newStore.
func Run(t *testing.T, newStore func(t *testing.T) backup.Store, o Options) {
	t.Helper()
	if o.LargeSize == 0 {
		o.LargeSize = 3 << 20
	}
	t.Run("RoundTrip", func(t *testing.T) {
		s := newStore(t)
		for _, tc := range []struct {
			name string
			key  string
			size int64
		}{
			{"empty", "empty.data", 0},
			{"small", "small.data", 1000},
			{"nested", "a/b/c.data", 42},
			{"large", "large.data", o.LargeSize},
		} {
			t.Run(tc.name, func(t *testing.T) {
				want := Pattern(tc.size)
				n, err := s.Put(t.Context(), tc.key, bytes.NewReader(want))
				if err != nil {
					t.Fatalf("Put(%q): %v", tc.key, err)
				}
				if n != tc.size {
					t.Errorf("Put(%q) = %d bytes, want %d", tc.key, n, tc.size)
				}
				got := MustGet(t, s, tc.key)
				if !bytes.Equal(got, want) {
					t.Errorf("Get(%q) returned %d bytes that differ from the %d put", tc.key, len(got), len(want))
				}
			})
		}
	})

	t.Run("Overwrite", func(t *testing.T) {
		s := newStore(t)
		MustPut(t, s, "k.data", []byte("first"))
		MustPut(t, s, "k.data", []byte("second"))
		if diff := cmp.Diff("second", string(MustGet(t, s, "k.data"))); diff != "" {
			t.Errorf("Get after overwrite (-want +got):\n%s", diff)
		}
	})

	t.Run("GetMissing", func(t *testing.T) {
		s := newStore(t)
		_, err := s.Get(t.Context(), "missing.data")
		if !errors.Is(err, backup.ErrNotFound) {
			t.Errorf("Get(missing) error = %v, want ErrNotFound", err)
		}
	})

	t.Run("ListPrefixAndDelete", func(t *testing.T) {
		s := newStore(t)
		for _, k := range []string{"x/1.data", "x/2.data", "y/1.data", "top.data"} {
			MustPut(t, s, k, []byte(k))
		}
		for _, tc := range []struct {
			prefix string
			want   []string
		}{
			{"", []string{"top.data", "x/1.data", "x/2.data", "y/1.data"}},
			{"x/", []string{"x/1.data", "x/2.data"}},
			{"x/1", []string{"x/1.data"}},
			{"t", []string{"top.data"}},
			{"none/", nil},
		} {
			if diff := cmp.Diff(tc.want, Keys(t, s, tc.prefix)); diff != "" {
				t.Errorf("List(%q) keys (-want +got):\n%s", tc.prefix, diff)
			}
		}
		objs, err := s.List(t.Context(), "top")
		if err != nil || len(objs) != 1 || objs[0].Size != int64(len("top.data")) || objs[0].ModTime.IsZero() {
			t.Errorf("List(top) = %+v, %v; want one object of size %d with a ModTime", objs, err, len("top.data"))
		}
		if err := s.Delete(t.Context(), "x/1.data"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if err := s.Delete(t.Context(), "x/1.data"); err != nil {
			t.Errorf("Delete of a missing key = %v, want nil", err)
		}
		if diff := cmp.Diff([]string{"x/2.data"}, Keys(t, s, "x/")); diff != "" {
			t.Errorf("List(x/) after Delete (-want +got):\n%s", diff)
		}
	})

	t.Run("FailedPutLeavesNothing", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			run  func(t *testing.T, s backup.Store) error
		}{
			{"ReaderError", func(t *testing.T, s backup.Store) error {
				r := &FailingReader{R: bytes.NewReader(Pattern(o.LargeSize)), FailAfter: o.LargeSize / 2, Err: errors.New("writer killed")}
				_, err := s.Put(t.Context(), "fail.data", r)
				return err
			}},
			{"ContextCancelled", func(t *testing.T, s backup.Store) error {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				r := &FailingReader{R: bytes.NewReader(Pattern(o.LargeSize)), FailAfter: o.LargeSize / 2, OnFail: cancel}
				_, err := s.Put(ctx, "fail.data", r)
				return err
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := newStore(t)
				if err := tc.run(t, s); err == nil {
					t.Fatal("Put succeeded, want an error")
				}
				if keys := Keys(t, s, ""); len(keys) != 0 {
					t.Errorf("List after failed Put = %v, want nothing", keys)
				}
				if _, err := s.Get(t.Context(), "fail.data"); !errors.Is(err, backup.ErrNotFound) {
					t.Errorf("Get after failed Put error = %v, want ErrNotFound", err)
				}
			})
		}
	})

	t.Run("InvalidKeys", func(t *testing.T) {
		s := newStore(t)
		for _, k := range []string{"", "/abs", "a//b", "../up", ".hidden", "a/./b", "sp ace", "trailing/"} {
			if _, err := s.Put(t.Context(), k, strings.NewReader("x")); !errors.Is(err, backup.ErrInvalidKey) {
				t.Errorf("Put(%q) error = %v, want ErrInvalidKey", k, err)
			}
			if _, err := s.Get(t.Context(), k); !errors.Is(err, backup.ErrInvalidKey) {
				t.Errorf("Get(%q) error = %v, want ErrInvalidKey", k, err)
			}
			if err := s.Delete(t.Context(), k); !errors.Is(err, backup.ErrInvalidKey) {
				t.Errorf("Delete(%q) error = %v, want ErrInvalidKey", k, err)
			}
		}
	})
}

// Pattern returns n deterministic, non-repeating-looking bytes.
func Pattern(n int64) []byte {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// MustPut stores data under key or fails the test.
func MustPut(t *testing.T, s backup.Store, key string, data []byte) {
	t.Helper()
	if _, err := s.Put(t.Context(), key, bytes.NewReader(data)); err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
}

// MustGet reads the object under key or fails the test.
func MustGet(t *testing.T, s backup.Store, key string) []byte {
	t.Helper()
	rc, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	defer func() { _ = rc.Close() }()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading %q: %v", key, err)
	}
	return b
}

// Keys returns the sorted keys listed under prefix or fails the test.
func Keys(t *testing.T, s backup.Store, prefix string) []string {
	t.Helper()
	objs, err := s.List(t.Context(), prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	slices.Sort(keys)
	return keys
}

// FailingReader reads from R and, after FailAfter bytes, calls OnFail (if
// set) and returns Err (or context.Canceled if Err is nil).
type FailingReader struct {
	R         io.Reader
	FailAfter int64
	Err       error
	OnFail    func()
	n         int64
}

// Read implements io.Reader.
func (f *FailingReader) Read(p []byte) (int, error) {
	if f.n >= f.FailAfter {
		if f.OnFail != nil {
			f.OnFail()
		}
		if f.Err != nil {
			return 0, f.Err
		}
		return 0, context.Canceled
	}
	if rem := f.FailAfter - f.n; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := f.R.Read(p)
	f.n += int64(n)
	return n, err
}

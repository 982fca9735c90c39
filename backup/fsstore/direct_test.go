package fsstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/opkit-dev/opkit/backup/storetest"
)

// A filesystem that refuses O_DIRECT, when it is enabled or on the first
// direct write, still gets every byte through buffered writes.
func TestDirectIOFallback(t *testing.T) {
	size := int64(2*directChunk + 12345)
	want := make([]byte, size)
	if _, err := storetest.NewGenerator(size).Read(want); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		set  func(f *os.File, on bool) error
	}{
		{"fcntl refuses O_DIRECT", func(*os.File, bool) error { return syscall.EINVAL }},
		{"writes refuse O_DIRECT", func(f *os.File, on bool) error {
			// Accept the flag, but make the first direct write fail
			// with EINVAL before writing anything, as such a filesystem
			// does.
			if on {
				if err := setDirect(f, true); err != nil {
					return err
				}
				// An unaligned file offset makes the next O_DIRECT
				// write fail with EINVAL, before any byte is written.
				if _, err := f.Seek(1, 0); err != nil {
					return err
				}
				return nil
			}
			if _, err := f.Seek(0, 0); err != nil {
				return err
			}
			return setDirect(f, false)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := setDirectFn
			setDirectFn = tc.set
			t.Cleanup(func() { setDirectFn = old })
			s, err := New(t.TempDir(), WithDirectIO(true))
			if err != nil {
				t.Fatal(err)
			}
			n, err := s.Put(t.Context(), "obj", bytes.NewReader(want))
			if err != nil {
				t.Fatalf("Put: %v", err)
			}
			if n != size {
				t.Errorf("Put returned %d, want %d", n, size)
			}
			got, err := os.ReadFile(filepath.Join(s.Root(), "obj"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("stored %d bytes that differ from the %d written", len(got), len(want))
			}
		})
	}
}

// A write error other than a refusal of O_DIRECT fails the copy instead of
// being retried buffered.
func TestDirectIOWriteError(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "ro")
	if err != nil {
		t.Fatal(err)
	}
	name := f.Name()
	_ = f.Close()
	ro, err := os.Open(name) // read-only: writes fail with EBADF
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	old := setDirectFn
	setDirectFn = func(*os.File, bool) error { return nil }
	t.Cleanup(func() { setDirectFn = old })
	_, err = copyDirect(t.Context(), ro, storetest.NewGenerator(3*directChunk))
	if !errors.Is(err, syscall.EBADF) {
		t.Errorf("copyDirect to a read-only file: error %v, want EBADF", err)
	}
}

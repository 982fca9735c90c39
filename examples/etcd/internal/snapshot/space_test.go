package snapshot

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/opkit-dev/opkit/backup"
)

// TestStageFileNeedsRoomForTheSnapshot: staging a snapshot larger than the
// free space of its directory fails at once, naming what it needs, before
// anything is written (etcd databases go up to 8 GiB: a half-written
// scratch file would fill the volume, or the node's disk, first).
func TestStageFileNeedsRoomForTheSnapshot(t *testing.T) {
	dir := t.TempDir()
	orig := freeBytes
	t.Cleanup(func() { freeBytes = orig })
	freeBytes = func(string) (uint64, error) { return 1000, nil }
	m := backup.Manifest{Size: 5000, Snapshot: backup.Metadata{Engine: Engine, Format: Format}}
	path, err := StageFile(t.Context(), bytes.NewReader(make([]byte, 5000)), m, dir, "stage-*", false)
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("StageFile = %q, %v; want ErrNoSpace", path, err)
	}
	t.Log(err)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("files left in the scratch directory: %v", entries)
	}
}

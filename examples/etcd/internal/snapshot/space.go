package snapshot

import (
	"errors"
	"fmt"
	"os"
)

// ErrNoSpace is returned (wrapped) by StageFile when the directory it
// stages into has less free space than the snapshot it is asked to stage.
var ErrNoSpace = errors.New("not enough free space to stage the snapshot")

// freeBytes returns the space available to this process in the file
// system holding dir; a variable for tests.
var freeBytes = availableBytes

// checkSpace returns an ErrNoSpace error when dir (os.TempDir() if empty)
// cannot hold size bytes. A file system whose free space cannot be read is
// not checked.
func checkSpace(dir string, size int64) error {
	if dir == "" {
		dir = os.TempDir()
	}
	free, err := freeBytes(dir)
	if err != nil || size <= 0 || uint64(size) <= free {
		return nil //nolint:nilerr // unknown free space: let the write tell
	}
	return fmt.Errorf("%w: it is %d bytes and %s has %d bytes free; give the restore a larger volume there",
		ErrNoSpace, size, dir, free)
}

//go:build linux && (386 || amd64 || arm64 || loong64 || riscv64 || s390x)

package fsstore

import (
	"os"
	"syscall"
)

// syncFileRangeWrite is SYNC_FILE_RANGE_WRITE: start writeback of dirty
// pages in the range without waiting for it.
const syncFileRangeWrite = 2

// startWriteback asks the kernel to start writing [off, off+n) of f to disk
// so that the final fsync has little left to do. It is advisory: errors are
// ignored because the fsync that follows reports any real failure.
func startWriteback(f *os.File, off, n int64) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = syscall.SyncFileRange(int(fd), off, n, syncFileRangeWrite)
	})
}

//go:build !(linux && (386 || amd64 || arm64 || loong64 || riscv64 || s390x))

package fsstore

import "os"

// startWriteback is a no-op where sync_file_range is not available.
func startWriteback(*os.File, int64, int64) {}

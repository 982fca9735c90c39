package localcluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestLockCreateExcludes: while one creation holds the lock, another waits
// (and gives up with its context); after release it gets the lock.
func TestLockCreateExcludes(t *testing.T) {
	unlock, err := LockCreate(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := LockCreate(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second LockCreate while held: %v, want context.DeadlineExceeded", err)
	}
	unlock()
	unlock2, err := LockCreate(t.Context())
	if err != nil {
		t.Fatalf("LockCreate after release: %v", err)
	}
	unlock2()
}

func TestEnvironNamesMissingBinaries(t *testing.T) {
	_, err := Environ(t.TempDir())
	if !errors.Is(err, ErrMissingBinary) || !strings.Contains(err.Error(), "kube-apiserver") || !strings.Contains(err.Error(), "make cluster-tools") {
		t.Fatalf("Environ on an empty dir: %v, want ErrMissingBinary naming kube-apiserver and `make cluster-tools`", err)
	}
}

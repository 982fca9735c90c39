package etcdclient

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestRefusal checks which errors of the etcd client are reported as
// refusals (a retry gets the same answer) and that the original error is
// kept either way.
func TestRefusal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		err     error
		refused bool
	}{
		{"gRPC status permission denied", rpctypes.ErrGRPCPermissionDenied, true},
		{"client error permission denied", rpctypes.ErrPermissionDenied, true},
		{"wrapped gRPC status user empty", fmt.Errorf("reading: %w", rpctypes.ErrGRPCUserEmpty), true},
		{"wrapped client error invalid auth token", fmt.Errorf("reading: %w", rpctypes.ErrInvalidAuthToken), true},
		{"not capable", rpctypes.ErrGRPCNotCapable, true},
		{"no leader", rpctypes.ErrGRPCNoLeader, false},
		{"timeout", rpctypes.ErrTimeout, false},
		{"deadline", context.DeadlineExceeded, false},
		{"connection refused", errors.New("dial tcp 127.0.0.1:2379: connect: connection refused"), false},
		{"checksum", fmt.Errorf("%w: short stream", ErrSnapshotChecksum), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := refusal(tt.err)
			if errors.Is(got, ErrRefused) != tt.refused {
				t.Errorf("refusal(%v) = %v; wraps ErrRefused = %v, want %v", tt.err, got, !tt.refused, tt.refused)
			}
			if !errors.Is(got, tt.err) {
				t.Errorf("refusal(%v) = %v, which no longer wraps the original error", tt.err, got)
			}
		})
	}
}

package realnode

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestWaitFor(t *testing.T) {
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name      string
		ctx       context.Context
		failures  int
		err       error
		wantErr   string
		wantCalls int
	}{
		{name: "at once", ctx: t.Context(), wantCalls: 1},
		{name: "after two failures", ctx: t.Context(), failures: 2, err: errors.New("not yet"), wantCalls: 3},
		{name: "timeout names the last error", ctx: t.Context(), failures: 1000, err: errors.New("not yet"), wantErr: "waiting 500ms for the thing: not yet"},
		{name: "an exited error ends it at once", ctx: t.Context(), failures: 1000, err: &exitedError{errors.New("it died")}, wantErr: "waiting for the thing: it died", wantCalls: 1},
		{name: "canceled", ctx: canceled, failures: 1000, err: errors.New("not yet"), wantErr: "waiting for the thing: context canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			err := waitFor(tt.ctx, 500*time.Millisecond, "the thing", func() error {
				calls++
				if calls <= tt.failures {
					return tt.err
				}
				return nil
			})
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("waitFor = %v, want error %q", err, tt.wantErr)
			}
			if tt.wantCalls != 0 && calls != tt.wantCalls {
				t.Errorf("check ran %d times, want %d", calls, tt.wantCalls)
			}
		})
	}
}

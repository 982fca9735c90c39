package harness

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Admitted calls call until it returns nil, for up to a minute, while its
// error says "failed calling webhook": after a rollout or a killed
// operator pod the webhook Service's endpoints may still name a pod that
// is gone. Any other error fails t at once, as does the minute running out.
func Admitted(ctx context.Context, t *testing.T, what string, call func(context.Context) error) {
	t.Helper()
	var other error
	WaitFor(ctx, t, "the webhook to admit "+what, time.Minute, 500*time.Millisecond, func(ctx context.Context) (bool, string) {
		err := call(ctx)
		if err != nil && !strings.Contains(err.Error(), "failed calling webhook") {
			other = err
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if other != nil {
		t.Fatalf("%s: %v", what, other)
	}
}

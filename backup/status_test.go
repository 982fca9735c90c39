package backup_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/backup"
)

func TestStatusRecords(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { mt := metav1.NewTime(t0.Add(d)); return &mt }
	ok := backup.Manifest{ID: "20261121T100000Z-0000beef", Size: 42, SHA256: "ab12", EndTime: t0.Add(time.Minute)}

	var s backup.Status
	s.RecordAttempt(t0)
	s.RecordFailure(t0.Add(time.Second), errors.New("store unavailable"))
	s.RecordAttempt(t0.Add(time.Hour))
	s.RecordFailure(t0.Add(time.Hour+time.Second), nil)
	want := backup.Status{
		LastScheduleTime:    at(time.Hour),
		LastFailureTime:     at(time.Hour + time.Second),
		LastFailureMessage:  "unknown error",
		ConsecutiveFailures: 2,
	}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("after two failures (-want +got):\n%s", diff)
	}

	// A success resets the count but keeps the failure's time and message
	// for history.
	s.RecordSuccess(ok)
	want.LastSuccessfulTime = at(time.Minute)
	want.LastBackupID, want.LastSizeBytes, want.LastSHA256 = ok.ID, ok.Size, ok.SHA256
	want.ConsecutiveFailures = 0
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("after a success (-want +got):\n%s", diff)
	}

	// A failure after it leaves the last successful backup in place.
	s.RecordFailure(t0.Add(2*time.Hour), errors.New("snapshot refused"))
	want.LastFailureTime, want.LastFailureMessage, want.ConsecutiveFailures = at(2*time.Hour), "snapshot refused", 1
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("after a failure following a success (-want +got):\n%s", diff)
	}
}

func TestStatusRecordFailureTruncates(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  string
	}{
		{"ascii", strings.Repeat("x", 5000)},
		// A multi-byte rune straddles the cut: it must not be split.
		{"utf-8", strings.Repeat("é", 3000)},
		{"exactly the limit", strings.Repeat("y", 1024)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s backup.Status
			s.RecordFailure(time.Now(), errors.New(tc.msg))
			got := s.LastFailureMessage
			if len(got) > 1024 {
				t.Errorf("message is %d bytes, want at most 1024", len(got))
			}
			if !utf8.ValidString(got) {
				t.Errorf("message is not valid UTF-8 after the cut")
			}
			if len(tc.msg) <= 1024 {
				if got != tc.msg {
					t.Errorf("a message within the limit was changed: %d bytes -> %d", len(tc.msg), len(got))
				}
				return
			}
			if !strings.HasSuffix(got, " ... [truncated]") || !strings.HasPrefix(tc.msg, strings.TrimSuffix(got, " ... [truncated]")) {
				t.Errorf("message %q... is not a prefix of the error plus the truncation marker", got[:40])
			}
		})
	}
}

func TestStatusDeepCopy(t *testing.T) {
	var s backup.Status
	s.RecordAttempt(time.Now())
	s.RecordSuccess(backup.Manifest{ID: "a", EndTime: time.Now()})
	s.RecordFailure(time.Now(), errors.New("boom"))
	c := s.DeepCopy()
	if diff := cmp.Diff(&s, c); diff != "" {
		t.Fatalf("DeepCopy differs (-orig +copy):\n%s", diff)
	}
	for _, p := range []*metav1.Time{c.LastScheduleTime, c.LastSuccessfulTime, c.LastFailureTime} {
		p.Time = p.Add(time.Hour)
	}
	if cmp.Equal(&s, c) {
		t.Error("changing the copy's times changed the original: they share pointers")
	}
	if (*backup.Status)(nil).DeepCopy() != nil {
		t.Error("DeepCopy of nil is not nil")
	}
}

package backup_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/backup"
)

func TestSchedule(t *testing.T) {
	day := func(h, m int) time.Time { return time.Date(2026, 3, 1, h, m, 0, 0, time.UTC) }
	for _, tc := range []struct {
		name      string
		spec      string
		last, now time.Time
		wantDue   bool
		wantAfter time.Duration
	}{
		{"never ran: due now", "0 3 * * *", time.Time{}, day(1, 0), true, 2 * time.Hour},
		{"before next run", "0 3 * * *", day(0, 0).Add(-21 * time.Hour), day(1, 0), false, 2 * time.Hour},
		{"exactly at next run", "0 3 * * *", day(3, 0).Add(-24 * time.Hour), day(3, 0), true, 24 * time.Hour},
		{"missed several runs: one is due", "0 * * * *", day(0, 0).Add(-72 * time.Hour), day(5, 30), true, 30 * time.Minute},
		{"just ran", "0 * * * *", day(5, 0), day(5, 0).Add(time.Second), false, time.Hour - time.Second},
		{"descriptor", "@every 6h", day(0, 0), day(7, 0), true, 6 * time.Hour},
		{"time zone", "CRON_TZ=Europe/Berlin 0 3 * * *", day(1, 0), day(1, 30), false, 30 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := backup.ParseSchedule(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if s.String() != tc.spec {
				t.Errorf("String() = %q, want %q", s.String(), tc.spec)
			}
			due, after := s.Next(tc.last, tc.now)
			if diff := cmp.Diff([]any{tc.wantDue, tc.wantAfter}, []any{due, after}); diff != "" {
				t.Errorf("Next(%v, %v) (due, requeueAfter) (-want +got):\n%s", tc.last, tc.now, diff)
			}
		})
	}
	var zero backup.Schedule
	if due, after := zero.Next(time.Time{}, time.Now()); due || after != 0 {
		t.Errorf("zero Schedule Next = %v, %v; want false, 0", due, after)
	}
	for _, bad := range []string{"", "* * *", "61 * * * *", "@sometimes"} {
		if _, err := backup.ParseSchedule(bad); err == nil || !strings.Contains(err.Error(), "five fields") {
			t.Errorf("ParseSchedule(%q) = %v, want an error explaining the format", bad, err)
		}
	}
}

func TestStatus(t *testing.T) {
	var s backup.Status
	if !s.LastRun().IsZero() || (*backup.Status)(nil).LastRun() != (time.Time{}) {
		t.Error("LastRun of an empty Status is not zero")
	}
	s.RecordAttempt(t0)
	m := backup.Manifest{ID: "20260301T120000Z-0123abcd", Size: 42, SHA256: strings.Repeat("a", 64), EndTime: t0.Add(time.Minute)}
	s.RecordSuccess(m)
	want := backup.Status{
		LastScheduleTime:   &metav1.Time{Time: t0},
		LastSuccessfulTime: &metav1.Time{Time: t0.Add(time.Minute)},
		LastBackupID:       m.ID,
		LastSizeBytes:      42,
		LastSHA256:         m.SHA256,
	}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("Status (-want +got):\n%s", diff)
	}
	if !s.LastRun().Equal(t0) {
		t.Errorf("LastRun = %v, want %v", s.LastRun(), t0)
	}
	cp := s.DeepCopy()
	if diff := cmp.Diff(&s, cp); diff != "" {
		t.Errorf("DeepCopy (-want +got):\n%s", diff)
	}
	cp.LastScheduleTime.Time = t0.Add(time.Hour)
	cp.LastSuccessfulTime.Time = t0.Add(time.Hour)
	if !s.LastScheduleTime.Time.Equal(t0) || !s.LastSuccessfulTime.Time.Equal(t0.Add(time.Minute)) {
		t.Error("DeepCopy shares time pointers with the original")
	}
	if (*backup.Status)(nil).DeepCopy() != nil {
		t.Error("nil DeepCopy is not nil")
	}
	raw, err := json.Marshal(backup.Status{})
	if err != nil || string(raw) != "{}" {
		t.Errorf("empty Status marshals to %s, %v; want {}", raw, err)
	}
}

package backup

import (
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/operation"
)

// Status reports a custom resource's backups. Embed it in the status of a
// custom resource (it has a hand-written DeepCopyInto, so controller-gen's
// deepcopy for the embedding type works):
//
//	type DatabaseStatus struct {
//		Backup backup.Status `json:"backup,omitempty"`
//	}
type Status struct {
	// LastScheduleTime is when the last scheduled backup was started,
	// successful or not. Pass it to [Schedule.Next] as lastRun.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// LastSuccessfulTime is when the last successful backup finished.
	// +optional
	LastSuccessfulTime *metav1.Time `json:"lastSuccessfulTime,omitempty"`
	// LastBackupID is the ID of the last successful backup.
	// +optional
	LastBackupID string `json:"lastBackupID,omitempty"`
	// LastSizeBytes is the size of the last successful backup in bytes.
	// +optional
	LastSizeBytes int64 `json:"lastSizeBytes,omitempty"`
	// LastSHA256 is the hex SHA-256 of the last successful backup's data.
	// +optional
	LastSHA256 string `json:"lastSHA256,omitempty"`
	// LastFailureTime is when the last failed backup attempt ended. It is
	// kept after a later success, for history; ConsecutiveFailures tells
	// whether the failure is current.
	// +optional
	LastFailureTime *metav1.Time `json:"lastFailureTime,omitempty"`
	// LastFailureMessage is the error of the last failed attempt, at most
	// 1024 bytes.
	// +optional
	LastFailureMessage string `json:"lastFailureMessage,omitempty"`
	// ConsecutiveFailures counts the failed attempts since the last
	// successful backup; a success resets it to 0.
	// +optional
	ConsecutiveFailures int32 `json:"consecutiveFailures,omitempty"`
	// Operation is the backup under way, or the final one taken, as
	// Scheduled and Final record it.
	// +optional
	Operation *operation.Record `json:"operation,omitempty"`
}

// maxFailureMessage bounds LastFailureMessage, so that a long error (a
// server's response body, say) cannot bloat the object.
const maxFailureMessage = 1024

// truncatedMarker ends a LastFailureMessage that was cut.
const truncatedMarker = " ... [truncated]"

// RecordAttempt sets LastScheduleTime to t.
func (s *Status) RecordAttempt(t time.Time) {
	mt := metav1.NewTime(t)
	s.LastScheduleTime = &mt
}

// RecordSuccess sets the last successful backup fields from m and resets
// ConsecutiveFailures.
func (s *Status) RecordSuccess(m Manifest) {
	mt := metav1.NewTime(m.EndTime)
	s.LastSuccessfulTime = &mt
	s.LastBackupID = m.ID
	s.LastSizeBytes = m.Size
	s.LastSHA256 = m.SHA256
	s.ConsecutiveFailures = 0
}

// RecordFailure records a failed attempt that ended at t with err: it sets
// LastFailureTime and LastFailureMessage (cut to 1024 bytes at a UTF-8
// boundary) and counts it in ConsecutiveFailures. The last successful
// backup's fields are left as they are: it is still the newest backup to
// restore from.
func (s *Status) RecordFailure(t time.Time, err error) {
	mt := metav1.NewTime(t)
	s.LastFailureTime = &mt
	msg := "unknown error"
	if err != nil {
		msg = err.Error()
	}
	if len(msg) > maxFailureMessage {
		cut := maxFailureMessage - len(truncatedMarker)
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + truncatedMarker
	}
	s.LastFailureMessage = msg
	s.ConsecutiveFailures++
}

// LastRun returns LastScheduleTime as a time.Time, zero if unset.
func (s *Status) LastRun() time.Time {
	if s == nil || s.LastScheduleTime == nil {
		return time.Time{}
	}
	return s.LastScheduleTime.Time
}

// DeepCopyInto copies the receiver into out.
func (s *Status) DeepCopyInto(out *Status) {
	*out = *s
	if s.LastScheduleTime != nil {
		out.LastScheduleTime = s.LastScheduleTime.DeepCopy()
	}
	if s.LastSuccessfulTime != nil {
		out.LastSuccessfulTime = s.LastSuccessfulTime.DeepCopy()
	}
	if s.LastFailureTime != nil {
		out.LastFailureTime = s.LastFailureTime.DeepCopy()
	}
	if s.Operation != nil {
		out.Operation = s.Operation.DeepCopy()
	}
}

// DeepCopy returns a deep copy of the receiver, nil for nil.
func (s *Status) DeepCopy() *Status {
	if s == nil {
		return nil
	}
	out := new(Status)
	s.DeepCopyInto(out)
	return out
}

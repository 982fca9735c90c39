package backup

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
}

// RecordAttempt sets LastScheduleTime to t.
func (s *Status) RecordAttempt(t time.Time) {
	mt := metav1.NewTime(t)
	s.LastScheduleTime = &mt
}

// RecordSuccess sets the last successful backup fields from m.
func (s *Status) RecordSuccess(m Manifest) {
	mt := metav1.NewTime(m.EndTime)
	s.LastSuccessfulTime = &mt
	s.LastBackupID = m.ID
	s.LastSizeBytes = m.Size
	s.LastSHA256 = m.SHA256
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

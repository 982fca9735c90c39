package operation

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Phase is where an operation stands.
type Phase string

// The phases of a Record.
const (
	Pending   Phase = "Pending"
	Running   Phase = "Running"
	Succeeded Phase = "Succeeded"
	Failed    Phase = "Failed"
)

// Reasons of a Failed Record.
const (
	// ReasonFailed: the last attempt returned an error.
	ReasonFailed = "Failed"
	// ReasonInterrupted: an attempt was cut short (the operator stopped)
	// and no attempt is left.
	ReasonInterrupted = "Interrupted"
	// ReasonCanceled: Runner.Cancel stopped it.
	ReasonCanceled = "Canceled"
)

// Record is one long operation, kept in the object's status (embed it, or
// a slice of it). Its zero value is no operation.
type Record struct {
	// ID names this operation; Operation.Run and Done receive it.
	ID string `json:"id,omitempty"`
	// Type is the Operation's Type.
	Type string `json:"type,omitempty"`
	// Phase is Pending, Running, Succeeded or Failed.
	Phase Phase `json:"phase,omitempty"`
	// Attempts counts the attempts started, interrupted ones included.
	Attempts int32 `json:"attempts,omitempty"`
	// StartTime is when Start recorded the operation.
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// EndTime is when it Succeeded or Failed.
	EndTime *metav1.Time `json:"endTime,omitempty"`
	// Progress is the running attempt's last report.
	Progress string `json:"progress,omitempty"`
	// Reason says why it Failed: Failed, Interrupted, Canceled, or the
	// reason of an error that no attempt can overcome.
	Reason string `json:"reason,omitempty"`
	// Message is the error of a Failed operation.
	Message string `json:"message,omitempty"`
}

// Active reports whether r is Pending or Running.
func (r *Record) Active() bool { return r.Phase == Pending || r.Phase == Running }

// DeepCopyInto copies r into out.
func (r *Record) DeepCopyInto(out *Record) {
	*out = *r
	if r.StartTime != nil {
		out.StartTime = r.StartTime.DeepCopy()
	}
	if r.EndTime != nil {
		out.EndTime = r.EndTime.DeepCopy()
	}
}

// DeepCopy returns a copy of r.
func (r *Record) DeepCopy() *Record {
	if r == nil {
		return nil
	}
	out := new(Record)
	r.DeepCopyInto(out)
	return out
}

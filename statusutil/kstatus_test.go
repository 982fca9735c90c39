package statusutil_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/statusutil"
)

func TestMarkReconcilingAndStalled(t *testing.T) {
	w := widget(1)
	if !statusutil.MarkReconciling(w, "Progressing", "working") {
		t.Fatal("MarkReconciling on empty: changed = false")
	}
	if statusutil.MarkReconciling(w, "Progressing", "working") {
		t.Error("MarkReconciling again: changed = true")
	}
	if !statusutil.MarkStalled(w, "InvalidSpec", "bad") {
		t.Error("MarkStalled: changed = false")
	}
	if statusutil.Get(w, statusutil.ConditionReconciling) != nil || !statusutil.IsTrue(w, statusutil.ConditionStalled) {
		t.Errorf("after MarkStalled: conditions = %v, want Stalled only", w.Status.Conditions)
	}
	if statusutil.MarkStalled(w, "InvalidSpec", "bad") {
		t.Error("MarkStalled again: changed = true")
	}
	if !statusutil.MarkReconciling(w, "Progressing", "retrying") {
		t.Error("MarkReconciling after Stalled: changed = false")
	}
	if statusutil.Get(w, statusutil.ConditionStalled) != nil || !statusutil.IsTrue(w, statusutil.ConditionReconciling) {
		t.Errorf("after MarkReconciling: conditions = %v, want Reconciling only", w.Status.Conditions)
	}
	if !statusutil.ClearReconciling(w) || statusutil.ClearReconciling(w) {
		t.Error("ClearReconciling: want true then false")
	}
	statusutil.MarkStalled(w, "InvalidSpec", "bad")
	if !statusutil.ClearStalled(w) || statusutil.ClearStalled(w) {
		t.Error("ClearStalled: want true then false")
	}
	if len(w.Status.Conditions) != 0 {
		t.Errorf("conditions = %v, want none", w.Status.Conditions)
	}
}

func TestSetSummary(t *testing.T) {
	const T, F, U = metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown
	c := func(typ string, s metav1.ConditionStatus, reason string) metav1.Condition {
		return cond(typ, s, reason, reason+" message", 1, t0)
	}
	owned := []statusutil.SummaryOption{
		statusutil.WithConditions("Available", "Synced"),
		statusutil.WithNegativePolarityConditions("Degraded"),
	}
	tests := []struct {
		name  string
		conds []metav1.Condition
		opts  []statusutil.SummaryOption
		want  metav1.Condition
	}{
		{
			name: "nothing owned is Ready",
			want: cond("Ready", T, statusutil.ReasonSucceeded, "", 1, t0),
		},
		{
			name: "custom ready reason",
			opts: []statusutil.SummaryOption{statusutil.WithReadyReason("Deployed", "v1 is up")},
			want: cond("Ready", T, "Deployed", "v1 is up", 1, t0),
		},
		{
			name:  "all good",
			conds: []metav1.Condition{c("Available", T, "Up"), c("Synced", T, "InSync"), c("Degraded", F, "Fine")},
			opts:  owned,
			want:  cond("Ready", T, statusutil.ReasonSucceeded, "", 1, t0),
		},
		{
			name:  "absent negative condition is good",
			conds: []metav1.Condition{c("Available", T, "Up"), c("Synced", T, "InSync")},
			opts:  owned,
			want:  cond("Ready", T, statusutil.ReasonSucceeded, "", 1, t0),
		},
		{
			name:  "stalled beats everything",
			conds: []metav1.Condition{c("Stalled", T, "InvalidSpec"), c("Reconciling", T, "Progressing"), c("Available", F, "Down")},
			opts:  owned,
			want:  c("Ready", F, "InvalidSpec"),
		},
		{
			name:  "bad owned condition beats reconciling",
			conds: []metav1.Condition{c("Reconciling", T, "Progressing"), c("Available", T, "Up"), c("Synced", F, "OutOfSync")},
			opts:  owned,
			want:  cond("Ready", F, "OutOfSync", "Synced is False: OutOfSync message", 1, t0),
		},
		{
			name:  "first bad condition in option order",
			conds: []metav1.Condition{c("Degraded", T, "Slow"), c("Synced", F, "OutOfSync"), c("Available", T, "Up")},
			opts:  owned,
			want:  cond("Ready", F, "OutOfSync", "Synced is False: OutOfSync message", 1, t0),
		},
		{
			name:  "true negative condition is bad",
			conds: []metav1.Condition{c("Degraded", T, "Slow"), c("Synced", T, "InSync"), c("Available", T, "Up")},
			opts:  owned,
			want:  cond("Ready", F, "Slow", "Degraded is True: Slow message", 1, t0),
		},
		{
			name:  "reconciling beats unknown owned",
			conds: []metav1.Condition{c("Reconciling", T, "Progressing"), c("Available", U, "Checking")},
			opts:  owned,
			want:  c("Ready", U, "Progressing"),
		},
		{
			name:  "unknown owned condition",
			conds: []metav1.Condition{c("Available", T, "Up"), c("Synced", U, "Checking")},
			opts:  owned,
			want:  cond("Ready", U, "Checking", "Synced is Unknown: Checking message", 1, t0),
		},
		{
			name:  "unknown negative condition",
			conds: []metav1.Condition{c("Available", T, "Up"), c("Synced", T, "InSync"), c("Degraded", U, "Probing")},
			opts:  owned,
			want:  cond("Ready", U, "Probing", "Degraded is Unknown: Probing message", 1, t0),
		},
		{
			// A domain condition's reason that reads like a kstatus type
			// (kubebuilder's sample sets Available=Unknown, reason
			// Reconciling): the message says where it comes from.
			name:  "owned reason named like a kstatus condition",
			conds: []metav1.Condition{cond("Available", U, "Reconciling", "Starting reconciliation", 1, t0)},
			opts:  []statusutil.SummaryOption{statusutil.WithConditions("Available")},
			want:  cond("Ready", U, "Reconciling", "Available is Unknown: Starting reconciliation", 1, t0),
		},
		{
			name:  "missing positive condition",
			conds: []metav1.Condition{c("Available", T, "Up")},
			opts:  owned,
			want:  cond("Ready", U, statusutil.ReasonConditionMissing, "condition Synced has not been reported yet", 1, t0),
		},
		{
			name:  "kstatus types and duplicates in options are ignored",
			conds: []metav1.Condition{c("Available", F, "Down")},
			opts: []statusutil.SummaryOption{
				statusutil.WithConditions("Ready", "Reconciling", "Stalled"),
				statusutil.WithNegativePolarityConditions("Available"),
				statusutil.WithConditions("Available"),
			},
			want: cond("Ready", T, statusutil.ReasonSucceeded, "", 1, t0),
		},
	}
	ignoreTime := cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := widget(1, tt.conds...)
			if !statusutil.SetSummary(w, tt.opts...) {
				t.Error("first SetSummary: changed = false")
			}
			if statusutil.SetSummary(w, tt.opts...) {
				t.Error("second SetSummary: changed = true")
			}
			got := statusutil.Get(w, statusutil.ConditionReady)
			if got == nil {
				t.Fatal("no Ready condition")
			}
			if diff := cmp.Diff(tt.want, *got, ignoreTime); diff != "" {
				t.Errorf("Ready (-want +got):\n%s", diff)
			}
		})
	}
}

func TestObservedGeneration(t *testing.T) {
	w := widget(3)
	if statusutil.IsObservedGenerationCurrent(w) {
		t.Error("IsObservedGenerationCurrent before set = true")
	}
	if !statusutil.SetObservedGeneration(w) {
		t.Error("SetObservedGeneration: changed = false")
	}
	if statusutil.SetObservedGeneration(w) {
		t.Error("SetObservedGeneration again: changed = true")
	}
	if w.Status.ObservedGeneration != 3 || !statusutil.IsObservedGenerationCurrent(w) {
		t.Errorf("observedGeneration = %d, current = %v; want 3, true", w.Status.ObservedGeneration, statusutil.IsObservedGenerationCurrent(w))
	}
	w.Generation = 4
	if statusutil.IsObservedGenerationCurrent(w) {
		t.Error("IsObservedGenerationCurrent after spec change = true")
	}
}

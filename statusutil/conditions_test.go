package statusutil_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/statusutil"
)

var (
	t0 = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	t1 = metav1.NewTime(time.Date(2026, 1, 2, 3, 9, 0, 0, time.UTC))
)

func widget(gen int64, conds ...metav1.Condition) *testv1.Widget {
	return &testv1.Widget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "w", Generation: gen},
		Status:     testv1.WidgetStatus{Conditions: conds},
	}
}

func cond(typ string, status metav1.ConditionStatus, reason, msg string, gen int64, ltt metav1.Time) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen, LastTransitionTime: ltt}
}

// local is how metav1.Time decodes from JSON, and how Set stores times.
func local(t metav1.Time) metav1.Time { return metav1.NewTime(t.Local()) }

func TestSet(t *testing.T) {
	const T, F, U = metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown
	tests := []struct {
		name        string
		gen         int64
		existing    []metav1.Condition
		set         metav1.Condition
		wantChanged bool
		want        []metav1.Condition
	}{
		{
			name:        "adds to empty",
			gen:         2,
			set:         cond("Available", T, "Up", "all good", 0, t0),
			wantChanged: true,
			want:        []metav1.Condition{cond("Available", T, "Up", "all good", 2, local(t0))},
		},
		{
			name:        "identical is a no-op",
			gen:         2,
			existing:    []metav1.Condition{cond("Available", T, "Up", "m", 2, t0)},
			set:         cond("Available", T, "Up", "m", 0, t1),
			wantChanged: false,
			want:        []metav1.Condition{cond("Available", T, "Up", "m", 2, t0)},
		},
		{
			name:        "new reason keeps the transition time",
			gen:         2,
			existing:    []metav1.Condition{cond("Available", T, "Up", "m", 2, t0)},
			set:         cond("Available", T, "StillUp", "m", 0, t1),
			wantChanged: true,
			want:        []metav1.Condition{cond("Available", T, "StillUp", "m", 2, t0)},
		},
		{
			name:        "new message keeps the transition time",
			gen:         2,
			existing:    []metav1.Condition{cond("Available", T, "Up", "m", 2, t0)},
			set:         cond("Available", T, "Up", "other", 0, t1),
			wantChanged: true,
			want:        []metav1.Condition{cond("Available", T, "Up", "other", 2, t0)},
		},
		{
			name:        "new generation keeps the transition time",
			gen:         3,
			existing:    []metav1.Condition{cond("Available", T, "Up", "m", 2, t0)},
			set:         cond("Available", T, "Up", "m", 0, t1),
			wantChanged: true,
			want:        []metav1.Condition{cond("Available", T, "Up", "m", 3, t0)},
		},
		{
			name:        "status change moves the transition time",
			gen:         2,
			existing:    []metav1.Condition{cond("Available", T, "Up", "m", 2, t0)},
			set:         cond("Available", F, "Down", "m", 0, t1),
			wantChanged: true,
			want:        []metav1.Condition{cond("Available", F, "Down", "m", 2, local(t1))},
		},
		{
			name:        "caller's observedGeneration is ignored",
			gen:         5,
			set:         cond("Available", U, "Checking", "", 99, t0),
			wantChanged: true,
			want:        []metav1.Condition{cond("Available", U, "Checking", "", 5, local(t0))},
		},
		{
			name:        "transition time is truncated to seconds",
			gen:         1,
			set:         cond("Available", T, "Up", "", 0, metav1.NewTime(t0.Add(999*time.Millisecond))),
			wantChanged: true,
			want:        []metav1.Condition{cond("Available", T, "Up", "", 1, local(t0))},
		},
		{
			name:        "invalid reason is sanitised",
			gen:         1,
			set:         cond("Available", F, "not ready: 3 pods", "", 0, t0),
			wantChanged: true,
			want:        []metav1.Condition{cond("Available", F, "notready:3pods", "", 1, local(t0))},
		},
		{
			name:        "empty reason becomes Unspecified",
			gen:         1,
			set:         cond("Available", F, "", "", 0, t0),
			wantChanged: true,
			want:        []metav1.Condition{cond("Available", F, statusutil.ReasonUnspecified, "", 1, local(t0))},
		},
		{
			name: "sorted Ready first then by type",
			gen:  1,
			existing: []metav1.Condition{
				cond("Zeta", T, "R", "", 1, t0),
				cond("Alpha", T, "R", "", 1, t0),
			},
			set:         cond("Ready", T, "R", "", 0, t0),
			wantChanged: true,
			want: []metav1.Condition{
				cond("Ready", T, "R", "", 1, local(t0)),
				cond("Alpha", T, "R", "", 1, t0),
				cond("Zeta", T, "R", "", 1, t0),
			},
		},
		{
			name: "unsorted slice is left alone when nothing changes",
			gen:  1,
			existing: []metav1.Condition{
				cond("Zeta", T, "R", "", 1, t0),
				cond("Alpha", T, "R", "", 1, t0),
			},
			set:         cond("Alpha", T, "R", "", 0, t1),
			wantChanged: false,
			want: []metav1.Condition{
				cond("Zeta", T, "R", "", 1, t0),
				cond("Alpha", T, "R", "", 1, t0),
			},
		},
		{
			name: "duplicates are removed, keeping the first",
			gen:  1,
			existing: []metav1.Condition{
				cond("Alpha", T, "First", "", 1, t0),
				cond("Beta", T, "R", "", 1, t0),
				cond("Alpha", F, "Second", "", 1, t0),
				cond("Beta", F, "R", "", 1, t0),
			},
			set:         cond("Beta", T, "R", "", 0, t1),
			wantChanged: true,
			want: []metav1.Condition{
				cond("Alpha", T, "First", "", 1, t0),
				cond("Beta", T, "R", "", 1, t0),
			},
		},
		{
			name:        "existing zero transition time is filled in",
			gen:         1,
			existing:    []metav1.Condition{cond("Alpha", T, "R", "", 1, metav1.Time{})},
			set:         cond("Alpha", T, "R", "", 0, t1),
			wantChanged: true,
			// The time is "now"; checked separately below.
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := widget(tt.gen, tt.existing...)
			before := append([]metav1.Condition(nil), tt.existing...)
			if got := statusutil.Set(w, tt.set); got != tt.wantChanged {
				t.Errorf("Set() changed = %v, want %v", got, tt.wantChanged)
			}
			if diff := cmp.Diff(before, tt.existing); diff != "" {
				t.Errorf("Set() modified the caller's slice (-before +after):\n%s", diff)
			}
			if tt.want == nil {
				c := statusutil.Get(w, tt.set.Type)
				if c == nil || c.LastTransitionTime.IsZero() || c.LastTransitionTime.Nanosecond() != 0 {
					t.Errorf("Get() = %v, want a condition with a whole-second transition time", c)
				}
				return
			}
			if diff := cmp.Diff(tt.want, w.Status.Conditions); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSetZeroTimeUsesNow(t *testing.T) {
	w := widget(1)
	before := time.Now().Truncate(time.Second)
	statusutil.MarkTrue(w, "Available", "Up", "")
	after := time.Now()
	got := statusutil.Get(w, "Available").LastTransitionTime.Time
	if got.Before(before) || got.After(after) || got.Nanosecond() != 0 {
		t.Errorf("LastTransitionTime = %v, want a whole second in [%v, %v]", got, before, after)
	}
}

func TestSetOrderIndependent(t *testing.T) {
	types := []string{"Ready", "Beta", "Alpha", "example.com/Gamma", "Reconciling"}
	a, b := widget(1), widget(1)
	for _, typ := range types {
		statusutil.Set(a, cond(typ, metav1.ConditionTrue, "R", "", 0, t0))
	}
	for i := len(types) - 1; i >= 0; i-- {
		statusutil.Set(b, cond(types[i], metav1.ConditionTrue, "R", "", 0, t0))
	}
	if diff := cmp.Diff(a.Status.Conditions, b.Status.Conditions); diff != "" {
		t.Errorf("order depends on insertion order (-forward +reverse):\n%s", diff)
	}
	var got []string
	for _, c := range a.Status.Conditions {
		got = append(got, c.Type)
	}
	want := []string{"Ready", "Alpha", "Beta", "Reconciling", "example.com/Gamma"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("types (-want +got):\n%s", diff)
	}
}

func TestMessageBound(t *testing.T) {
	tests := []struct {
		name string
		msg  string
		want string
	}{
		{name: "short", msg: "hello", want: "hello"},
		{name: "exactly the bound", msg: strings.Repeat("a", statusutil.MaxMessageLength), want: strings.Repeat("a", statusutil.MaxMessageLength)},
		{
			name: "one over the bound",
			msg:  strings.Repeat("a", statusutil.MaxMessageLength+1),
			want: strings.Repeat("a", statusutil.MaxMessageLength-len(statusutil.TruncationMarker)) + statusutil.TruncationMarker,
		},
		{
			name: "cut at a rune boundary",
			// "é" is two bytes; an odd cut point would split one.
			msg:  "x" + strings.Repeat("é", statusutil.MaxMessageLength),
			want: "x" + strings.Repeat("é", (statusutil.MaxMessageLength-len(statusutil.TruncationMarker)-1)/2) + statusutil.TruncationMarker,
		},
		{name: "invalid UTF-8 is replaced", msg: "bad\xffbyte", want: "bad\uFFFDbyte"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := widget(1)
			statusutil.MarkFalse(w, "Available", "Failed", tt.msg)
			got := statusutil.Get(w, "Available").Message
			if got != tt.want {
				t.Errorf("message = %q (%d bytes), want %q (%d bytes)", got, len(got), tt.want, len(tt.want))
			}
			if len(got) > statusutil.MaxMessageLength || !utf8.ValidString(got) {
				t.Errorf("message has %d bytes (bound %d), valid UTF-8 %v", len(got), statusutil.MaxMessageLength, utf8.ValidString(got))
			}
		})
	}
}

func TestSanitizeReason(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"Ready", "Ready"},
		{"Reason_A,ReasonB:c9", "Reason_A,ReasonB:c9"},
		{"", statusutil.ReasonUnspecified},
		{"Not Ready", "NotReady"},
		{"404NotFound", "NotFound"},
		{"_x", "x"},
		{"Failed:", "Failed"},
		{"a,:", "a"},
		{"!!!", statusutil.ReasonUnspecified},
		{"1234", statusutil.ReasonUnspecified},
		{"Ünïcode", "ncode"},
		{strings.Repeat("A", 1025), strings.Repeat("A", 1024)},
		{strings.Repeat("A", 1023) + ":B", strings.Repeat("A", 1023)},
	}
	for _, tt := range tests {
		got := statusutil.SanitizeReason(tt.in)
		if got != tt.want {
			t.Errorf("SanitizeReason(%.40q) = %.40q, want %.40q", tt.in, got, tt.want)
		}
		if err := statusutil.Validate(cond("A", metav1.ConditionTrue, got, "", 0, t0)); err != nil {
			t.Errorf("SanitizeReason(%.40q) is not valid: %v", tt.in, err)
		}
	}
}

func TestMark(t *testing.T) {
	tests := []struct {
		name string
		mark func(statusutil.Setter, string, string, string) bool
		want metav1.ConditionStatus
	}{
		{"MarkTrue", statusutil.MarkTrue, metav1.ConditionTrue},
		{"MarkFalse", statusutil.MarkFalse, metav1.ConditionFalse},
		{"MarkUnknown", statusutil.MarkUnknown, metav1.ConditionUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := widget(4)
			if !tt.mark(w, "Available", "Because", "msg") {
				t.Fatal("first mark reported no change")
			}
			if tt.mark(w, "Available", "Because", "msg") {
				t.Error("second identical mark reported a change")
			}
			got := statusutil.Get(w, "Available")
			want := cond("Available", tt.want, "Because", "msg", 4, got.LastTransitionTime)
			if diff := cmp.Diff(want, *got); diff != "" {
				t.Errorf("condition (-want +got):\n%s", diff)
			}
			checks := map[metav1.ConditionStatus]bool{
				metav1.ConditionTrue:    statusutil.IsTrue(w, "Available"),
				metav1.ConditionFalse:   statusutil.IsFalse(w, "Available"),
				metav1.ConditionUnknown: statusutil.IsUnknown(w, "Available"),
			}
			for s, ok := range checks {
				if ok != (s == tt.want) {
					t.Errorf("Is%s() = %v with status %s", s, ok, tt.want)
				}
			}
		})
	}
}

func TestGetReturnsCopy(t *testing.T) {
	w := widget(1)
	if c := statusutil.Get(w, "Available"); c != nil {
		t.Fatalf("Get() on absent condition = %v, want nil", c)
	}
	if !statusutil.IsUnknown(w, "Available") || statusutil.IsTrue(w, "Available") || statusutil.IsFalse(w, "Available") {
		t.Error("absent condition: want IsUnknown only")
	}
	statusutil.MarkTrue(w, "Available", "Up", "")
	c := statusutil.Get(w, "Available")
	c.Status = metav1.ConditionFalse
	if !statusutil.IsTrue(w, "Available") {
		t.Error("changing the copy returned by Get changed the object")
	}
}

func TestRemove(t *testing.T) {
	w := widget(1,
		cond("Zeta", metav1.ConditionTrue, "R", "", 1, t0),
		cond("Alpha", metav1.ConditionTrue, "R", "", 1, t0),
		cond("Mid", metav1.ConditionTrue, "R", "", 1, t0),
	)
	orig := w.Status.Conditions
	if statusutil.Remove(w, "Absent") {
		t.Error("Remove(absent) = true")
	}
	if !statusutil.Remove(w, "Alpha") {
		t.Error("Remove(present) = false")
	}
	want := []metav1.Condition{cond("Zeta", metav1.ConditionTrue, "R", "", 1, t0), cond("Mid", metav1.ConditionTrue, "R", "", 1, t0)}
	if diff := cmp.Diff(want, w.Status.Conditions); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
	if orig[1].Type != "Alpha" {
		t.Error("Remove modified the original backing array")
	}
}

func TestIsCurrent(t *testing.T) {
	w := widget(3, cond("Old", metav1.ConditionTrue, "R", "", 2, t0))
	statusutil.MarkTrue(w, "New", "R", "")
	for typ, want := range map[string]bool{"Old": false, "New": true, "Absent": false} {
		if got := statusutil.IsCurrent(w, typ); got != want {
			t.Errorf("IsCurrent(%s) = %v, want %v", typ, got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		c       metav1.Condition
		wantErr string
	}{
		{name: "valid", c: cond("Ready", metav1.ConditionTrue, "Ok", "", 1, t0)},
		{name: "bad type", c: cond("not a type!", metav1.ConditionTrue, "Ok", "", 1, t0), wantErr: "condition.type"},
		{name: "bad status", c: cond("Ready", "Yes", "Ok", "", 1, t0), wantErr: "condition.status"},
		{name: "bad reason", c: cond("Ready", metav1.ConditionTrue, "no spaces", "", 1, t0), wantErr: "condition.reason"},
		{name: "zero time", c: cond("Ready", metav1.ConditionTrue, "Ok", "", 1, metav1.Time{}), wantErr: "condition.lastTransitionTime"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := statusutil.Validate(tt.c)
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Validate() = %v, want an error naming %s", err, tt.wantErr)
			}
		})
	}
}

func TestValidateConditions(t *testing.T) {
	w := widget(1)
	statusutil.MarkTrue(w, "Ready", "Ok", "")
	statusutil.MarkFalse(w, "Other", "", "empty reason is sanitised")
	if err := statusutil.ValidateConditions(w); err != nil {
		t.Errorf("ValidateConditions() = %v after Set, want nil", err)
	}
	w.Status.Conditions = append(w.Status.Conditions, w.Status.Conditions[0])
	if err := statusutil.ValidateConditions(w); err == nil || !strings.Contains(err.Error(), "Duplicate") {
		t.Errorf("ValidateConditions() = %v, want a duplicate error", err)
	}
}

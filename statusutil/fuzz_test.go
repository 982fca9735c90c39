package statusutil_test

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/statusutil"
)

var fuzzTypes = []string{"Ready", "Alpha", "Beta", "example.com/Gamma", "Reconciling", "Stalled", "Zeta", "a"}

var fuzzStatuses = []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown, metav1.ConditionUnknown}

// FuzzSet drives a Widget through a sequence of operations decoded from ops
// and checks the setters' invariants after each one:
//
//   - a second identical Set returns false and changes nothing;
//   - at most one condition per type, sorted Ready first then by type,
//     whenever Set wrote;
//   - LastTransitionTime moves only when Status changes, and then to the
//     requested time truncated to seconds;
//   - messages are valid UTF-8 within MaxMessageLength, reasons valid;
//   - ObservedGeneration equals metadata.generation;
//   - conditions of other types are untouched.
func FuzzSet(f *testing.F) {
	f.Add(int64(1), []byte{0, 8, 16, 1, 9}, "Up", "message", int64(1767323045), int64(0))
	f.Add(int64(7), []byte{0x80, 0x81, 0x40, 0x41, 0x22, 0xa2, 0x63, 0xe4}, "not ready: 3/5", strings.Repeat("é", 700), int64(0), int64(0))
	f.Add(int64(0), []byte{0xc0, 0xc7, 0x07, 0x0f, 0x17, 0x1f}, "", "bad \xff utf8", int64(-62135596800), int64(999999999))
	f.Add(int64(2), []byte{3, 3, 0x43, 3, 0x83, 0xc3, 0x03}, "Reason_A,B:C", strings.Repeat("x", statusutil.MaxMessageLength+1), int64(1<<40), int64(123))
	f.Add(int64(3), []byte{0x60, 0x61, 0x62, 0x20, 0x21}, "4xx", "", int64(1), int64(1))

	f.Fuzz(func(t *testing.T, gen int64, ops []byte, reason, message string, sec, nsec int64) {
		if gen < 0 {
			gen = 0 // The API server never reports a negative generation.
		}
		w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Generation: gen}}
		ltt := metav1.Time{}
		if sec != 0 || nsec != 0 {
			ltt = metav1.NewTime(time.Unix(sec, nsec%int64(time.Second)))
		}
		for i, op := range ops {
			typ := fuzzTypes[int(op)&7]
			status := fuzzStatuses[int(op>>3)&3]
			r, m := "Fixed", "fixed"
			if op&0x80 != 0 {
				r, m = reason, message
			}
			before := slices.Clone(w.Status.Conditions)
			switch op >> 5 & 3 {
			case 0, 1:
				c := metav1.Condition{Type: typ, Status: status, Reason: r, Message: m, LastTransitionTime: ltt, ObservedGeneration: -5}
				checkSet(t, w, c, before)
			case 2:
				had := statusutil.Get(w, typ) != nil
				if changed := statusutil.Remove(w, typ); changed != had || statusutil.Get(w, typ) != nil {
					t.Fatalf("op %d: Remove(%s) = %v (present before: %v), conditions now %v", i, typ, changed, had, w.Status.Conditions)
				}
			case 3:
				statusutil.SetSummary(w, statusutil.WithConditions(fuzzTypes[1:4]...), statusutil.WithNegativePolarityConditions(typ))
				if statusutil.SetSummary(w, statusutil.WithConditions(fuzzTypes[1:4]...), statusutil.WithNegativePolarityConditions(typ)) {
					t.Fatalf("op %d: second SetSummary reported a change", i)
				}
			}
			checkInvariants(t, w)
		}
	})
}

func checkSet(t *testing.T, w *testv1.Widget, c metav1.Condition, before []metav1.Condition) {
	t.Helper()
	old := statusutil.Get(w, c.Type)
	reqTime := time.Now()
	changed := statusutil.Set(w, c)
	after := slices.Clone(w.Status.Conditions)
	got := statusutil.Get(w, c.Type)
	if got == nil {
		t.Fatalf("Set(%s): condition absent afterwards", c.Type)
	}
	if !changed {
		if diff := cmp.Diff(before, after); diff != "" {
			t.Fatalf("Set(%s) returned false but changed the conditions (-before +after):\n%s", c.Type, diff)
		}
	}
	if statusutil.Set(w, c) {
		t.Fatalf("second identical Set(%s) returned true", c.Type)
	}
	if diff := cmp.Diff(after, w.Status.Conditions); diff != "" {
		t.Fatalf("second identical Set(%s) changed the conditions (-first +second):\n%s", c.Type, diff)
	}

	// Transition time.
	switch {
	case old != nil && old.Status == c.Status:
		if !got.LastTransitionTime.Equal(&old.LastTransitionTime) {
			t.Fatalf("Set(%s) with unchanged status moved LastTransitionTime from %v to %v", c.Type, old.LastTransitionTime, got.LastTransitionTime)
		}
	case !c.LastTransitionTime.Truncate(time.Second).IsZero():
		// A time in the first second of year 1 truncates to the zero time,
		// which Set treats as "now" (the default case).
		want := c.LastTransitionTime.Truncate(time.Second)
		if !got.LastTransitionTime.Time.Equal(want) {
			t.Fatalf("Set(%s) LastTransitionTime = %v, want %v", c.Type, got.LastTransitionTime, want)
		}
	default:
		if lt := got.LastTransitionTime.Time; lt.Before(reqTime.Truncate(time.Second)) || lt.After(time.Now()) {
			t.Fatalf("Set(%s) LastTransitionTime = %v, want about now (%v)", c.Type, got.LastTransitionTime, reqTime)
		}
	}
	if got.LastTransitionTime.Nanosecond() != 0 && (old == nil || old.Status != c.Status) {
		t.Fatalf("Set(%s) LastTransitionTime %v has sub-second precision", c.Type, got.LastTransitionTime)
	}

	// Message and reason.
	wantMsg := strings.ToValidUTF8(c.Message, "\uFFFD")
	if len(wantMsg) > statusutil.MaxMessageLength {
		if !strings.HasSuffix(got.Message, statusutil.TruncationMarker) || !strings.HasPrefix(wantMsg, strings.TrimSuffix(got.Message, statusutil.TruncationMarker)) {
			t.Fatalf("Set(%s) truncated message %q is not a prefix of the input plus the marker", c.Type, got.Message)
		}
	} else if got.Message != wantMsg {
		t.Fatalf("Set(%s) message = %q, want %q", c.Type, got.Message, wantMsg)
	}
	if got.Reason != statusutil.SanitizeReason(c.Reason) {
		t.Fatalf("Set(%s) reason = %q, want %q", c.Type, got.Reason, statusutil.SanitizeReason(c.Reason))
	}

	// Other types untouched.
	for _, b := range before {
		if b.Type == c.Type {
			continue
		}
		if diff := cmp.Diff(&b, statusutil.Get(w, b.Type)); diff != "" {
			t.Fatalf("Set(%s) changed condition %s (-before +after):\n%s", c.Type, b.Type, diff)
		}
	}
}

func checkInvariants(t *testing.T, w *testv1.Widget) {
	t.Helper()
	conds := w.Status.Conditions
	for i, c := range conds {
		if c.ObservedGeneration != w.Generation {
			t.Fatalf("condition %s observedGeneration = %d, want %d", c.Type, c.ObservedGeneration, w.Generation)
		}
		if len(c.Message) > statusutil.MaxMessageLength || !utf8.ValidString(c.Message) {
			t.Fatalf("condition %s message: %d bytes (bound %d), valid UTF-8 %v", c.Type, len(c.Message), statusutil.MaxMessageLength, utf8.ValidString(c.Message))
		}
		if err := statusutil.Validate(c); err != nil {
			t.Fatalf("condition %d: %v", i, err)
		}
		if i == 0 {
			continue
		}
		prev := conds[i-1]
		if c.Type == statusutil.ConditionReady || (prev.Type != statusutil.ConditionReady && prev.Type >= c.Type) {
			t.Fatalf("conditions not sorted (Ready first, then by type, unique): %s before %s", prev.Type, c.Type)
		}
	}
}

// FuzzSanitizeReason checks that SanitizeReason always returns a reason the
// API server accepts, keeps valid reasons and is idempotent.
func FuzzSanitizeReason(f *testing.F) {
	for _, s := range []string{"", "Ready", "Not Ready", "a,:", "9lives", "Ünïcode", "x_", strings.Repeat("Ab:", 400)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reason string) {
		got := statusutil.SanitizeReason(reason)
		c := metav1.Condition{Type: "T", Status: metav1.ConditionTrue, Reason: got, LastTransitionTime: metav1.Now()}
		if err := statusutil.Validate(c); err != nil {
			t.Fatalf("SanitizeReason(%q) = %q: %v", reason, got, err)
		}
		if again := statusutil.SanitizeReason(got); again != got {
			t.Fatalf("SanitizeReason not idempotent: %q -> %q -> %q", reason, got, again)
		}
		c.Reason = reason
		if statusutil.Validate(c) == nil && got != reason {
			t.Fatalf("SanitizeReason changed the valid reason %q to %q", reason, got)
		}
	})
}

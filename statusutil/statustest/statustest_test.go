package statustest_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/statusutil"
	"github.com/opkit-dev/opkit/statusutil/statustest"
)

func widget(gen int64) *testv1.Widget {
	return &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", Generation: gen}}
}

func TestAssertCondition(t *testing.T) {
	w := widget(3)
	statusutil.MarkTrue(w, "Ready", "Succeeded", "all good")
	tests := []struct {
		name     string
		want     metav1.Condition
		wantOK   bool
		wantText []string
	}{
		{name: "type status reason", want: metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Succeeded"}, wantOK: true},
		{name: "with message and generation", want: metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "all good", ObservedGeneration: 3}, wantOK: true},
		{name: "time is ignored", want: metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Succeeded", LastTransitionTime: metav1.Now()}, wantOK: true},
		{name: "wrong status", want: metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Succeeded"}, wantText: []string{"-want +got", "Status", `"False"`, `"True"`}},
		{name: "wrong message", want: metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "other"}, wantText: []string{"all good"}},
		{name: "wrong generation", want: metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Succeeded", ObservedGeneration: 4}, wantText: []string{"ObservedGeneration"}},
		{name: "absent", want: metav1.Condition{Type: "Available", Status: metav1.ConditionTrue}, wantText: []string{"no Available condition", "Ready=True"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ok bool
			r := testkit.RunTB(t, func(tb testing.TB) { ok = statustest.AssertCondition(tb, w, tt.want) })
			if ok != tt.wantOK || (r.Failures() == "") != tt.wantOK {
				t.Fatalf("AssertCondition() = %v with output %q, want %v", ok, r.Failures(), tt.wantOK)
			}
			for _, s := range tt.wantText {
				if !strings.Contains(r.Failures(), s) {
					t.Errorf("output %q does not contain %q", r.Failures(), s)
				}
			}
		})
	}
}

func TestAssertNoCondition(t *testing.T) {
	w := widget(1)
	statusutil.MarkStalled(w, "InvalidSpec", "bad")
	var ok bool
	if r := testkit.RunTB(t, func(tb testing.TB) { ok = statustest.AssertNoCondition(tb, w, "Reconciling") }); !ok || r.Failures() != "" {
		t.Errorf("AssertNoCondition(absent) = %v, %q; want true and no output", ok, r.Failures())
	}
	r := testkit.RunTB(t, func(tb testing.TB) { ok = statustest.AssertNoCondition(tb, w, "Stalled") })
	if ok || !strings.Contains(r.Failures(), "Stalled=True (reason InvalidSpec") {
		t.Errorf("AssertNoCondition(present) = %v, %q; want false and the condition", ok, r.Failures())
	}
}

func TestAssertConditionsValid(t *testing.T) {
	w := widget(1)
	statusutil.MarkTrue(w, "Ready", "Ok", "")
	var ok bool
	if r := testkit.RunTB(t, func(tb testing.TB) { ok = statustest.AssertConditionsValid(tb, w) }); !ok || r.Failures() != "" {
		t.Errorf("AssertConditionsValid(valid) = %v, %q", ok, r.Failures())
	}
	statusutil.MarkTrue(w, "not valid!", "Ok", "")
	r := testkit.RunTB(t, func(tb testing.TB) { ok = statustest.AssertConditionsValid(tb, w) })
	if ok || !strings.Contains(r.Failures(), "conditions[1].type") {
		t.Errorf("AssertConditionsValid(invalid) = %v, %q; want false naming conditions[1].type", ok, r.Failures())
	}
}

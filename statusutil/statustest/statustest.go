package statustest

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/statusutil"
)

// AssertCondition reports an error on t unless obj has a condition of type
// want.Type with want.Status and want.Reason. want.Message is compared only
// when it is not empty, and want.ObservedGeneration only when it is not zero;
// LastTransitionTime is never compared. The failure message is a cmp.Diff of
// the expected and actual condition. It returns whether the condition
// matched, so that a caller can stop early.
func AssertCondition(t testing.TB, obj statusutil.Getter, want metav1.Condition) bool {
	t.Helper()
	got := statusutil.Get(obj, want.Type)
	if got == nil {
		t.Errorf("%s: no %s condition; conditions: %s", describe(obj), want.Type, FormatConditions(obj.GetConditions()))
		return false
	}
	ignore := []string{"LastTransitionTime"}
	if want.Message == "" {
		ignore = append(ignore, "Message")
	}
	if want.ObservedGeneration == 0 {
		ignore = append(ignore, "ObservedGeneration")
	}
	if diff := cmp.Diff(want, *got, cmpopts.IgnoreFields(metav1.Condition{}, ignore...)); diff != "" {
		t.Errorf("%s: condition %s (-want +got):\n%s", describe(obj), want.Type, diff)
		return false
	}
	return true
}

// AssertNoCondition reports an error on t if obj has a condition of type
// condType, and returns whether it was absent. Use it for kstatus
// abnormal-true conditions such as Reconciling and Stalled, which are
// removed rather than set to False.
func AssertNoCondition(t testing.TB, obj statusutil.Getter, condType string) bool {
	t.Helper()
	if c := statusutil.Get(obj, condType); c != nil {
		t.Errorf("%s: want no %s condition, got %s", describe(obj), condType, formatCondition(*c))
		return false
	}
	return true
}

// AssertConditionsValid reports an error on t if any of obj's conditions
// would be rejected by the API server (see statusutil.ValidateConditions),
// and returns whether they were all valid. It catches a bad condition type
// or status in a unit test, before an envtest or e2e run.
func AssertConditionsValid(t testing.TB, obj statusutil.Getter) bool {
	t.Helper()
	if err := statusutil.ValidateConditions(obj); err != nil {
		t.Errorf("%v", err)
		return false
	}
	return true
}

func describe(obj client.Object) string {
	return fmt.Sprintf("%T %s", obj, client.ObjectKeyFromObject(obj))
}

func formatCondition(c metav1.Condition) string {
	return fmt.Sprintf("%s=%s (reason %s, observedGeneration %d, message %q)", c.Type, c.Status, c.Reason, c.ObservedGeneration, c.Message)
}

// FormatConditions renders conditions for a failure message: type=status
// with reason, observedGeneration and message, separated by "; ", or
// "none".
func FormatConditions(conds []metav1.Condition) string {
	if len(conds) == 0 {
		return "none"
	}
	s := ""
	for i, c := range conds {
		if i > 0 {
			s += "; "
		}
		s += formatCondition(c)
	}
	return s
}

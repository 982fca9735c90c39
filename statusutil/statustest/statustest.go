package statustest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apimachinerywait "k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/klient/wait"

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
		t.Errorf("%s: no %s condition; conditions: %s", describe(obj), want.Type, formatConditions(obj.GetConditions()))
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

// ErrNotInScheme is wrapped by the error a wait condition returns when the
// object's type is not registered in the resources' scheme.
var ErrNotInScheme = errors.New("type not registered in the resources' scheme; register it with AddToScheme(r.GetScheme())")

// HasCondition returns an e2e-framework wait condition (for wait.For) that is
// met when obj, read through r, has condition condType with the given status
// computed for its current spec: the condition's observedGeneration is at
// least metadata.generation, and so is status.observedGeneration when obj
// implements statusutil.ObservedGenerationGetter. A condition left over from
// an older generation therefore never satisfies it.
//
// obj names the object (its namespace and name) and receives each read, so
// after a timeout it holds the last state seen; pass it to AssertCondition or
// print its conditions to show why the wait failed, or use WaitForCondition,
// which does that.
//
// Errors while reading (not found yet, a transient API error) mean "not yet".
// An object without a name, or whose type is not registered in r's scheme,
// makes the condition return an error at once (wrapping ErrNotInScheme for
// the latter), which ends the wait.
func HasCondition(r *resources.Resources, obj statusutil.Getter, condType string, status metav1.ConditionStatus) apimachinerywait.ConditionWithContextFunc {
	return func(ctx context.Context) (bool, error) {
		if obj.GetName() == "" {
			return false, fmt.Errorf("waiting for condition %s=%s: the object has no name", condType, status)
		}
		if err := r.Get(ctx, obj.GetName(), obj.GetNamespace(), obj); err != nil {
			if runtime.IsNotRegisteredError(err) {
				return false, fmt.Errorf("waiting for condition %s=%s on %s: %w: %w", condType, status, describe(obj), ErrNotInScheme, err)
			}
			return false, nil
		}
		return conditionMet(obj, condType, status), nil
	}
}

// IsReady returns a wait condition met when obj has Ready=True for its
// current generation. It is HasCondition(r, obj, statusutil.ReadyCondition,
// metav1.ConditionTrue).
func IsReady(r *resources.Resources, obj statusutil.Getter) apimachinerywait.ConditionWithContextFunc {
	return HasCondition(r, obj, statusutil.ReadyCondition, metav1.ConditionTrue)
}

// WaitForCondition waits with wait.For and HasCondition, and on failure stops
// the test with t.Fatalf, reporting the object's generation, observed
// generation and conditions as last read. Pass wait.WithTimeout and
// wait.WithInterval to change e2e-framework's defaults (5 minutes, polling
// every 5 seconds); a test's context can be passed with wait.WithContext.
func WaitForCondition(t testing.TB, r *resources.Resources, obj statusutil.Getter, condType string, status metav1.ConditionStatus, opts ...wait.Option) {
	t.Helper()
	if err := wait.For(HasCondition(r, obj, condType, status), opts...); err != nil {
		t.Fatalf("waiting for %s=%s on %s: %v\nlast seen: generation %d%s, conditions: %s",
			condType, status, describe(obj), err, obj.GetGeneration(), observed(obj), formatConditions(obj.GetConditions()))
	}
}

func conditionMet(obj statusutil.Getter, condType string, status metav1.ConditionStatus) bool {
	c := statusutil.Get(obj, condType)
	if c == nil || c.Status != status || c.ObservedGeneration < obj.GetGeneration() {
		return false
	}
	if og, ok := obj.(statusutil.ObservedGenerationGetter); ok && og.GetObservedGeneration() < obj.GetGeneration() {
		return false
	}
	return true
}

func describe(obj client.Object) string {
	return fmt.Sprintf("%T %s", obj, client.ObjectKeyFromObject(obj))
}

func observed(obj statusutil.Getter) string {
	if og, ok := obj.(statusutil.ObservedGenerationGetter); ok {
		return fmt.Sprintf(", observedGeneration %d", og.GetObservedGeneration())
	}
	return ""
}

func formatCondition(c metav1.Condition) string {
	return fmt.Sprintf("%s=%s (reason %s, observedGeneration %d, message %q)", c.Type, c.Status, c.Reason, c.ObservedGeneration, c.Message)
}

func formatConditions(conds []metav1.Condition) string {
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

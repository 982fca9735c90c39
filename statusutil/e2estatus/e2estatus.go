package e2estatus

import (
	"context"
	"errors"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apimachinerywait "k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/klient/wait"

	"github.com/opkit-dev/opkit/statusutil"
	"github.com/opkit-dev/opkit/statusutil/statustest"
)

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
// current generation. It is HasCondition(r, obj, statusutil.ConditionReady,
// metav1.ConditionTrue).
func IsReady(r *resources.Resources, obj statusutil.Getter) apimachinerywait.ConditionWithContextFunc {
	return HasCondition(r, obj, statusutil.ConditionReady, metav1.ConditionTrue)
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
			condType, status, describe(obj), err, obj.GetGeneration(), observed(obj), statustest.FormatConditions(obj.GetConditions()))
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

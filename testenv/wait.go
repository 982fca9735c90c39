package testenv

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/statusutil"
	"github.com/opkit-dev/opkit/statusutil/statustest"
)

// Timeout is how long WaitFor and WaitForCondition wait.
var Timeout = 30 * time.Second

// WaitFor reads obj (by its name and namespace) through c until cond
// holds, and fails t with the last state read after Timeout. obj holds
// the last read.
func WaitFor[T client.Object](t testing.TB, c client.Client, obj T, cond func(T) bool) {
	t.Helper()
	key := client.ObjectKeyFromObject(obj)
	var seen, missing bool
	var lastErr error
	// Errors do not end the wait: a read may fail near the deadline (the
	// client's rate limiter refuses to wait past it).
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, Timeout, true, func(ctx context.Context) (bool, error) {
		switch err := c.Get(ctx, key, obj); {
		case err == nil:
			seen, missing = true, false
			return cond(obj), nil
		case apierrors.IsNotFound(err):
			missing = true
		default:
			lastErr = err
		}
		return false, nil
	})
	switch {
	case err == nil:
	case missing && !seen:
		t.Fatalf("%T %s does not exist after %v", obj, key, Timeout)
	case lastErr != nil:
		t.Fatalf("%T %s did not reach the state waited for within %v (last read error: %v)", obj, key, Timeout, lastErr)
	default:
		t.Fatalf("%T %s did not reach the state waited for within %v", obj, key, Timeout)
	}
}

// Conditioned is an object with status conditions.
type Conditioned interface {
	client.Object
	statusutil.Getter
}

// WaitForCondition waits until obj's condition condType has status, at
// obj's current generation, and fails t naming every condition otherwise.
func WaitForCondition(t testing.TB, c client.Client, obj Conditioned, condType string, status metav1.ConditionStatus) {
	t.Helper()
	key := client.ObjectKeyFromObject(obj)
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, Timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, obj); err != nil {
			return false, nil // as in WaitFor: the wait goes on
		}
		got := statusutil.Get(obj, condType)
		return got != nil && got.Status == status && got.ObservedGeneration == obj.GetGeneration(), nil
	})
	if err != nil {
		t.Fatalf("%T %s: %s is not %s at generation %d within %v; conditions:\n%s",
			obj, key, condType, status, obj.GetGeneration(), Timeout, statustest.FormatConditions(obj.GetConditions()))
	}
}

// WaitForDeletion waits until obj (by its name and namespace) is gone, or
// is a new object under its name (another UID), and fails t with its
// finalizers and owners after timeout. Deletion needs a controller that
// envtest lacks: see Env.StartControllerManager.
func WaitForDeletion(t testing.TB, c client.Client, obj client.Object, timeout time.Duration) {
	t.Helper()
	key, uid := client.ObjectKeyFromObject(obj), obj.GetUID()
	last := obj.DeepCopyObject().(client.Object)
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		switch err := c.Get(ctx, key, last); {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			return false, nil // as in WaitFor: the wait goes on
		}
		return uid != "" && last.GetUID() != uid, nil
	})
	if err != nil {
		t.Fatalf("%T %s still exists after %v: deletionTimestamp %v, finalizers %q, owners %v",
			obj, key, timeout, last.GetDeletionTimestamp(), last.GetFinalizers(), last.GetOwnerReferences())
	}
}

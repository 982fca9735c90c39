package guardtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/guard"
)

// Install creates policy and binding (keeping them if they exist) and
// returns once admission enforces them (WaitEnforced). What it created is
// deleted when t ends.
func Install(t testing.TB, c client.Client, policy *admissionregistrationv1.ValidatingAdmissionPolicy, binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	for _, obj := range []client.Object{policy, binding} {
		err := c.Create(t.Context(), obj)
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			t.Fatalf("guardtest: installing %T %s: %v", obj, obj.GetName(), err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), obj) })
	}
	if err := WaitEnforced(t.Context(), c); err != nil {
		t.Fatal(err)
	}
}

// WaitEnforced waits up to 30 s until admission refuses to delete an
// object a guard holds in a namespace being deleted: it makes a probe
// namespace with a guard and a held ConfigMap, deletes the namespace and
// dry-runs the held one's delete. The namespace goes once the policy let
// the probe guard go.
func WaitEnforced(ctx context.Context, c client.Client) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "guard-probe-"}}
	if err := c.Create(ctx, ns); err != nil {
		return fmt.Errorf("guardtest: the probe namespace: %w", err)
	}
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe-guard", Namespace: ns.Name, Labels: map[string]string{guard.LabelGuard: "true"}}}
	if err := c.Create(ctx, probe); err != nil {
		return fmt.Errorf("guardtest: the probe guard: %w", err)
	}
	held := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: ns.Name, Labels: map[string]string{guard.LabelHeldBy: string(probe.UID)}}}
	if err := c.Create(ctx, held); err != nil {
		return fmt.Errorf("guardtest: the probe's held ConfigMap: %w", err)
	}
	if err := c.Delete(ctx, ns); err != nil {
		return fmt.Errorf("guardtest: deleting the probe namespace: %w", err)
	}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = c.Delete(ctx, held, client.DryRunAll)
		return apierrors.IsForbidden(last), nil
	})
	if err != nil {
		return fmt.Errorf("guardtest: the guard's policy is not enforced: a held delete in a namespace being deleted: %w", errors.Join(last, err))
	}
	if err := c.Delete(ctx, probe); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("guardtest: deleting the probe guard: %w", err)
	}
	return nil
}

package guard_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/guard"
)

// TestPolicyHoldsThroughNamespaceDeletion: while a namespace is being
// deleted, a held child cannot be deleted until its guard is released;
// other objects, and held ones in a namespace not being deleted, can. envtest runs
// no namespace controller, so the test deletes as it would.
func TestPolicyHoldsThroughNamespaceDeletion(t *testing.T) {
	ctx := t.Context()
	installPolicy(t, "guard-test")

	ns := newNamespace(t)
	g := newGuard(t)
	w := newWidget(t, ns, "w")
	cm, err := g.Ensure(ctx, w)
	must(t, err)
	held, free := newSecret(t, ns, "held", cm), newSecret(t, ns, "free", nil)
	live := newNamespace(t)
	liveCM, err := g.Ensure(ctx, newWidget(t, live, "w"))
	must(t, err)
	heldLive := newSecret(t, live, "held", liveCM)

	must(t, env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	// The policy and its parameters reach admission through informers.
	eventually(t, "the policy to refuse deleting a held Secret", func(ctx context.Context) (bool, error) {
		err := env.Client.Delete(ctx, held, client.DryRunAll)
		return apierrors.IsForbidden(err), client.IgnoreNotFound(ignoreForbidden(err))
	})
	err = env.Client.Delete(ctx, held)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "held by guard "+cm.Name) || !strings.Contains(err.Error(), guard.Finalizer) {
		t.Errorf("deleting a held Secret in a namespace being deleted: %v, want Forbidden naming guard %s and finalizer %s", err, cm.Name, guard.Finalizer)
	}
	must(t, env.Client.Delete(ctx, free))
	// The operator's own deletes go on while the namespace lives.
	must(t, env.Client.Delete(ctx, heldLive))

	must(t, g.Release(ctx, w))
	eventually(t, "the held Secret to be deletable after Release", func(ctx context.Context) (bool, error) {
		err := env.Client.Delete(ctx, held)
		return err == nil, ignoreForbidden(err)
	})
}

func ignoreForbidden(err error) error {
	if apierrors.IsForbidden(err) {
		return nil
	}
	return err
}

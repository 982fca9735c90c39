package reconcile_test

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/ownership"
	"github.com/opkit-dev/opkit/reconcile"
)

// staleReader is a cache that still shows its pods as they were.
type staleReader struct {
	client.Client
	pods map[client.ObjectKey]*corev1.Pod
}

func (r staleReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if p, ok := r.pods[key]; ok {
		p.DeepCopyInto(obj.(*corev1.Pod))
		return nil
	}
	return r.Client.Get(ctx, key, obj, opts...)
}

// TestEvictChild: an eviction goes through the pod's budget, and, as a
// deletion does, leaves a pod replaced since it was read (here the cache
// still shows the old one, so only the server's precondition sees it)
// and one the owner does not control.
func TestEvictChild(t *testing.T) {
	f := newFixture(t)
	owner := f.createWidget("owner", testv1.WidgetSpec{})
	ctx := t.Context()
	ch := f.children()
	pod := func(name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/c"}}}}
	}
	// ensure creates p, Running and Ready: the API server deletes a
	// Pending pod whatever its budget says (and retries that for 10 s on
	// a conflict), and an unready one while its budget is met.
	ensure := func(p *corev1.Pod) *corev1.Pod {
		t.Helper()
		if _, err := ch.EnsureChild(ctx, owner, p); err != nil {
			t.Fatal(err)
		}
		testkit.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(p), p))
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		testkit.Must(t, env.Client.Status().Update(ctx, p))
		return p
	}

	// Replaced: the cache shows the old pod.
	old := ensure(pod("replaced", nil))
	testkit.Must(t, env.Client.Delete(ctx, old, client.GracePeriodSeconds(0)))
	replacement := ensure(pod("replaced", nil))
	stale, err := reconcile.NewChildren(staleReader{Client: f.c, pods: map[client.ObjectKey]*corev1.Pod{client.ObjectKeyFromObject(old): old.DeepCopy()}},
		env.Scheme, reconcile.WithChildrenFieldOwner("opkit-widget"))
	testkit.Must(t, err)
	seen := pod("replaced", nil)
	seen.UID = old.UID
	if op, err := stale.EvictChild(ctx, owner, seen); !errors.Is(err, reconcile.ErrChildReplaced) || op != reconcile.ChildUnchanged {
		t.Errorf("EvictChild(pod since replaced, cache stale) = %s, %v; want %s, ErrChildReplaced", op, err, reconcile.ChildUnchanged)
	}
	stillThere(t, replacement)

	// Budgeted: the budget is counted (there is no disruption controller
	// here) as allowing none. One not counted yet makes client-go retry
	// for 100 s, as the API server asks.
	budgeted := ensure(pod("budgeted", map[string]string{"app": "budgeted"}))
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "budget", Namespace: f.ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "budgeted"}}}}
	testkit.Must(t, env.Client.Create(ctx, pdb))
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	testkit.Must(t, env.Client.Status().Update(ctx, pdb))
	f.counter.Reset()
	op, err := ch.EvictChild(ctx, owner, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "budgeted", Namespace: f.ns, UID: budgeted.UID}})
	if !errors.Is(err, reconcile.ErrNoDisruptionAllowed) || !apierrors.IsTooManyRequests(err) || op != reconcile.ChildUnchanged {
		t.Errorf("EvictChild(pod of a budget without room) = %s, %v; want %s, ErrNoDisruptionAllowed", op, err, reconcile.ChildUnchanged)
	}
	stillThere(t, budgeted)

	// Not the owner's.
	foreign := pod("foreign", nil)
	testkit.Must(t, env.Client.Create(ctx, foreign))
	if op, err := ch.EvictChild(ctx, owner, pod("foreign", nil)); !ownership.IsConflict(err) || op != reconcile.ChildUnchanged {
		t.Errorf("EvictChild(pod without a controller) = %s, %v; want %s, *ownership.NotControlledError", op, err, reconcile.ChildUnchanged)
	}
	stillThere(t, foreign)

	// Evicted: the seen pod, no budget.
	f.counter.Reset()
	if op, err := ch.EvictChild(ctx, owner, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "replaced", Namespace: f.ns, UID: replacement.UID}}); err != nil || op != reconcile.ChildEvicted {
		t.Errorf("EvictChild(the pod seen) = %s, %v; want %s", op, err, reconcile.ChildEvicted)
	}
	f.wantWrites(1)
	var got corev1.Pod
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(replacement), &got); !apierrors.IsNotFound(err) && got.DeletionTimestamp.IsZero() {
		t.Errorf("pod %s after its eviction: %v, deletionTimestamp %v; want it gone or going", replacement.Name, err, got.DeletionTimestamp)
	}
	if op, err := ch.EvictChild(ctx, owner, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "replaced", Namespace: f.ns, UID: replacement.UID}}); err != nil || op != reconcile.ChildUnchanged {
		t.Errorf("EvictChild(a pod gone) = %s, %v; want %s", op, err, reconcile.ChildUnchanged)
	}
}

// stillThere fails unless p is there, of its UID, not being deleted.
func stillThere(t *testing.T, p *corev1.Pod) {
	t.Helper()
	var got corev1.Pod
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(p), &got); err != nil || got.UID != p.UID || !got.DeletionTimestamp.IsZero() {
		t.Errorf("pod %s (UID %s): %v, UID %s, deletionTimestamp %v; want it left", p.Name, p.UID, err, got.UID, got.DeletionTimestamp)
	}
}

package guard_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/guard"
	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/testenv"
)

// keep is the finalizer standing in for the owner's operator in these
// tests: Finalize runs while it is there.
const keep = "test.opkit.dev/keep"

// TestReleaseFollowsThePropagationPolicy: with the real garbage
// collector, a held child goes after Release when its owner was deleted in
// the background or the foreground, and stays, ownerless, when the user
// orphaned it (kubectl delete --cascade=orphan). Before, the collector
// took the owner's reference off the child, the guard was its last owner,
// and Release let the collector delete the data the user meant to keep
// (issue #81, item 8).
func TestReleaseFollowsThePropagationPolicy(t *testing.T) {
	env.StartControllerManager(t)
	for _, tc := range []struct {
		policy metav1.DeletionPropagation
		kept   bool
	}{
		{metav1.DeletePropagationBackground, false},
		{metav1.DeletePropagationForeground, false},
		{metav1.DeletePropagationOrphan, true},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			ctx := t.Context()
			ns := newNamespace(t)
			g := newGuard(t)
			w, child := newHeldChild(t, g, ns)
			must(t, env.Client.Delete(ctx, w, client.PropagationPolicy(tc.policy)))
			// Finalize runs once the collector has done its part: the
			// owner's reference is off the child (foreground, orphan).
			eventually(t, "the garbage collector's part", func(ctx context.Context) (bool, error) {
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
					return false, err
				}
				return !slices.ContainsFunc(w.Finalizers, func(f string) bool {
					return f == metav1.FinalizerOrphanDependents || f == metav1.FinalizerDeleteDependents
				}), nil
			})
			must(t, g.Release(ctx, w))
			testenv.Update(t, env.Client, w, func(w *testv1.Widget) { w.Finalizers = nil })

			if !tc.kept {
				testenv.WaitForDeletion(t, env.Client, child, 30*time.Second)
				return
			}
			eventually(t, "the guard to let go of the child", func(ctx context.Context) (bool, error) {
				return len(child.OwnerReferences) == 0, env.Client.Get(ctx, client.ObjectKeyFromObject(child), child)
			})
			// The collector has had its turn; a moment more for a late
			// deletion.
			time.Sleep(2 * time.Second)
			if err := get(t, child); err != nil || child.DeletionTimestamp != nil {
				t.Errorf("the orphaned child: %v, deleting %v; want it kept", err, child.DeletionTimestamp)
			}
			assertNoGuardLeft(t, w)
		})
	}
}

// TestReleaseOrphansBeforeTheCollector: an owner deleted with orphan
// propagation whose finalizer runs before the garbage collector has
// orphaned its children (no collector here) releases its guard with orphan
// propagation too, so the children stay whenever the collector comes. The
// cascade marker goes with the guard: left, the collector would take the
// owner's reference off it later and nothing would delete it.
func TestReleaseOrphansBeforeTheCollector(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t)
	g := newGuard(t)
	w, _ := newHeldChild(t, g, ns)
	cm, err := g.Get(ctx, w)
	must(t, err)
	must(t, env.Client.Delete(ctx, w, client.PropagationPolicy(metav1.DeletePropagationOrphan)))
	must(t, get(t, w))
	must(t, g.Release(ctx, w))
	err = get(t, cm)
	if err != nil || cm.DeletionTimestamp == nil || !slices.Equal(cm.Finalizers, []string{metav1.FinalizerOrphanDependents}) {
		t.Errorf("the guard after Release: %v, deleting %v, finalizers %q; want deleting with only %q",
			err, cm.DeletionTimestamp, cm.Finalizers, metav1.FinalizerOrphanDependents)
	}
	marker := &corev1.ConfigMap{}
	err = env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: guard.Name(w) + "-cascade"}, marker)
	if !apierrors.IsNotFound(err) && (err != nil || marker.DeletionTimestamp == nil) {
		t.Errorf("the cascade marker after Release: %v, owners %v; want it deleted", err, marker.OwnerReferences)
	}
	// Let the guard and its owner go: no collector runs here.
	testenv.Update(t, env.Client, cm, func(cm *corev1.ConfigMap) { cm.Finalizers = nil })
	testenv.Update(t, env.Client, w, func(w *testv1.Widget) { w.Finalizers = nil })
}

// newHeldChild creates a Widget kept by the keep finalizer, its guard, and
// a Secret the Widget controls and the guard holds.
func newHeldChild(t *testing.T, g *guard.Guard, ns string) (*testv1.Widget, *corev1.Secret) {
	t.Helper()
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w", Finalizers: []string{keep}}}
	must(t, env.Client.Create(t.Context(), w))
	cm, err := g.Ensure(t.Context(), w)
	must(t, err)
	child := guard.Hold(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: testv1.GroupVersion.String(), Kind: "Widget", Name: w.Name, UID: w.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}}}, cm)
	must(t, env.Client.Create(t.Context(), child))
	return w, child
}

// assertNoGuardLeft checks that nothing guard made for w is left.
func assertNoGuardLeft(t *testing.T, w *testv1.Widget) {
	t.Helper()
	var cms corev1.ConfigMapList
	must(t, env.Client.List(t.Context(), &cms, client.InNamespace(w.Namespace), client.HasLabels{"test.opkit.dev/guard-of"}))
	for _, cm := range cms.Items {
		if cm.DeletionTimestamp == nil {
			t.Errorf("ConfigMap %s of the guard is left", cm.Name)
		}
	}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: w.Namespace, Name: guard.Name(w)}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the guard after Release: %v, want NotFound", err)
	}
}

// TestReleaseOnACacheWithoutTheGuard: an owner deleted with orphan
// propagation whose Finalize reads through a cache that does not show
// its guard yet still orphans the held children. Release must not take
// the cache's word that the guard is gone: dropping the cascade marker
// then left a guard that the Collector released as after any other
// deletion, and the garbage collector deleted the data the user kept.
func TestReleaseOnACacheWithoutTheGuard(t *testing.T) {
	env.StartControllerManager(t)
	ctx := t.Context()
	ns := newNamespace(t)
	w, child := newHeldChild(t, newGuard(t), ns)
	must(t, env.Client.Delete(ctx, w, client.PropagationPolicy(metav1.DeletePropagationOrphan)))
	eventually(t, "the garbage collector's part", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
			return false, err
		}
		return !slices.Contains(w.Finalizers, metav1.FinalizerOrphanDependents), nil
	})
	g, err := guard.New(laggingConfigMaps(t), &testv1.Widget{})
	must(t, err)
	must(t, g.Release(ctx, w))
	testenv.Update(t, env.Client, w, func(w *testv1.Widget) { w.Finalizers = nil })
	testenv.WaitForDeletion(t, env.Client, w, 30*time.Second)

	// The Collector's turn at whatever guard is left.
	collector, err := guard.NewCollector(newGuard(t), env.Client)
	must(t, err)
	for _, name := range []string{guard.Name(w), guard.Name(w) + "-cascade"} {
		if _, err := collector.Reconcile(ctx, crreconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "no guard left", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: guard.Name(w)}, &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	time.Sleep(2 * time.Second) // a moment for a late deletion by the garbage collector
	if err := get(t, child); err != nil || child.DeletionTimestamp != nil || len(child.OwnerReferences) > 0 {
		t.Errorf("the orphaned child: %v, deleting %v, owners %v; want it kept without owners", err, child.DeletionTimestamp, child.OwnerReferences)
	}
}

// laggingConfigMaps is a client whose cache has seen no ConfigMap yet:
// it reads every other kind, and writes all.
func laggingConfigMaps(t *testing.T) client.Client {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	must(t, err)
	return interceptor.NewClient(wc, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.ConfigMap); ok {
				return apierrors.NewNotFound(corev1.Resource("configmaps"), key.Name)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
}

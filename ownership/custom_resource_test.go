package ownership_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/ownership"
)

func newWidget(t *testing.T, ns, name string) *testv1.Widget {
	t.Helper()
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: testv1.WidgetSpec{Replicas: 1}}
	if err := env.Client.Create(t.Context(), w); err != nil {
		t.Fatalf("creating Widget: %v", err)
	}
	t.Cleanup(func() {
		cur := &testv1.Widget{}
		if env.Client.Get(t.Context(), client.ObjectKeyFromObject(w), cur) == nil {
			cur.Finalizers = nil
			_ = env.Client.Update(t.Context(), cur)
			_ = env.Client.Delete(t.Context(), cur)
		}
	})
	return w
}

// TestCustomResourceFinalizers runs the finalizer lifecycle on a custom
// resource, mixing a typed writer with an unstructured one whose copy is
// stale, and then keeps status writes working with the refreshed object.
func TestCustomResourceFinalizers(t *testing.T) {
	ns := newNamespace(t)
	w := newWidget(t, ns, "w")
	key := client.ObjectKeyFromObject(w)

	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(testv1.GroupVersion.WithKind("Widget"))
	if err := env.Client.Get(t.Context(), key, u); err != nil {
		t.Fatalf("reading Widget as unstructured: %v", err)
	}
	typedClient, _ := newClient(t, hooks{})
	unstructuredClient, rec := newClient(t, hooks{})

	if _, err := ownership.EnsureFinalizer(t.Context(), typedClient, w, finA); err != nil {
		t.Fatalf("typed EnsureFinalizer() error = %v", err)
	}
	if changed, err := ownership.EnsureFinalizer(t.Context(), unstructuredClient, u, finB); err != nil || !changed {
		t.Fatalf("unstructured EnsureFinalizer() = %v, %v; want true, nil", changed, err)
	}
	assertCalls(t, rec, "patch", "get", "patch")
	if diff := cmp.Diff([]string{finA, finB}, u.GetFinalizers()); diff != "" {
		t.Errorf("unstructured object's finalizers (-want +got):\n%s", diff)
	}
	if u.GetKind() != "Widget" {
		t.Errorf("unstructured object lost its kind: %q", u.GetKind())
	}

	// The typed writer's copy is stale; it refreshes on the conflict and
	// the status write afterwards works with the returned resourceVersion.
	if changed, err := ownership.RemoveFinalizer(t.Context(), typedClient, w, finA); err != nil || !changed {
		t.Fatalf("typed RemoveFinalizer() = %v, %v; want true, nil", changed, err)
	}
	w.Status.ObservedGeneration = w.Generation
	if err := env.Client.Status().Update(t.Context(), w); err != nil {
		t.Fatalf("status update with the refreshed object: %v", err)
	}

	if err := env.Client.Delete(t.Context(), w); err != nil {
		t.Fatalf("deleting: %v", err)
	}
	if err := env.Client.Get(t.Context(), key, u); err != nil || u.GetDeletionTimestamp() == nil {
		t.Fatalf("Widget with a finalizer after delete: err %v, deletionTimestamp %v", err, u.GetDeletionTimestamp())
	}
	if changed, err := ownership.RemoveFinalizer(t.Context(), unstructuredClient, u, finB); err != nil || !changed {
		t.Fatalf("unstructured RemoveFinalizer() = %v, %v; want true, nil", changed, err)
	}
	if err := env.Client.Get(t.Context(), key, &testv1.Widget{}); !apierrors.IsNotFound(err) {
		t.Errorf("Widget after the last finalizer: err = %v, want NotFound", err)
	}
}

// TestWidgetAdoptsConfigMap adopts a built-in object under a custom owner.
func TestWidgetAdoptsConfigMap(t *testing.T) {
	ns := newNamespace(t)
	w := newWidget(t, ns, "owner")
	cm := newConfigMap(t, ns, "child", withLabels(appLabels))
	c, rec := newClient(t, hooks{})
	adopted, err := ownership.Adopt(t.Context(), c, w, cm, labels.SelectorFromSet(appLabels), env.Scheme)
	if err != nil || !adopted {
		t.Fatalf("Adopt() = %v, %v; want true, nil", adopted, err)
	}
	assertCalls(t, rec, "patch")
	want := []metav1.OwnerReference{{
		APIVersion: "test.opkit.dev/v1", Kind: "Widget", Name: "owner", UID: w.UID,
		Controller: new(true), BlockOwnerDeletion: new(true),
	}}
	if diff := cmp.Diff(want, cm.OwnerReferences); diff != "" {
		t.Errorf("owner references (-want +got):\n%s", diff)
	}
	has, err := ownership.HasOwnerReference(w, cm, env.Scheme)
	if err != nil || !has {
		t.Errorf("HasOwnerReference() = %v, %v; want true, nil", has, err)
	}
}

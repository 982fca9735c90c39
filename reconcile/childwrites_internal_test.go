package reconcile

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestWritesForgottenOnceCached: the record of a POST or an apply serves
// only until the cache shows the child; a steady pass, which writes
// nothing, drops it, rather than keeping one per child (with a copy of an
// applied child) until a later apply prunes it.
func TestWritesForgottenOnceCached(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	ch, err := NewChildren(c, scheme, WithUncachedReader(c), WithChildrenFieldOwner("test"))
	if err != nil {
		t.Fatal(err)
	}
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: "ns", UID: "owner-uid"}}
	desired := func() *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "child", Namespace: "ns"}, Data: map[string][]byte{"k": []byte("v")}}
	}
	if op, err := ch.EnsureChild(t.Context(), owner, desired()); err != nil || op != OperationCreated {
		t.Fatalf("first EnsureChild = %q, %v; want created", op, err)
	}
	if n := len(ch.applied.m); n != 1 {
		t.Fatalf("%d records after the create, want 1", n)
	}
	if op, err := ch.EnsureChild(t.Context(), owner, desired()); err != nil || op != OperationNone {
		t.Fatalf("second EnsureChild = %q, %v; want no write", op, err)
	}
	if n := len(ch.applied.m); n != 0 {
		t.Errorf("%d records once the cache shows the child, want 0", n)
	}
	changed := desired()
	changed.Data["k"] = []byte("w")
	if op, err := ch.EnsureChild(t.Context(), owner, changed); err != nil || op != OperationUpdated {
		t.Fatalf("EnsureChild of a change = %q, %v; want updated", op, err)
	}
	if n := len(ch.applied.m); n != 1 {
		t.Fatalf("%d records after the update, want 1", n)
	}
	changed = desired()
	changed.Data["k"] = []byte("w")
	if op, err := ch.EnsureChild(t.Context(), owner, changed); err != nil || op != OperationNone {
		t.Fatalf("EnsureChild after the update = %q, %v; want no write", op, err)
	}
	if n := len(ch.applied.m); n != 0 {
		t.Errorf("%d records once the cache shows the update, want 0", n)
	}
}

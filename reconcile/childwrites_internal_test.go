package reconcile

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
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
	if op, err := ch.EnsureChild(t.Context(), owner, desired()); err != nil || op != ChildCreated {
		t.Fatalf("first EnsureChild = %q, %v; want created", op, err)
	}
	if n := len(ch.applied.m); n != 1 {
		t.Fatalf("%d records after the create, want 1", n)
	}
	if op, err := ch.EnsureChild(t.Context(), owner, desired()); err != nil || op != ChildUnchanged {
		t.Fatalf("second EnsureChild = %q, %v; want no write", op, err)
	}
	if n := len(ch.applied.m); n != 0 {
		t.Errorf("%d records once the cache shows the child, want 0", n)
	}
	changed := desired()
	changed.Data["k"] = []byte("w")
	if op, err := ch.EnsureChild(t.Context(), owner, changed); err != nil || op != ChildUpdated {
		t.Fatalf("EnsureChild of a change = %q, %v; want updated", op, err)
	}
	if n := len(ch.applied.m); n != 1 {
		t.Fatalf("%d records after the update, want 1", n)
	}
	changed = desired()
	changed.Data["k"] = []byte("w")
	if op, err := ch.EnsureChild(t.Context(), owner, changed); err != nil || op != ChildUnchanged {
		t.Fatalf("EnsureChild after the update = %q, %v; want no write", op, err)
	}
	if n := len(ch.applied.m); n != 0 {
		t.Errorf("%d records once the cache shows the update, want 0", n)
	}
}

// TestCreateRecordOutlivesAnUncachedRead: a pass that reads a child it
// created through the uncached reader, the cache being behind, keeps the
// record, so that the next such pass reads it again rather than POST it.
func TestCreateRecordOutlivesAnUncachedRead(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	server := fake.NewClientBuilder().WithScheme(scheme).Build()
	behind := fake.NewClientBuilder().WithScheme(scheme).Build() // a cache that never catches up
	var creates int
	c := interceptor.NewClient(server, interceptor.Funcs{
		Get: func(ctx context.Context, _ client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			return behind.Get(ctx, key, obj, opts...)
		},
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			creates++
			return cl.Create(ctx, obj, opts...)
		},
	})
	ch, err := NewChildren(c, scheme, WithUncachedReader(server), WithChildrenFieldOwner("test"))
	if err != nil {
		t.Fatal(err)
	}
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: "ns", UID: "owner-uid"}}
	for pass := range 3 {
		desired := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "child", Namespace: "ns"}, Data: map[string][]byte{"k": []byte("v")}}
		if _, err := ch.EnsureChild(t.Context(), owner, desired); err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
	}
	if creates != 1 {
		t.Errorf("%d POSTs in 3 passes on a cache that never shows the child, want 1", creates)
	}
}

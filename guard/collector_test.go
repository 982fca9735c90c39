package guard_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/guard"
	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
)

// TestCollector: a guard is released once its owner is gone (not found, or
// replaced by a new owner of the same name), also while being deleted, and
// its cascade marker deleted after it; a guard or marker of a live owner,
// or a guard of another kind, is left alone.
func TestCollector(t *testing.T) {
	ns := newNamespace(t)
	g := newGuard(t)
	c, err := guard.NewCollector(g, env.Client)
	must(t, err)
	ensure := func(w *testv1.Widget) *corev1.ConfigMap {
		cm, err := g.Ensure(t.Context(), w)
		must(t, err)
		return cm
	}
	// marker is w's cascade marker, which Ensure made.
	marker := func(w *testv1.Widget) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: guard.Name(w) + "-cascade"}}
	}
	gone := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone", UID: "uid-of-a-deleted-widget"}}
	replaced := newWidget(t, ns, "replaced")
	replacedGuard := ensure(replaced)
	must(t, env.Client.Delete(t.Context(), replaced))
	newer := newWidget(t, ns, "replaced")
	deleting := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deleting", UID: "uid-of-another-deleted-widget"}}
	deletingGuard := ensure(deleting)
	must(t, env.Client.Delete(t.Context(), deletingGuard))
	live := newWidget(t, ns, "live")
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gadget-guard",
		Labels:      map[string]string{g.Label(): "uid-of-a-gadget"},
		Annotations: map[string]string{guard.AnnotationOwnerKind: "Gadget.test.opkit.dev"}}}
	must(t, env.Client.Create(t.Context(), other))

	for _, tc := range []struct {
		name  string
		guard *corev1.ConfigMap
		kept  bool
	}{
		{"owner gone", ensure(gone), false},
		{"owner gone, marker", marker(gone), false},
		{"owner replaced", replacedGuard, false},
		{"owner replaced, marker", marker(replaced), false},
		{"being deleted, owner gone", deletingGuard, false},
		{"owner live", ensure(live), true},
		{"owner live, marker", marker(live), true},
		{"owner replaced, new guard", nil, true},
		{"another kind", other, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.guard == nil {
				tc.guard = ensure(newer)
			}
			if _, err := c.Reconcile(t.Context(), crreconcile.Request{NamespacedName: client.ObjectKeyFromObject(tc.guard)}); err != nil {
				t.Fatal(err)
			}
			err := get(t, tc.guard)
			if tc.kept && err != nil {
				t.Errorf("guard %s: %v, want kept", tc.guard.Name, err)
			}
			if !tc.kept && !apierrors.IsNotFound(err) {
				t.Errorf("guard %s: %v (finalizers %v), want released", tc.guard.Name, err, tc.guard.Finalizers)
			}
		})
	}
}

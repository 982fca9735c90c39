package guard_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/guard"
	"github.com/opkit-dev/opkit/ownership"
)

func TestEnsure(t *testing.T) {
	ns := newNamespace(t)
	g := newGuard(t)
	w := newWidget(t, ns, "w")
	cm, err := g.Ensure(t.Context(), w)
	must(t, err)
	want := map[string]string{"test.opkit.dev/guard-of": string(w.UID), guard.LabelGuard: "true"}
	if diff := cmp.Diff(want, cm.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{guard.Finalizer}, cm.Finalizers); diff != "" {
		t.Errorf("finalizers (-want +got):\n%s", diff)
	}
	marker := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: guard.Name(w) + "-cascade"}}
	must(t, get(t, marker))
	if len(marker.OwnerReferences) != 1 || marker.OwnerReferences[0].UID != w.UID || cm.Annotations[guard.AnnotationMarker] != "true" {
		t.Errorf("cascade marker owners %v, guard annotations %v; want owned by %s alone and recorded", marker.OwnerReferences, cm.Annotations, w.UID)
	}
	again, err := g.Ensure(t.Context(), w)
	must(t, err)
	if again.UID != cm.UID || again.ResourceVersion != cm.ResourceVersion {
		t.Errorf("a second Ensure changed the guard: %s/%s, want %s/%s", again.UID, again.ResourceVersion, cm.UID, cm.ResourceVersion)
	}
}

// TestEnsureAdoptsAnOlderGuard: a guard made before LabelGuard and the
// finalizer (the etcd operator's, under its own label key) gains both.
func TestEnsureAdoptsAnOlderGuard(t *testing.T) {
	ns := newNamespace(t)
	g := newGuard(t, guard.WithLabel("example.com/guard-of"))
	w := newWidget(t, ns, "w")
	old := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: guard.Name(w),
		Labels: map[string]string{"example.com/guard-of": string(w.UID)}}}
	must(t, env.Client.Create(t.Context(), old))
	cm, err := g.Ensure(t.Context(), w)
	must(t, err)
	if cm.UID != old.UID || cm.Labels[guard.LabelGuard] != "true" || len(cm.Finalizers) != 1 {
		t.Errorf("guard %s labels %v finalizers %v, want %s with %s and %s", cm.UID, cm.Labels, cm.Finalizers, old.UID, guard.LabelGuard, guard.Finalizer)
	}
	t.Cleanup(func() { _ = g.Release(t.Context(), w) })
}

func TestEnsureRefusesAForeignConfigMap(t *testing.T) {
	ns := newNamespace(t)
	g := newGuard(t)
	for name, labels := range map[string]map[string]string{
		"unlabelled":    nil,
		"another-owner": {"test.opkit.dev/guard-of": "some-other-uid"},
		"another-kind":  {"test.opkit.dev/guard-of": "uid-below", guard.LabelGuard: "true"},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWidget(t, ns, name)
			if labels["test.opkit.dev/guard-of"] == "uid-below" {
				labels["test.opkit.dev/guard-of"] = string(w.UID)
			}
			foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: guard.Name(w), Labels: labels,
				Annotations: map[string]string{guard.AnnotationOwnerKind: "Gadget.test.opkit.dev"}}}
			must(t, env.Client.Create(t.Context(), foreign))
			_, err := g.Ensure(t.Context(), w)
			var nc *ownership.NotControlledError
			if !errors.As(err, &nc) {
				t.Fatalf("Ensure: %v, want *ownership.NotControlledError", err)
			}
			must(t, g.Release(t.Context(), w))
			must(t, get(t, foreign))
		})
	}
}

func TestEnsureRefusesAnOverlongName(t *testing.T) {
	g := newGuard(t)
	w := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: strings.Repeat("a", 250)}}
	if _, err := g.Ensure(t.Context(), w); !errors.Is(err, guard.ErrNameTooLong) {
		t.Errorf("Ensure: %v, want ErrNameTooLong", err)
	}
}

func TestHold(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "w-guard", UID: "g1"}}
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "w-guard", UID: "g1"}
	other := metav1.OwnerReference{APIVersion: "test.opkit.dev/v1", Kind: "Widget", Name: "w", UID: "w1"}
	for _, tc := range []struct {
		name       string
		in         metav1.ObjectMeta
		wantRefs   []metav1.OwnerReference
		wantLabels map[string]string
	}{
		{"new", metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{other}},
			[]metav1.OwnerReference{other, ref}, map[string]string{guard.LabelHeldBy: "g1"}},
		{"owned before the label", metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{ref}, Labels: map[string]string{"a": "b"}},
			[]metav1.OwnerReference{ref}, map[string]string{"a": "b", guard.LabelHeldBy: "g1"}},
		{"held", metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{ref}, Labels: map[string]string{guard.LabelHeldBy: "g1"}},
			[]metav1.OwnerReference{ref}, map[string]string{guard.LabelHeldBy: "g1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := guard.Hold(&corev1.Secret{ObjectMeta: tc.in}, cm)
			if diff := cmp.Diff(tc.wantRefs, obj.OwnerReferences); diff != "" {
				t.Errorf("owners (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantLabels, obj.Labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if !guard.IsHeld(obj, cm) {
				t.Error("IsHeld is false after Hold")
			}
		})
	}
	if s := guard.Hold(&corev1.Secret{}, nil); len(s.OwnerReferences)+len(s.Labels) != 0 {
		t.Errorf("Hold with no guard changed the object: %v", s.ObjectMeta)
	}
}

func TestHoldExisting(t *testing.T) {
	ns := newNamespace(t)
	g := newGuard(t)
	w := newWidget(t, ns, "w")
	cm, err := g.Ensure(t.Context(), w)
	must(t, err)
	t.Cleanup(func() { _ = g.Release(t.Context(), w) })
	free, held := newSecret(t, ns, "free", nil), newSecret(t, ns, "held", cm)
	rv := held.ResourceVersion
	must(t, guard.HoldExisting(t.Context(), env.Client, cm, free, held))
	must(t, get(t, free))
	must(t, get(t, held))
	if !guard.IsHeld(free, cm) {
		t.Errorf("free is not held after HoldExisting: %v", free.ObjectMeta)
	}
	if held.ResourceVersion != rv {
		t.Errorf("HoldExisting wrote an object already held")
	}
}

func TestRelease(t *testing.T) {
	ns := newNamespace(t)
	g := newGuard(t)
	w := newWidget(t, ns, "w")
	cm, err := g.Ensure(t.Context(), w)
	must(t, err)
	must(t, g.Release(t.Context(), w))
	if err := get(t, cm); !apierrors.IsNotFound(err) {
		t.Errorf("the guard after Release: %v (finalizers %v), want NotFound", err, cm.Finalizers)
	}
	must(t, g.Release(t.Context(), w))
}

package reconcile_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/ownership"
	"github.com/opkit-dev/opkit/reconcile"
)

// TestEnsureChildCreated: a create-only child is created with one write and
// never changed afterwards, even when desired changes; an object of its
// name that the owner does not control is refused.
func TestEnsureChildCreated(t *testing.T) {
	f := newFixture(t)
	w := f.createWidget("w", testv1.WidgetSpec{})
	ch := f.children()
	desired := func(v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "w-once", Namespace: f.ns}, Data: map[string]string{"v": v}}
	}
	f.counter.Reset()
	op, err := ch.EnsureChildCreated(t.Context(), w, desired("1"))
	testkit.Must(t, err)
	if op != reconcile.ChildCreated {
		t.Errorf("first EnsureChildCreated: %s, want created", op)
	}
	f.wantWrites(1)

	f.counter.Reset()
	live := desired("2")
	op, err = ch.EnsureChildCreated(t.Context(), w, live)
	testkit.Must(t, err)
	if op != reconcile.ChildUnchanged || live.Data["v"] != "1" {
		t.Errorf("EnsureChildCreated with a changed desired: %s, live data %v; want none and the first data", op, live.Data)
	}
	f.wantWrites(0)
	if got := f.configMap("w-once").Data["v"]; got != "1" {
		t.Errorf("data = %s, want 1: a create-only child is never changed", got)
	}

	orphan := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "w-orphan", Namespace: f.ns}}
	testkit.Must(t, env.Client.Create(t.Context(), orphan))
	_, err = ch.EnsureChildCreated(t.Context(), w, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "w-orphan", Namespace: f.ns}})
	if !ownership.IsConflict(err) {
		t.Errorf("EnsureChildCreated over an orphan = %v, want a NotControlledError", err)
	}
}

// TestDependentCreateOnly: a CreateOnly dependent is created once and not
// re-applied when the parent's spec changes.
func TestDependentCreateOnly(t *testing.T) {
	f := newFixture(t)
	dep := configMapDep("job")
	dep.Ready = nil
	dep.CreateOnly = true
	r := newReconciler(t, f, &workflowHooks{wf: newWorkflow(t, f, dep)})
	f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
	f.mustPass(r, "w")
	w := f.get("w")
	w.Spec.Replicas = 2
	testkit.Must(t, env.Client.Update(t.Context(), w))
	f.mustPass(r, "w")
	f.wantWrites(1) // the status only
	if got := f.configMap("w-job").Data["replicas"]; got != "1" {
		t.Errorf("create-only child replicas = %s, want 1", got)
	}

	bad := &reconcile.Dependent[*testv1.Widget, *corev1.ConfigMap]{Name: "bad", CreateOnly: true,
		Apply: func(context.Context, *testv1.Widget) (runtime.ApplyConfiguration, error) {
			return corev1ac.ConfigMap("x", "y"), nil
		}}
	if _, err := reconcile.NewWorkflow[*testv1.Widget](f.children(), bad); err == nil || !strings.Contains(err.Error(), "CreateOnly takes Build") {
		t.Errorf("NewWorkflow with CreateOnly and Apply = %v, want an error", err)
	}
}

// TestEnsureChildCreatedAfterADeletion: a create-only child deleted after its
// create is created again by the next call, as documented; one still
// unseen by the watch of the pass's Reconciler is not read again.
func TestEnsureChildCreatedAfterADeletion(t *testing.T) {
	configMaps := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	for _, tc := range []struct {
		name    string
		watched bool
		delete  bool
		wantOp  reconcile.ChildWrite
		want    map[string]int
	}{
		{name: "deleted", delete: true, wantOp: reconcile.ChildCreated, want: map[string]int{http.MethodGet: 1, http.MethodPost: 1}},
		{name: "deleted, watched, its event arrived", watched: true, delete: true, wantOp: reconcile.ChildCreated, want: map[string]int{http.MethodGet: 1, http.MethodPost: 1}},
		{name: "not seen by the cache yet", wantOp: reconcile.ChildUnchanged, want: map[string]int{http.MethodGet: 1}},
		{name: "watched, no event yet", watched: true, wantOp: reconcile.ChildUnchanged, want: map[string]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			w := f.createWidget("w", testv1.WidgetSpec{})
			ctx, observe, ch := f.blindPass(tc.watched, configMaps)
			desired := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "w-once", Namespace: f.ns}}
			if op, err := ch.EnsureChildCreated(ctx, w, desired); err != nil || op != reconcile.ChildCreated {
				t.Fatalf("first EnsureChildCreated = %s, %v; want created", op, err)
			}
			if tc.delete {
				testkit.Must(t, env.Client.Delete(t.Context(), desired))
				observe(configMaps, client.ObjectKeyFromObject(desired))
			}

			f.counter.Reset()
			again := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "w-once", Namespace: f.ns}}
			if op, err := ch.EnsureChildCreated(ctx, w, again); err != nil || op != tc.wantOp {
				t.Errorf("EnsureChildCreated again = %s, %v; want %s", op, err, tc.wantOp)
			}
			if diff := cmp.Diff(tc.want, f.counter.Counts(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
			testkit.Must(t, env.Client.Get(t.Context(), client.ObjectKeyFromObject(again), &corev1.ConfigMap{}))
		})
	}
}

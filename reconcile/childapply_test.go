package reconcile_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
)

// ownedBy returns the fields manager owns on obj, as managedFields'
// FieldsV1 JSON.
func ownedBy(obj client.Object, manager string) string {
	for _, e := range obj.GetManagedFields() {
		if e.Manager == manager && e.FieldsV1 != nil {
			return string(e.FieldsV1.GetRawBytes())
		}
	}
	return ""
}

// TestEnsureChildApplied: an apply configuration is applied with only the
// fields it sets, owned by the field owner; another writer's fields stay;
// a second call with the same configuration sends nothing and returns the
// live typed child.
func TestEnsureChildApplied(t *testing.T) {
	f := newFixture(t)
	w := f.createWidget("w", testv1.WidgetSpec{})
	ch := f.children()
	ac := corev1ac.ConfigMap("w-config", f.ns).WithLabels(map[string]string{"app": "w"}).WithData(map[string]string{"a": "1"})

	f.counter.Reset()
	live, op, err := ch.EnsureChildApplied(t.Context(), w, ac)
	testkit.Must(t, err)
	if op != reconcile.ChildCreated {
		t.Errorf("first EnsureChildApplied: %s, want created", op)
	}
	f.wantWrites(1)
	if _, ok := live.(*corev1.ConfigMap); !ok {
		t.Fatalf("EnsureChildApplied returned %T, want *corev1.ConfigMap", live)
	}
	cm := f.configMap("w-config")
	if got := ownedBy(cm, "opkit-widget"); strings.Contains(got, "f:binaryData") || strings.Contains(got, "f:immutable") || !strings.Contains(got, `"f:a"`) {
		t.Errorf("opkit-widget owns %s, want data.a, the labels and the owner reference only", got)
	}

	cm.Data["b"] = "2"
	testkit.Must(t, env.Client.Update(t.Context(), cm, client.FieldOwner("other")))
	f.counter.Reset()
	live, op, err = ch.EnsureChildApplied(t.Context(), w, ac)
	testkit.Must(t, err)
	if op != reconcile.ChildUnchanged {
		t.Errorf("EnsureChildApplied of an unchanged configuration: %s, want none", op)
	}
	f.wantWrites(0)
	if diff := cmp.Diff(map[string]string{"a": "1", "b": "2"}, live.(*corev1.ConfigMap).Data); diff != "" {
		t.Errorf("live data (-want +got):\n%s", diff)
	}

	ac.WithData(map[string]string{"a": "3"})
	_, op, err = ch.EnsureChildApplied(t.Context(), w, ac)
	testkit.Must(t, err)
	if diff := cmp.Diff(map[string]string{"a": "3", "b": "2"}, f.configMap("w-config").Data); op != reconcile.ChildUpdated || diff != "" {
		t.Errorf("changed configuration: %s, data (-want +got):\n%s", op, diff)
	}
}

func TestEnsureChildAppliedRefusesAConfigurationWithoutKind(t *testing.T) {
	f := newFixture(t)
	w := f.createWidget("w", testv1.WidgetSpec{})
	tests := []struct {
		name string
		ac   runtime.ApplyConfiguration
		want string
	}{
		{"nil", nil, "apply configuration is nil"},
		{"no constructor", (&corev1ac.ConfigMapApplyConfiguration{}).WithName("x"), "needs apiVersion and kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := f.children().EnsureChildApplied(t.Context(), w, tt.ac)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("EnsureChildApplied = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestDependentApply: a Dependent built as an apply configuration is
// applied once, its Ready sees the typed live child, and a steady pass
// writes nothing.
func TestDependentApply(t *testing.T) {
	f := newFixture(t)
	var seen string
	dep := &reconcile.Dependent[*testv1.Widget, *corev1.ConfigMap]{
		Name: "config",
		Apply: func(_ context.Context, w *testv1.Widget) (runtime.ApplyConfiguration, error) {
			return corev1ac.ConfigMap(w.Name+"-config", w.Namespace).WithData(map[string]string{"message": w.Spec.Message}), nil
		},
		Ready: func(cm *corev1.ConfigMap) (bool, string) {
			seen = cm.Data["message"]
			return true, ""
		},
	}
	r := newReconciler(t, f, &workflowHooks{wf: newWorkflow(t, f, dep)})
	f.createWidget("w", testv1.WidgetSpec{Message: "hi"})
	f.mustPass(r, "w")
	f.wantWrites(2) // the child, the status
	if seen != "hi" {
		t.Errorf("Ready saw message %q, want hi", seen)
	}
	f.mustPass(r, "w")
	f.wantWrites(0)

	both := &reconcile.Dependent[*testv1.Widget, *corev1.ConfigMap]{Name: "both", Build: dep.Build, Apply: dep.Apply}
	both.Build = func(context.Context, *testv1.Widget) (*corev1.ConfigMap, error) { return nil, nil }
	if _, err := reconcile.NewWorkflow[*testv1.Widget](f.children(), both); err == nil || !strings.Contains(err.Error(), "set one of Build and Apply") {
		t.Errorf("NewWorkflow with Build and Apply = %v, want an error", err)
	}
}

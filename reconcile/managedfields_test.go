package reconcile_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
)

// TestKeepManagedFieldsOfKeepsOnlyTheOwner: the transform keeps the field
// owner's entries, main resource and status alike, and drops the rest;
// what is not an object (a tombstone) passes through.
func TestKeepManagedFieldsOfKeepsOnlyTheOwner(t *testing.T) {
	entry := func(manager, sub string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Subresource: sub, Operation: metav1.ManagedFieldsOperationApply}
	}
	transform := reconcile.KeepManagedFieldsOf("opkit-widget")
	tests := []struct {
		name     string
		in, want []metav1.ManagedFieldsEntry
	}{
		{"others dropped", []metav1.ManagedFieldsEntry{entry("kubectl", ""), entry("opkit-widget", "status"), entry("flux", ""), entry("opkit-widget", "")},
			[]metav1.ManagedFieldsEntry{entry("opkit-widget", "status"), entry("opkit-widget", "")}},
		{"only the owner's", []metav1.ManagedFieldsEntry{entry("opkit-widget", "status")}, []metav1.ManagedFieldsEntry{entry("opkit-widget", "status")}},
		// An entry owning nothing: no entries at all would read as a
		// cache that strips them.
		{"none of the owner's", []metav1.ManagedFieldsEntry{entry("kubectl", "")}, []metav1.ManagedFieldsEntry{{Manager: "opkit-widget",
			Operation: metav1.ManagedFieldsOperationApply, Subresource: "status", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1("{}")}}},
		{"none at all", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", ManagedFields: tt.in}}
			out, err := transform(w)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, out.(*testv1.Widget).ManagedFields); diff != "" {
				t.Errorf("managedFields (-want +got):\n%s", diff)
			}
		})
	}
	tomb := toolscache.DeletedFinalStateUnknown{Key: "ns/w", Obj: "gone"}
	if out, err := transform(tomb); err != nil || out != tomb {
		t.Errorf("transform(tombstone) = %v, %v; want it unchanged", out, err)
	}
}

// TestKeepManagedFieldsOfKeepsStatusKeys: of the owner's status entry
// the cache keeps the status fields' names and the conditions' keys;
// its other entries, and entries it cannot read, stay whole.
func TestKeepManagedFieldsOfKeepsStatusKeys(t *testing.T) {
	const (
		condition = `{".":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}}`
		status    = `{"f:status":{".":{},"f:conditions":{".":{},"k:{\"type\":\"Ready\"}":` + condition +
			`,"k:{\"type\":\"Degraded\"}":` + condition + `},"f:nodes":{},"f:observed":{"f:generation":{}}}}`
		spec = `{"f:spec":{"f:replicas":{}}}`
	)
	now := metav1.Now()
	entry := func(sub, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: "opkit-widget", Subresource: sub, Operation: metav1.ManagedFieldsOperationApply,
			FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields), Time: &now}
	}
	kept := entry("status", `{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{},"k:{\"type\":\"Degraded\"}":{}},"f:nodes":{},"f:observed":{}}}`)
	kept.Time = nil
	tests := []struct {
		name     string
		in, want metav1.ManagedFieldsEntry
	}{
		{"status", entry("status", status), kept},
		{"main resource", entry("", spec), entry("", spec)},
		{"not JSON", entry("status", `{"f:status":`), entry("status", `{"f:status":`)},
		{"conditions not an object", entry("status", `{"f:status":{"f:conditions":[]}}`), entry("status", `{"f:status":{"f:conditions":[]}}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", ManagedFields: []metav1.ManagedFieldsEntry{tt.in}}}
			out, err := reconcile.KeepManagedFieldsOf("opkit-widget")(w)
			testkit.Must(t, err)
			got := out.(*testv1.Widget).ManagedFields
			if diff := cmp.Diff([]metav1.ManagedFieldsEntry{tt.want}, got); diff != "" {
				t.Errorf("managedFields (-want +got):\n%s", diff)
			}
		})
	}
}

// TestKeepManagedFieldsOfWithTheReconciler: a Reconciler reading through
// the transform of its own field owner keeps every condition it wrote
// when a later pass changes only one, and another manager's condition
// survives. With the transform of another name (here the other
// manager's) the pass would drop the conditions it did not change: it
// fails with ErrFieldOwnerMismatch instead, once it reads its own write
// without its entry, and writes nothing.
func TestKeepManagedFieldsOfWithTheReconciler(t *testing.T) {
	tests := []struct {
		name    string
		keep    string
		wantErr error
	}{
		{"the Reconciler's field owner", "opkit-widget", nil},
		{"another name", "other-controller", reconcile.ErrFieldOwnerMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			created := f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
			testkit.Must(t, setExternal(t.Context(), "w", f.ns, metav1.ConditionTrue, "another manager's"))

			c := transformedClient(t, f, reconcile.KeepManagedFieldsOf(tt.keep))
			ch, err := reconcile.NewChildren(c, env.Scheme, reconcile.WithChildrenFieldOwner("opkit-widget"))
			testkit.Must(t, err)
			pass := 0
			hooks := &widgetHooks{children: ch, onReconc: func(_ context.Context, w *testv1.Widget) (reconcile.Result, bool) {
				pass++
				if pass == 1 {
					statusutil.MarkTrue(w, "Extra", "Set", "set by the first pass")
					return reconcile.Result{}, false
				}
				statusutil.MarkTrue(w, "Available", "Changed", "the only change of the second pass")
				return reconcile.Done(), true
			}}
			r, err := reconcile.New[*testv1.Widget](c, env.Scheme, hooks)
			testkit.Must(t, err)
			req := crreconcile.Request{NamespacedName: client.ObjectKeyFromObject(created)}
			if _, err := r.Reconcile(t.Context(), req); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Reconcile(t.Context(), req); !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("the second pass: err = %v, want %v", err, tt.wantErr)
			}
			w := f.get("w")
			got := conditionTypes(w)
			if !got["External"] || !got["Extra"] {
				t.Errorf("conditions %v, want External (another manager's) and Extra (the first pass's)", got)
			}
			wantReason := "Changed"
			if tt.wantErr != nil {
				wantReason = "ChildCreated" // the first pass's: the second wrote nothing
			}
			if c := meta.FindStatusCondition(w.Status.Conditions, "Available"); c == nil || c.Reason != wantReason {
				t.Errorf("Available %+v, want reason %s", c, wantReason)
			}
		})
	}
}

// transformedClient is f's client whose reads go through transform, as a
// cache's would.
func transformedClient(t *testing.T, f *fixture, transform toolscache.TransformFunc) client.Client {
	t.Helper()
	return interceptor.NewClient(withWatch(t, f), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			_, err := transform(obj)
			return err
		},
	})
}

// TestKeepManagedFieldsOfBeforeTheFirstStatusWrite: a Reconciler reading
// through the transform an object whose status only another manager has
// written sends what its pass changed, and takes no other field over.
// Before, the transform left no managedFields, which the Reconciler read
// as a cache that strips them all, and it applied every top-level status
// field with force: the other manager's replicas became its own (issue
// #81, item 2).
func TestKeepManagedFieldsOfBeforeTheFirstStatusWrite(t *testing.T) {
	f := newFixture(t)
	created := f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"replicas": int64(7)}}}
	u.SetGroupVersionKind(testv1.GroupVersion.WithKind("Widget"))
	u.SetNamespace(f.ns)
	u.SetName("w")
	testkit.Must(t, env.Client.Status().Apply(t.Context(), client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("other-controller")))

	c := transformedClient(t, f, reconcile.KeepManagedFieldsOf("opkit-widget"))
	hooks := &widgetHooks{children: f.children(), onReconc: func(_ context.Context, w *testv1.Widget) (reconcile.Result, bool) {
		statusutil.MarkTrue(w, "Mine", "Set", "the pass's only change")
		return reconcile.Done(), true
	}}
	r, err := reconcile.New[*testv1.Widget](c, env.Scheme, hooks)
	testkit.Must(t, err)
	if _, err := r.Reconcile(t.Context(), crreconcile.Request{NamespacedName: client.ObjectKeyFromObject(created)}); err != nil {
		t.Fatal(err)
	}
	got := f.get("w")
	if !conditionTypes(got)["Mine"] {
		t.Fatalf("conditions %v, want Mine", conditionTypes(got))
	}
	for _, e := range got.ManagedFields {
		if e.Manager == "opkit-widget" && e.Subresource == "status" && strings.Contains(string(e.FieldsV1.GetRawBytes()), `"f:replicas"`) {
			t.Errorf("opkit-widget took status.replicas over: %s", e.FieldsV1.GetRawBytes())
		}
	}
}

// BenchmarkKeepManagedFieldsOf is the transform's cost per cached write
// of an object whose status entry holds five conditions.
func BenchmarkKeepManagedFieldsOf(b *testing.B) {
	const condition = `{".":{},"f:lastTransitionTime":{},"f:message":{},"f:observedGeneration":{},"f:reason":{},"f:status":{},"f:type":{}}`
	status := `{"f:status":{"f:conditions":{`
	for i, c := range []string{"Available", "Degraded", "Progressing", "Ready", "Reconciling"} {
		if i > 0 {
			status += ","
		}
		status += `"k:{\"type\":\"` + c + `\"}":` + condition
	}
	status += `},"f:nodes":{},"f:observedGeneration":{},"f:readyReplicas":{},"f:selector":{}}}`
	transform := reconcile.KeepManagedFieldsOf("opkit-widget")
	for b.Loop() {
		w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{{
			Manager: "opkit-widget", Subresource: "status", FieldsV1: metav1.NewFieldsV1(status)}}}}
		if _, err := transform(w); err != nil {
			b.Fatal(err)
		}
	}
}

// TestKeepManagedFieldsOfAnotherNameUnderAManager: the manager's cache
// keeps another name's entries. The event of the Reconciler's first
// status write shows the mismatch; the next pass, a spec change's,
// writes nothing rather than drop the conditions it would not resend.
func TestKeepManagedFieldsOfAnotherNameUnderAManager(t *testing.T) {
	f := newFixture(t)
	cfg, counter := env.CountingConfig()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: env.Scheme,
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{f.ns: {}},
			ByObject: map[client.Object]cache.ByObject{&testv1.Widget{}: {Transform: reconcile.KeepManagedFieldsOf("someone-else")}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	testkit.Must(t, err)
	ch, err := reconcile.NewChildren(mgr.GetClient(), mgr.GetScheme())
	testkit.Must(t, err)
	_, err = reconcile.SetupWithManager[*testv1.Widget](mgr, &widgetHooks{children: ch},
		reconcile.WithName("widget-"+f.ns), reconcile.WithOwns(&corev1.ConfigMap{}), reconcile.WithSkipNameValidation())
	testkit.Must(t, err)
	testkit.Run(t, mgr)

	f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
	waitFor(t, f, "w", func(w *testv1.Widget) bool { return w.Status.ObservedGeneration == 1 })
	time.Sleep(time.Second) // the status write's event
	w := f.get("w")
	w.Spec.Replicas = 2
	counter.Reset()
	testkit.Must(t, env.Client.Update(t.Context(), w))
	time.Sleep(3 * time.Second)
	if n := counter.WritesTo("/widgets"); n != 0 || f.get("w").Status.ObservedGeneration != 1 {
		t.Errorf("the spec change's pass sent %d writes to widgets (observedGeneration %d), want none: the cache strips the Reconciler's entry",
			n, f.get("w").Status.ObservedGeneration)
	}
}

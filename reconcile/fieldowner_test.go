package reconcile_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
)

// appliers returns the managers that applied obj's fields.
func appliers(obj client.Object) []string {
	var out []string
	for _, m := range obj.GetManagedFields() {
		if m.Operation == metav1.ManagedFieldsOperationApply {
			out = append(out, m.Manager+"/"+m.Subresource)
		}
	}
	return out
}

// TestChildrenApplyAsTheReconcilersFieldOwner: the field owner is said once,
// on the Reconciler; a Children made without one applies the pass's
// children as that owner, and the hooks can read it from the pass's ctx.
func TestChildrenApplyAsTheReconcilersFieldOwner(t *testing.T) {
	f := newFixture(t)
	ch, err := reconcile.NewChildren(f.c, env.Scheme)
	testkit.Must(t, err)
	var seen string
	hooks := &widgetHooks{children: ch, onReconc: func(ctx context.Context, _ *testv1.Widget) (reconcile.Result, bool) {
		seen, _ = reconcile.FieldOwnerFrom(ctx)
		return reconcile.Result{}, false
	}}
	r := newReconciler(t, f, hooks, reconcile.WithFieldOwner("greeter"), reconcile.WithSummary(statusutil.WithConditions("Available")))
	if r.FieldOwner() != "greeter" {
		t.Errorf("FieldOwner() = %q, want greeter", r.FieldOwner())
	}
	f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
	f.mustPass(r, "w")

	if seen != "greeter" {
		t.Errorf("FieldOwnerFrom(pass ctx) = %q, want greeter", seen)
	}
	cm := &corev1.ConfigMap{}
	testkit.Must(t, env.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "w-child"}, cm))
	if diff := cmp.Diff([]string{"greeter/"}, appliers(cm)); diff != "" {
		t.Errorf("child applied by (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"greeter/status"}, appliers(f.get("w"))); diff != "" {
		t.Errorf("status applied by (-want +got):\n%s", diff)
	}
	if _, ok := reconcile.FieldOwnerFrom(t.Context()); ok {
		t.Error("FieldOwnerFrom found a field owner in a ctx that is no pass's")
	}
}

// TestEnsureChildNeedsOneFieldOwner: outside a pass a Children needs its
// own field owner, and inside one it must not disagree with the
// Reconciler's. Neither case writes.
func TestEnsureChildNeedsOneFieldOwner(t *testing.T) {
	f := newFixture(t)
	owner := f.createWidget("w", testv1.WidgetSpec{})
	bare, err := reconcile.NewChildren(f.c, env.Scheme)
	testkit.Must(t, err)
	f.counter.Reset()
	_, err = bare.EnsureChild(t.Context(), owner, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: f.ns}})
	if !errors.Is(err, reconcile.ErrNoFieldOwner) {
		t.Errorf("EnsureChild outside a pass without a field owner: err = %v, want ErrNoFieldOwner", err)
	}
	f.wantWrites(0)

	other, err := reconcile.NewChildren(f.c, env.Scheme, reconcile.WithChildrenFieldOwner("someone-else"))
	testkit.Must(t, err)
	var got error
	hooks := &widgetHooks{children: other, onReconc: func(ctx context.Context, w *testv1.Widget) (reconcile.Result, bool) {
		_, got = other.EnsureChild(ctx, w, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: f.ns}})
		return reconcile.Retry(got), true
	}}
	r := newReconciler(t, f, hooks)
	f.counter.Reset()
	_, _ = f.pass(r, "w")
	if !errors.Is(got, reconcile.ErrFieldOwnerMismatch) {
		t.Errorf("EnsureChild with a field owner other than the pass's: err = %v, want ErrFieldOwnerMismatch", got)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "c"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the child was written: get = %v", err)
	}
}

// TestChildWritesReportTheFailedOperation: a write the API server refuses
// comes back as a *ChildWriteError naming the operation that failed, so a
// caller tells a failed create from a failed update without another read.
func TestChildWritesReportTheFailedOperation(t *testing.T) {
	f := newFixture(t)
	ch := f.children()
	owner := f.createWidget("w", testv1.WidgetSpec{})
	ctx := t.Context()
	cm := func(name, value string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Immutable: ptr.To(true), Data: map[string]string{"k": value}}
	}
	if _, err := ch.EnsureChild(ctx, owner, cm("frozen", "v1")); err != nil {
		t.Fatal(err)
	}
	errDelete := errors.New("injected delete failure")
	deleter, err := reconcile.NewChildren(interceptor.NewClient(withWatch(t, f), interceptor.Funcs{
		Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error { return errDelete },
	}), env.Scheme)
	testkit.Must(t, err)

	tests := []struct {
		name    string
		write   func() error
		wantOp  reconcile.ChildWrite
		wantErr func(error) bool
	}{
		{"create of an invalid child", func() error {
			_, err := ch.EnsureChild(ctx, owner, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: f.ns}, Data: map[string]string{"not a key!": "v"}})
			return err
		}, reconcile.ChildCreated, apierrors.IsInvalid},
		{"update of an immutable child", func() error {
			_, err := ch.EnsureChild(ctx, owner, cm("frozen", "v2"))
			return err
		}, reconcile.ChildUpdated, apierrors.IsInvalid},
		{"delete", func() error {
			_, err := deleter.DeleteChild(ctx, owner, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "frozen", Namespace: f.ns}})
			return err
		}, reconcile.ChildDeleted, func(err error) bool { return errors.Is(err, errDelete) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.write()
			var we *reconcile.ChildWriteError
			if !errors.As(err, &we) {
				t.Fatalf("err = %v, want a *ChildWriteError", err)
			}
			if we.Write != tt.wantOp || we.Kind != "ConfigMap" || we.Key.Namespace != f.ns {
				t.Errorf("ChildWriteError = {%s %s %s}, want {%s ConfigMap %s/...}", we.Write, we.Kind, we.Key, tt.wantOp, f.ns)
			}
			if !tt.wantErr(err) {
				t.Errorf("the API server's error is not reachable through %v", err)
			}
		})
	}
}

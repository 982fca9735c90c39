package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/webhook"
)

// widgetHooks checks Widgets the way an operator's hooks would.
type widgetHooks struct{}

func (widgetHooks) Reconcile(context.Context, *testv1.Widget) reconcile.Result {
	return reconcile.Done()
}

func (widgetHooks) Default(_ context.Context, w *testv1.Widget) error {
	if w.Spec.Message == "" {
		w.Spec.Message = "defaulted"
	}
	return nil
}

func (widgetHooks) Validate(_ context.Context, w *testv1.Widget) field.ErrorList {
	if w.Spec.Message == "invalid" {
		return field.ErrorList{field.Invalid(field.NewPath("spec", "message"), w.Spec.Message, `must not be "invalid": choose another message`)}
	}
	return nil
}

func (widgetHooks) ValidateAdmission(_ context.Context, old, w *testv1.Widget) field.ErrorList {
	if w.Spec.Message == "admission only" {
		return field.ErrorList{field.Invalid(field.NewPath("spec", "message"), w.Spec.Message, "is refused at admission only")}
	}
	if old != nil && w.Spec.Replicas < old.Spec.Replicas {
		return field.ErrorList{field.Forbidden(field.NewPath("spec", "replicas"), fmt.Sprintf("may only grow (from %d): recreate the widget to shrink it", old.Spec.Replicas))}
	}
	return nil
}

func (widgetHooks) Warnings(_ context.Context, _, w *testv1.Widget) []string {
	if w.Spec.Message == "deprecated" {
		return []string{`spec.message "deprecated" will be refused in v2`}
	}
	return nil
}

// warnings collects the warnings the API server sends a client.
type warnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *warnings) HandleWarningHeader(_ int, _, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

// serve runs the hooks' webhooks until t ends and returns a client whose
// warnings are collected.
func serve(t *testing.T) (client.Client, *warnings) {
	t.Helper()
	env.StartManager(t, func(mgr ctrl.Manager) error {
		return webhook.SetupWithManager[*testv1.Widget](mgr, widgetHooks{})
	})
	w := &warnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = w
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "webhook-"}}
	if err := env.Client.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func TestAdmission(t *testing.T) {
	c, warned := serve(t)
	ns := namespace(t)
	tests := []struct {
		name         string
		create       testv1.WidgetSpec
		update       *testv1.WidgetSpec // then updated to this
		wantErr      []string           // in the error, which is Invalid; none: admitted
		wantStored   testv1.WidgetSpec
		wantWarnings []string
	}{
		{name: "defaulted on create", create: testv1.WidgetSpec{Replicas: 1},
			wantStored: testv1.WidgetSpec{Replicas: 1, Message: "defaulted"}},
		{name: "invalid on create", create: testv1.WidgetSpec{Message: "invalid"},
			wantErr: []string{"spec.message", `must not be "invalid": choose another message`}},
		{name: "warned on create", create: testv1.WidgetSpec{Message: "deprecated"},
			wantStored: testv1.WidgetSpec{Message: "deprecated"}, wantWarnings: []string{`spec.message "deprecated" will be refused in v2`}},
		{name: "invalid on update", create: testv1.WidgetSpec{Message: "fine"}, update: &testv1.WidgetSpec{Message: "invalid"},
			wantErr: []string{"spec.message"}, wantStored: testv1.WidgetSpec{Message: "fine"}},
		{name: "a transition refused", create: testv1.WidgetSpec{Replicas: 3, Message: "m"}, update: &testv1.WidgetSpec{Replicas: 2, Message: "m"},
			wantErr: []string{"spec.replicas", "may only grow (from 3): recreate the widget to shrink it"}, wantStored: testv1.WidgetSpec{Replicas: 3, Message: "m"}},
		{name: "a transition allowed", create: testv1.WidgetSpec{Replicas: 3, Message: "m"}, update: &testv1.WidgetSpec{Replicas: 4, Message: "m"},
			wantStored: testv1.WidgetSpec{Replicas: 4, Message: "m"}},
		{name: "admission-only check on create", create: testv1.WidgetSpec{Message: "admission only"},
			wantErr: []string{"spec.message", "is refused at admission only"}},
		{name: "admission-only check on update", create: testv1.WidgetSpec{Message: "m"}, update: &testv1.WidgetSpec{Message: "admission only"},
			wantErr: []string{"spec.message", "is refused at admission only"}, wantStored: testv1.WidgetSpec{Message: "m"}},
		{name: "defaulted on update", create: testv1.WidgetSpec{Message: "m"}, update: &testv1.WidgetSpec{},
			wantStored: testv1.WidgetSpec{Message: "defaulted"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			warned.mu.Lock()
			warned.seen = nil
			warned.mu.Unlock()
			w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("w%d", i)}, Spec: tt.create}
			err := c.Create(t.Context(), w)
			if tt.update != nil {
				if err != nil {
					t.Fatalf("create: %v", err)
				}
				w.Spec = *tt.update
				err = c.Update(t.Context(), w)
			}
			checkErr(t, err, tt.wantErr)
			if err == nil || tt.update != nil {
				got := &testv1.Widget{}
				if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(w), got); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.wantStored, got.Spec); diff != "" {
					t.Errorf("stored spec (-want +got):\n%s", diff)
				}
			}
			warned.mu.Lock()
			defer warned.mu.Unlock()
			if diff := cmp.Diff(tt.wantWarnings, warned.seen); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// checkErr fails t unless err is nil (want empty) or Invalid naming each
// of want.
func checkErr(t *testing.T, err error, want []string) {
	t.Helper()
	switch {
	case len(want) == 0 && err != nil:
		t.Fatalf("refused: %v", err)
	case len(want) == 0:
	case !apierrors.IsInvalid(err):
		t.Fatalf("error = %v, want Invalid", err)
	default:
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not name %q", err, w)
			}
		}
	}
}

// TestStoredInvalidKeepsItsMetadataWritable: a Widget stored while the
// validating webhook was away can still be labelled, get and lose a
// finalizer, and be deleted; a spec change is still checked.
func TestStoredInvalidKeepsItsMetadataWritable(t *testing.T) {
	ctx := t.Context()
	ns := namespace(t)
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "validating-webhook-configuration"}, cfg); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	c, _ := serve(t)
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stored"}, Spec: testv1.WidgetSpec{Message: "invalid"}}
	if err := c.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	cfg.ResourceVersion = ""
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, c, w)

	w.Labels = map[string]string{"team": "a"}
	controllerutil.AddFinalizer(w, "test.opkit.dev/cleanup")
	if err := c.Update(ctx, w); err != nil {
		t.Fatalf("a metadata-only update of a stored invalid widget: %v", err)
	}
	if err := c.Delete(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
		t.Fatal(err)
	}
	controllerutil.RemoveFinalizer(w, "test.opkit.dev/cleanup")
	if err := c.Update(ctx, w); err != nil {
		t.Fatalf("removing the finalizer of a deleting invalid widget: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(w), w); !apierrors.IsNotFound(err) {
		t.Errorf("after its finalizer went: get = %v, want NotFound", err)
	}
}

// waitRefused waits until the re-created validating webhook refuses a
// spec change of w (the API server reads configurations from a watch).
func waitRefused(t *testing.T, c client.Client, w *testv1.Widget) {
	t.Helper()
	for range 300 {
		probe := w.DeepCopy()
		probe.Spec.Replicas++
		err := c.Update(t.Context(), probe, client.DryRunAll)
		if apierrors.IsInvalid(err) {
			checkErr(t, err, []string{"spec.message"})
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatal("the validating webhook never came back")
}

func TestSetupRefuses(t *testing.T) {
	tests := []struct {
		name  string
		hooks reconcile.Hooks[*testv1.Widget]
		want  error
	}{
		{"nothing to serve", reconcileOnly{}, webhook.ErrNoAdmissionHooks},
		{"a mistyped Default", &voidDefaulter{}, reconcile.ErrHookSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
			if err != nil {
				t.Fatal(err)
			}
			if err := webhook.SetupWithManager(mgr, tt.hooks); !errors.Is(err, tt.want) {
				t.Errorf("SetupWithManager = %v, want %v", err, tt.want)
			}
		})
	}
}

type reconcileOnly struct{}

func (reconcileOnly) Reconcile(context.Context, *testv1.Widget) reconcile.Result {
	return reconcile.Done()
}

type voidDefaulter struct{ reconcileOnly }

func (*voidDefaulter) Default(context.Context, *testv1.Widget) {}

// TestDefaultLeavesMetadataOnlyUpdates: a Widget stored while the
// mutating webhook was away is defaulted on its next spec change, not on
// a write of its labels or finalizers, nor while it is being deleted, as
// Validate is not run then either. Before, Default ran on every update:
// a label or a finalizer removal changed the spec.
func TestDefaultLeavesMetadataOnlyUpdates(t *testing.T) {
	ctx := t.Context()
	ns := namespace(t)
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "mutating-webhook-configuration"}, cfg); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	c, _ := serve(t)
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stored"}}
	if err := c.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	cfg.ResourceVersion = ""
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		probe := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"}}
		if err := c.Create(ctx, probe, client.DryRunAll); err != nil {
			t.Fatal(err)
		}
		if probe.Spec.Message == "defaulted" {
			break
		}
		if i == 300 {
			t.Fatal("the mutating webhook never came back")
		}
		time.Sleep(100 * time.Millisecond)
	}

	w.Labels = map[string]string{"team": "a"}
	controllerutil.AddFinalizer(w, "test.opkit.dev/cleanup")
	if err := c.Update(ctx, w); err != nil {
		t.Fatal(err)
	}
	if w.Spec.Message != "" {
		t.Errorf("spec.message after a metadata-only update: %q, want it left empty", w.Spec.Message)
	}
	probe := w.DeepCopy()
	probe.Spec.Replicas++
	if err := c.Update(ctx, probe, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	if probe.Spec.Message != "defaulted" {
		t.Errorf("spec.message after a spec change: %q, want defaulted", probe.Spec.Message)
	}
	if err := c.Delete(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
		t.Fatal(err)
	}
	w.Spec.Replicas++
	if err := c.Update(ctx, w, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	if w.Spec.Message != "" {
		t.Errorf("spec.message after an update of the deleting widget: %q, want it left empty", w.Spec.Message)
	}
	controllerutil.RemoveFinalizer(w, "test.opkit.dev/cleanup")
	if err := c.Update(ctx, w); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
}

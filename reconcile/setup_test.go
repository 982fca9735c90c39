package reconcile_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
)

func newManager(t *testing.T, ctl config.Controller) ctrl.Manager {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             ctl,
	})
	testkit.Must(t, err)
	return mgr
}

// TestSetupKeepsTheManagersNameValidation: a manager configured with
// Controller.SkipNameValidation, as envtest suites commonly are, accepts two
// controllers of one name without WithSkipNameValidation, and a manager
// that validates names still refuses them.
func TestSetupKeepsTheManagersNameValidation(t *testing.T) {
	tests := []struct {
		name    string
		skip    *bool
		wantErr bool
	}{
		{"manager skips validation", ptr.To(true), false},
		{"manager validates names", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mgr := newManager(t, config.Controller{SkipNameValidation: tt.skip})
			name := reconcile.WithName("twice-" + strings.ReplaceAll(tt.name, " ", "-"))
			if _, err := reconcile.SetupWithManager[*testv1.Widget](mgr, &widgetHooks{}, name); err != nil {
				t.Fatalf("first SetupWithManager: %v", err)
			}
			_, err := reconcile.SetupWithManager[*testv1.Widget](mgr, &widgetHooks{}, name)
			if (err != nil) != tt.wantErr {
				t.Errorf("second SetupWithManager of the same name: %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

// TestWithOwnsTellsUnstructuredKindsApart: two unstructured kinds share a
// Go type, and each is watched.
func TestWithOwnsTellsUnstructuredKindsApart(t *testing.T) {
	f := newFixture(t)
	mgr := f.manager()
	owned := func(kind string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(kind))
		return u
	}
	hooks := &widgetHooks{children: f.children()}
	_, err := reconcile.SetupWithManager[*testv1.Widget](mgr, hooks,
		reconcile.WithName("unstructured-"+f.ns),
		reconcile.WithOwns(owned("ConfigMap")), reconcile.WithOwns(owned("Secret")),
		reconcile.WithSkipNameValidation())
	testkit.Must(t, err)
	testkit.Run(t, mgr)

	w := f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
	waitFor(t, f, "w", func(w *testv1.Widget) bool { return w.Status.ObservedGeneration == 1 })
	passes := hooks.reconcils.Load()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: f.ns}}
	testkit.Must(t, controllerutil.SetControllerReference(w, secret, env.Scheme))
	testkit.Must(t, env.Client.Create(t.Context(), secret))
	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return hooks.reconcils.Load() > passes, nil
	})
	if err != nil {
		t.Errorf("a Secret the widget controls triggered no pass: %v", err)
	}
}

package reconcile_test

import (
	"strings"
	"testing"

	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
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

package testenv

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// StartManager builds a manager on e (no metrics or health endpoints,
// controller names not checked, so that every test may register its
// own), lets setup register controllers, and runs it until t ends. A
// manager that fails fails t.
//
// With WithWebhooks, the manager's webhook server is the one the
// configurations call, and StartManager returns once it serves. Only one
// manager at a time can serve them: tests that do must not run in
// parallel.
func (e *Env) StartManager(t testing.TB, setup func(ctrl.Manager) error) ctrl.Manager {
	t.Helper()
	opts := ctrl.Options{
		Scheme:                 e.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	}
	wh := e.env.WebhookInstallOptions
	serving := len(wh.MutatingWebhooks)+len(wh.ValidatingWebhooks) > 0
	if serving {
		opts.WebhookServer = webhook.NewServer(e.WebhookOptions())
	}
	mgr, err := ctrl.NewManager(e.Config, opts)
	if err != nil {
		t.Fatalf("building a manager: %v", err)
	}
	if err := setup(mgr); err != nil {
		t.Fatalf("setting up the manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	if serving {
		started := mgr.GetWebhookServer().StartedChecker()
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return started(nil) == nil, nil
		})
		if err != nil {
			t.Fatalf("the webhook server did not start: %v", err)
		}
	}
	return mgr
}

// WebhookOptions are the webhook server options the configurations of
// WithWebhooks call: host, port and a CertDir holding a certificate their
// caBundle trusts. For a manager built without StartManager.
func (e *Env) WebhookOptions() webhook.Options {
	wh := e.env.WebhookInstallOptions
	return webhook.Options{Host: wh.LocalServingHost, Port: wh.LocalServingPort, CertDir: wh.LocalServingCertDir}
}

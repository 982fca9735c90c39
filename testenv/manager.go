package testenv

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// ManagerOption changes the options of the manager StartManager builds.
type ManagerOption func(*ctrl.Options)

// InNamespaces makes the manager's cache, and so its controllers, see
// these namespaces instead of the test's (see StartManager).
func InNamespaces(namespaces ...string) ManagerOption {
	return func(o *ctrl.Options) {
		o.Cache.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			o.Cache.DefaultNamespaces[ns] = cache.Config{}
		}
	}
}

// AllNamespaces makes the manager's cache see every namespace: its
// controllers then also act on other tests' objects.
func AllNamespaces() ManagerOption {
	return func(o *ctrl.Options) { o.Cache.DefaultNamespaces = nil }
}

// WithManagerOptions lets fn change any of the manager's options (cache
// transforms and selectors, a sharded cache), after the others.
func WithManagerOptions(fn func(*ctrl.Options)) ManagerOption { return fn }

// StartManager builds a manager on e (no metrics or health endpoints,
// controller names not checked, so that every test may register its
// own), lets setup register controllers, and runs it until t ends. A
// manager that fails fails t.
//
// Its cache sees the namespaces Env.Namespace made for t and the tests t
// runs under, so that parallel tests' managers leave each other's objects
// alone; call Namespace first. A test that made none gets every
// namespace. opts change that (InNamespaces, AllNamespaces) and the rest.
//
// With WithWebhooks, the manager's webhook server is the one the
// configurations call, and StartManager returns once it serves. Only one
// manager at a time can serve them: tests that do must not run in
// parallel.
func (e *Env) StartManager(t testing.TB, setup func(ctrl.Manager) error, opts ...ManagerOption) ctrl.Manager {
	t.Helper()
	o := ctrl.Options{
		Scheme:                 e.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if ns := e.testNamespaces(t); len(ns) > 0 {
		InNamespaces(ns...)(&o)
	}
	wh := e.env.WebhookInstallOptions
	serving := len(wh.MutatingWebhooks)+len(wh.ValidatingWebhooks) > 0
	if serving {
		o.WebhookServer = webhook.NewServer(e.WebhookOptions())
	}
	for _, opt := range opts {
		opt(&o)
	}
	mgr, err := ctrl.NewManager(e.Config, o)
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

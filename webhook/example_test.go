package webhook_test

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/webhook"
)

// The same hooks run in every pass and at admission. The webhook
// configurations come from controller-gen's markers, such as:
//
//	// +kubebuilder:webhook:path=/validate-test-opkit-dev-v1-widget,mutating=false,failurePolicy=fail,sideEffects=None,groups=test.opkit.dev,resources=widgets,verbs=create;update,versions=v1,name=vwidget.test.opkit.dev,admissionReviewVersions=v1
func ExampleSetupWithManager() {
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{})
	if err != nil {
		os.Exit(1)
	}
	hooks := widgetHooks{}
	if _, err := reconcile.SetupWithManager[*testv1.Widget](mgr, hooks); err != nil {
		os.Exit(1)
	}
	if err := webhook.SetupWithManager[*testv1.Widget](mgr, hooks); err != nil {
		os.Exit(1)
	}
	_ = mgr.Start(ctrl.SetupSignalHandler())
}

// The operator makes its own serving certificate: the installer creates
// the Secret empty, mounts it at CertDir, and names the configurations.
func ExampleRotateCertificates() {
	const certDir = "/tmp/k8s-webhook-server/serving-certs"
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		WebhookServer: webhook.NewServer(crwebhook.Options{CertDir: certDir}),
	})
	if err != nil {
		os.Exit(1)
	}
	if err := webhook.SetupWithManager[*testv1.Widget](mgr, widgetHooks{}); err != nil {
		os.Exit(1)
	}
	ready, err := webhook.RotateCertificates(mgr, webhook.Certificates{
		Secret:     types.NamespacedName{Namespace: "widget-system", Name: "webhook-server-cert"},
		CertDir:    certDir,
		DNSName:    "widget-webhook-service.widget-system.svc",
		Validating: []string{"widget-validating-webhook-configuration"},
		Mutating:   []string{"widget-mutating-webhook-configuration"},
	})
	if err != nil {
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("webhook", ready); err != nil {
		os.Exit(1)
	}
	_ = mgr.Start(ctrl.SetupSignalHandler())
}

// An operator's command line: the webhooks are off unless the installer
// sets --webhook-port, and the defaults are the installer's names.
func ExampleFlags() {
	wh := webhook.Flags{
		CertSecret:              "widget-webhook-server-cert",
		Service:                 "widget-webhook-service",
		ValidatingConfiguration: "widget-validating-webhook-configuration",
	}
	wh.BindFlags(flag.CommandLine)
	flag.Parse()
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{WebhookServer: wh.Server()})
	if err != nil {
		os.Exit(1)
	}
	if wh.Enabled() {
		if err := webhook.SetupWithManager[*testv1.Widget](mgr, widgetHooks{}); err != nil {
			os.Exit(1)
		}
	}
	if err := wh.Setup(mgr); err != nil {
		os.Exit(1)
	}
	_ = mgr.Start(ctrl.SetupSignalHandler())
}

// The conditions an installer puts on each webhook, here as a kustomize
// JSON patch would carry them.
func ExampleMatchConditions() {
	for _, c := range webhook.MatchConditions() {
		fmt.Printf("%s: %s\n", c.Name, c.Expression)
	}
	// Output:
	// not-being-deleted: !has(object.metadata.deletionTimestamp)
	// spec-changed: request.operation != 'UPDATE' || !has(object.spec) || !has(oldObject.spec) || object.spec != oldObject.spec
}

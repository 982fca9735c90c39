package webhook_test

import (
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

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

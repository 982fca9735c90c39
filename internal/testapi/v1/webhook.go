package v1

// Widget's webhooks, served by package webhook's tests.
// +kubebuilder:webhook:path=/mutate-test-opkit-dev-v1-widget,mutating=true,failurePolicy=fail,sideEffects=None,groups=test.opkit.dev,resources=widgets,verbs=create;update,versions=v1,name=mwidget.test.opkit.dev,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-test-opkit-dev-v1-widget,mutating=false,failurePolicy=fail,sideEffects=None,groups=test.opkit.dev,resources=widgets,verbs=create;update,versions=v1,name=vwidget.test.opkit.dev,admissionReviewVersions=v1

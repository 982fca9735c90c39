// Package webhook serves a kind's reconcile hooks at admission: Default as
// its mutating webhook, Validate (with ValidateAdmission and Warnings) as its
// validating webhook. The checks a pass runs are then the checks
// `kubectl apply` runs, written once:
//
//	if err := reconcile.SetupWithManager(mgr, hooks); err != nil { ... }
//	if err := webhook.SetupWithManager(mgr, hooks); err != nil { ... }
//
// A pass still runs Default and Validate, so an object stored before the
// webhook existed, or admitted while it was down (failurePolicy Ignore),
// stalls with InvalidSpec as before.
//
// An update that changes only metadata (labels, annotations, finalizers) or
// that comes while the object is being deleted is not validated: an object
// stored while invalid can still be paused, labelled, and have its
// finalizer removed. Put MatchConditions on the configurations so that the
// API server does not call the webhooks for them either: with
// failurePolicy Fail and no replica serving, it refuses every update it
// cannot send.
//
// The webhook configurations and Service are the installer's:
// controller-gen's webhook generator writes the configurations from
// +kubebuilder:webhook markers, at the paths controller-runtime serves
// (/mutate-<group>-<version>-<kind> and /validate-...).
// testenv.WithWebhooks runs them against envtest. The serving certificate
// comes from cert-manager, or from the operator itself: RotateCertificates
// keeps a CA and certificate in a Secret and their CA in the
// configurations' caBundle, and NewServer starts once it is mounted.
//
// At admission the hooks run outside a pass: ctx carries the admission
// request (admission.RequestFromContext), not a field owner, and the
// API server waits for them (10 s by default). They must not write.
package webhook

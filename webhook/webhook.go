package webhook

import (
	"errors"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/opkit-dev/opkit/reconcile"
)

// ErrNoAdmissionHooks is returned by SetupWithManager for hooks with none of
// Default, Validate, ValidateAdmission and Warnings.
var ErrNoAdmissionHooks = errors.New("webhook: the hooks have nothing to serve at admission")

// SetupWithManager registers hooks' Default as T's mutating webhook (on
// creates and spec changes of objects not being deleted, as Validate) and
// Validate, ValidateAdmission and Warnings as its validating webhook with mgr's
// webhook server, each only when hooks implement it. Hooks with a
// mistyped optional method fail with reconcile.ErrHookSignature.
func SetupWithManager[T reconcile.Object](mgr ctrl.Manager, hooks reconcile.Hooks[T]) error {
	if err := reconcile.CheckHooks(hooks); err != nil {
		return err
	}
	obj := newObject[T]()
	gvk, err := apiutil.GVKForObject(obj, mgr.GetScheme())
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	b := ctrl.NewWebhookManagedBy(mgr, obj)
	served := false
	if d, ok := hooks.(reconcile.Defaulter[T]); ok {
		b = b.WithDefaulter(&defaulter[T]{hooks: d, decoder: admission.NewDecoder(mgr.GetScheme())})
		served = true
	}
	if v := newValidator(gvk.GroupKind(), hooks); v != nil {
		b = b.WithValidator(v)
		served = true
	}
	if !served {
		return fmt.Errorf("%w: %T (implement reconcile.Defaulter or reconcile.Validator)", ErrNoAdmissionHooks, hooks)
	}
	if err := b.Complete(); err != nil {
		return fmt.Errorf("webhook: %s: %w", gvk.Kind, err)
	}
	return nil
}

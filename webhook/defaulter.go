package webhook

import (
	"context"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/opkit-dev/opkit/reconcile"
)

// defaulter serves the hooks' Default as controller-runtime's
// admission.Defaulter, on the writes Validate checks only: not on an
// object being deleted, nor on an update of its metadata alone, so that a
// label or a finalizer's removal never changes the spec.
type defaulter[T reconcile.Object] struct {
	hooks   reconcile.Defaulter[T]
	decoder admission.Decoder
}

func (d *defaulter[T]) Default(ctx context.Context, obj T) error {
	if obj.GetDeletionTimestamp() != nil {
		return nil
	}
	req, err := admission.RequestFromContext(ctx)
	if err == nil && req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		old := newObject[T]()
		// What cannot be decoded is defaulted, as specChanged validates it.
		if d.decoder.DecodeRaw(req.OldObject, old) == nil && !specChanged(old, obj) {
			return nil
		}
	}
	return d.hooks.Default(ctx, obj)
}

package reconcile

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/statusutil"
)

// AnnotationPaused pauses an object: while it is set, with any value
// (even "false"), the Reconciler calls no hook for the object, so neither it
// nor its children change. Deletion is not paused: Finalize still runs.
// Removing the annotation resumes the object with one pass.
const AnnotationPaused = "opkit.dev/paused"

// ConditionPaused is True while the object is paused. The Reconciler also
// sets Reconciling=True (reason Paused) and leaves observedGeneration
// behind a spec changed meanwhile, so kstatus-based health checks read a
// paused object as InProgress, not Current. Both go on resume.
const ConditionPaused = "Paused"

// ReasonPaused is the reason of Paused, and of Reconciling and Ready while
// paused; EventResumed is the reason of the event on resume.
const (
	ReasonPaused = "Paused"
	EventResumed = "Resumed"
)

const pausedMessage = "annotation " + AnnotationPaused + " is set: no change is made to this object or its children; remove the annotation to resume"

// IsPaused reports whether obj carries AnnotationPaused.
func IsPaused(obj client.Object) bool {
	_, ok := obj.GetAnnotations()[AnnotationPaused]
	return ok
}

// pause is the pass of a paused object: it records Paused, once.
func (r *Reconciler[T]) pause(ctx context.Context, key types.NamespacedName, before, obj T, readRV string, stale []string) error {
	statusutil.MarkTrue(obj, ConditionPaused, ReasonPaused, pausedMessage)
	statusutil.MarkReconciling(obj, ReasonPaused, pausedMessage)
	statusutil.SetSummary(obj, r.opts.summary...)
	if err := r.writeStatusCounted(ctx, before, obj); err != nil {
		return err
	}
	r.recordWrites(ctx, key, obj, readRV, stale)
	if !statusutil.IsTrue(before, ConditionPaused) {
		r.recorder.Eventf(obj, nil, "Normal", ReasonPaused, "Pause", "%s", pausedMessage)
	}
	r.metrics.outcome("paused")
	return nil
}

// wasPaused reports whether before records Paused, which the pass
// resuming it removes.
func wasPaused(before Object) bool { return statusutil.Get(before, ConditionPaused) != nil }

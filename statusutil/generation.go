package statusutil

import "sigs.k8s.io/controller-runtime/pkg/client"

// ObservedGenerationGetter is an object that reports status.observedGeneration:
// the metadata.generation its controller last finished a pass for.
type ObservedGenerationGetter interface {
	GetObservedGeneration() int64
}

// ObservedGenerationSetter is an ObservedGenerationGetter whose
// status.observedGeneration can be set.
type ObservedGenerationSetter interface {
	ObservedGenerationGetter
	SetObservedGeneration(int64)
}

// SetObservedGeneration sets status.observedGeneration to obj.GetGeneration()
// and reports whether it changed.
//
// Footgun: call it only when a pass completed for that generation, that is
// after the controller acted on the whole spec it read (successfully, or by
// recording a terminal failure such as Stalled). Tools such as kstatus,
// `kubectl wait` and Flux treat observedGeneration == generation as "the
// conditions describe the current spec"; bumping it at the start of a pass, or
// after an error that returned early, makes them read stale conditions as
// the outcome of the new spec.
func SetObservedGeneration(obj interface {
	client.Object
	ObservedGenerationSetter
}) (changed bool) {
	g := obj.GetGeneration()
	if obj.GetObservedGeneration() == g {
		return false
	}
	obj.SetObservedGeneration(g)
	return true
}

// IsObservedGenerationCurrent reports whether status.observedGeneration is at
// least metadata.generation, that is whether the status describes the
// current spec. A stored object whose observedGeneration was never set is
// not current, since the API server starts metadata.generation at 1.
func IsObservedGenerationCurrent(obj interface {
	client.Object
	ObservedGenerationGetter
}) bool {
	return obj.GetObservedGeneration() >= obj.GetGeneration()
}

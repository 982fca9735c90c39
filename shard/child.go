package shard

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/slotctx"
)

// Child is a kind whose objects belong to one sharded object each and
// take its slot: the Sharder labels those written without it, so that
// a member's cache of the kind holds only its own.
type Child struct {
	// Object is the kind: a typed object, or a PartialObjectMetadata
	// with its GVK set.
	Object client.Object
	// Selector narrows the kind to the operator's children (those the
	// manager's cache selects); nil selects every object of the kind,
	// and the Sharder caches the metadata of all it selects.
	Selector labels.Selector
	// Owner names the sharded object obj belongs to. Nil: obj's
	// controller, when it is of the sharded kind. A pod of a
	// Deployment, two controllers down, needs one (a label naming it).
	// It sees the metadata the Sharder keeps: name, namespace, labels
	// and the controller reference.
	Owner func(obj client.Object) (types.NamespacedName, bool)
}

// ControlledBy returns the Owner of children whose controller is of
// kind gk: Child's default.
func ControlledBy(gk schema.GroupKind) func(client.Object) (types.NamespacedName, bool) {
	return func(obj client.Object) (types.NamespacedName, bool) {
		ref := metav1.GetControllerOfNoCopy(obj)
		if ref == nil || ref.Kind != gk.Kind {
			return types.NamespacedName{}, false
		}
		if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != gk.Group {
			return types.NamespacedName{}, false
		}
		return types.NamespacedName{Namespace: obj.GetNamespace(), Name: ref.Name}, true
	}
}

// WithSlot returns ctx telling the writers of children that the pass is
// over an object of slot value, labelled key (Ring.SlotLabel): Handoff
// gives it to the reconciler it wraps.
func WithSlot(ctx context.Context, key, value string) context.Context {
	return slotctx.With(ctx, key, value)
}

// SlotFrom returns the label a child written in ctx's pass carries, so
// that its member's cache sees it at once; a child that makes pods
// gives their template the label too. ok is false outside Handoff.
func SlotFrom(ctx context.Context) (key, value string, ok bool) {
	return slotctx.From(ctx)
}

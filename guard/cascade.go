package guard

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AnnotationMarker is the annotation on a guard recording that its
// owner's marker was made: a ConfigMap "<guard>-cascade" owned by the
// owner alone, through which the garbage collector shows how the owner
// was deleted. An orphan deletion takes the owner's reference off it and
// leaves it; foreground, background and namespace deletion delete it or
// leave the reference. The owner's own "orphan" finalizer shows it only
// for milliseconds.
const AnnotationMarker = "opkit.dev/guard-marker"

// markerName is the name of the marker of the owner whose guard is guard.
func markerName(guard string) string { return guard + "-cascade" }

// ensureMarker makes owner's marker once per guard. An owner being deleted
// gets none: its reference on a new marker would say nothing. A name too
// long for the marker leaves Release as before it: children go.
func (g *Guard) ensureMarker(ctx context.Context, owner client.Object, cm *corev1.ConfigMap) error {
	if owner.GetDeletionTimestamp() != nil || cm.Annotations[AnnotationMarker] != "" || cm.DeletionTimestamp != nil ||
		len(markerName(cm.Name)) > validation.DNS1123SubdomainMaxLength {
		return nil
	}
	marker := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: markerName(cm.Name), Namespace: owner.GetNamespace(),
		Labels: map[string]string{g.label: string(owner.GetUID())},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: g.gvk.GroupVersion().String(), Kind: g.gvk.Kind,
			Name: owner.GetName(), UID: owner.GetUID()}},
		Annotations: map[string]string{AnnotationOwnerKind: g.kind.String()}},
		Data: map[string]string{"README": fmt.Sprintf("The garbage collector's treatment of this ConfigMap tells the operator of %s %s "+
			"whether its children are to be kept (kubectl delete --cascade=orphan) when it is deleted.", g.kind.Kind, owner.GetName())},
	}
	if err := g.client.Create(ctx, marker); apierrors.IsAlreadyExists(err) {
		// Ours, made by a pass that failed to record it, or a gone
		// owner's the Collector has yet to delete: then try again later.
		if marker, err = g.readMarker(ctx, cm.Namespace, cm.Name, owner.GetUID()); marker == nil || err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("creating the cascade marker of %s: %w", owner.GetName(), err)
	}
	patch := client.MergeFrom(cm.DeepCopy())
	cm.Annotations = maps.Clone(cm.Annotations)
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[AnnotationMarker] = "true"
	if err := g.client.Patch(ctx, cm, patch); err != nil {
		return fmt.Errorf("updating the guard of %s: %w", owner.GetName(), err)
	}
	return nil
}

// orphaned reports whether the owner of the guard named guard in ns, of
// UID uid and with finalizers, was deleted with orphan propagation: it
// still carries the "orphan" finalizer (the collector has not acted yet),
// or its marker exists without its reference. It returns the marker, if
// there is one, read from the API server: a cache may not show the
// collector's change yet.
func (g *Guard) orphaned(ctx context.Context, ns, guard string, uid types.UID, finalizers []string) (bool, *corev1.ConfigMap, error) {
	marker, err := g.readMarker(ctx, ns, guard, uid)
	if err != nil {
		return false, nil, err
	}
	orphan := marker != nil && marker.DeletionTimestamp == nil &&
		!slices.ContainsFunc(marker.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == uid })
	return orphan || slices.Contains(finalizers, metav1.FinalizerOrphanDependents), marker, nil
}

// readMarker reads the marker of the guard named guard in ns of the owner
// of UID uid from the API server, or nil if it has none.
func (g *Guard) readMarker(ctx context.Context, ns, guard string, uid types.UID) (*corev1.ConfigMap, error) {
	marker, err := g.readUncached(ctx, ns, markerName(guard), uid)
	if err != nil {
		return nil, fmt.Errorf("reading the cascade marker %s: %w", markerName(guard), err)
	}
	return marker, nil
}

// readGuard reads the guard named guard in ns of the owner of UID uid
// from the API server, or nil if it has none.
func (g *Guard) readGuard(ctx context.Context, ns, guard string, uid types.UID) (*corev1.ConfigMap, error) {
	cm, err := g.readUncached(ctx, ns, guard, uid)
	if err != nil {
		return nil, fmt.Errorf("reading guard %s: %w", guard, err)
	}
	return cm, nil
}

// readUncached reads ConfigMap name in ns, of g's kind and of the owner of
// UID uid, from the API server, or nil if there is none. An empty patch is
// the uncached read: it changes nothing and needs no reader beyond the
// guard's client.
func (g *Guard) readUncached(ctx context.Context, ns, name string, uid types.UID) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	err := g.client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte("{}")))
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if cm.Labels[g.label] != string(uid) || !g.ofKind(cm) {
		return nil, nil
	}
	return cm, nil
}

// dropMarker deletes a marker once its guard is released. Left to the
// garbage collector, a marker still carrying the owner's reference when
// the owner was released on its "orphan" finalizer would lose the
// reference moments later and stay for good.
func (g *Guard) dropMarker(ctx context.Context, marker *corev1.ConfigMap) error {
	if marker == nil || marker.DeletionTimestamp != nil {
		return nil
	}
	err := g.client.Delete(ctx, marker, client.Preconditions{UID: &marker.UID})
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the cascade marker %s: %w", marker.Name, err)
	}
	return nil
}

package guard

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Hold makes guard an owner of obj, not a controller and not blocking, and
// labels obj with LabelHeldBy, and returns obj. Call it on a child before
// creating or applying it. A nil guard leaves obj as it is.
func Hold[T client.Object](obj T, guard *corev1.ConfigMap) T {
	if guard == nil {
		return obj
	}
	refs := obj.GetOwnerReferences()
	if !slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == guard.UID }) {
		obj.SetOwnerReferences(append(refs, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: guard.Name, UID: guard.UID}))
	}
	if obj.GetLabels()[LabelHeldBy] != string(guard.UID) {
		obj.SetLabels(withHeldBy(obj.GetLabels(), guard))
	}
	return obj
}

// IsHeld reports whether guard holds obj: it is an owner and obj carries
// its label.
func IsHeld(obj client.Object, guard *corev1.ConfigMap) bool {
	return IsOwnedBy(obj, guard) && obj.GetLabels()[LabelHeldBy] == string(guard.UID)
}

// IsOwnedBy reports whether guard is one of obj's owners, held or not: a
// child of a guard that predates LabelHeldBy is owned but not held.
func IsOwnedBy(obj client.Object, guard *corev1.ConfigMap) bool {
	return guard != nil && slices.ContainsFunc(obj.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == guard.UID })
}

// HoldExisting makes guard hold each of objs that it does not hold yet,
// with one patch each: children made before their owner had a guard. The
// patches carry an optimistic lock, so a stale copy fails with a Conflict
// (retry the pass) instead of overwriting owners written meanwhile.
func HoldExisting(ctx context.Context, c client.Client, guard *corev1.ConfigMap, objs ...client.Object) error {
	for _, obj := range objs {
		if guard == nil || IsHeld(obj, guard) {
			continue
		}
		patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
		Hold(obj, guard)
		if err := c.Patch(ctx, obj, patch); err != nil {
			return fmt.Errorf("holding %s with guard %s: %w", obj.GetName(), guard.Name, err)
		}
	}
	return nil
}

// HoldStatefulSet holds sts (Hold) and what its controller creates from
// it: LabelHeldBy goes into the pod template and each claim template, so
// that Policy keeps the pods and claims through the namespace's deletion.
// It returns sts.
//
// Footgun: call it before the StatefulSet is first created. Claim
// templates cannot change afterwards (hold existing claims with
// HoldExisting), and a changed pod template rolls every pod.
func HoldStatefulSet(sts *appsv1.StatefulSet, guard *corev1.ConfigMap) *appsv1.StatefulSet {
	if guard == nil {
		return sts
	}
	Hold(sts, guard)
	sts.Spec.Template.Labels = withHeldBy(sts.Spec.Template.Labels, guard)
	for i := range sts.Spec.VolumeClaimTemplates {
		t := &sts.Spec.VolumeClaimTemplates[i]
		t.Labels = withHeldBy(t.Labels, guard)
	}
	return sts
}

// withHeldBy returns labels with LabelHeldBy set to guard's UID.
func withHeldBy(labels map[string]string, guard *corev1.ConfigMap) map[string]string {
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelHeldBy] = string(guard.UID)
	return labels
}

package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/ownership"
)

// The guard of a cluster keeps its data alive until its final backup is
// taken, whatever propagation policy deletes the cluster.
//
// Every child of an EtcdCluster (member pods, data claims, Services, the
// PodDisruptionBudget) has two owners: the EtcdCluster, its controller,
// and the cluster's guard, a ConfigMap named <cluster>-guard that has no
// owner itself. The garbage collector deletes a dependent only when none
// of its owners is "solid" (exists, and is not deleting its own
// dependents in the foreground); blockOwnerDeletion changes only whether
// an owner deleted in the foreground waits for it. So while the guard
// exists:
//
//   - background deletion (kubectl's default): the EtcdCluster stays
//     while its finalizer does; nothing changes;
//   - foreground deletion (--cascade=foreground, Argo CD's prune) and
//     orphan deletion (--cascade=orphan): the garbage collector removes
//     the EtcdCluster from the children's owners instead of deleting them,
//     and etcd keeps running for the final backup.
//
// The finalizer deletes the guard once the final backup is taken (or
// none is asked for); the garbage collector then deletes the children,
// whose owners are all gone. Orphan deletion therefore does not keep an
// EtcdCluster's members running: they hold the cluster's data, which the
// final backup keeps. A guard whose EtcdCluster is gone without its
// finalizer having run (the finalizer removed by hand while the operator
// was down) is deleted by GuardCollector.
const (
	// LabelGuardOf, on a guard, is the UID of the EtcdCluster it guards.
	LabelGuardOf = "etcd.opkit.dev/guard-of"
	// guardKind and guardAPIVersion are the guard's type.
	guardKind       = "ConfigMap"
	guardAPIVersion = "v1"
)

// GuardName returns the name of the guard of the EtcdCluster named cluster.
func GuardName(cluster string) string { return cluster + "-guard" }

// guardOf returns the guard c needs.
func guardOf(c *v1alpha1.EtcdCluster) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: GuardName(c.Name), Namespace: c.Namespace,
			Labels: map[string]string{LabelCluster: c.Name, LabelGuardOf: string(c.UID)}},
		Data: map[string]string{
			"README": fmt.Sprintf("This ConfigMap keeps the pods, claims and Services of EtcdCluster %s until its final backup is taken, "+
				"whatever propagation policy deletes the cluster. The etcd operator deletes it then; deleting it by hand lets a "+
				"foreground deletion remove the members before their final backup.", c.Name),
		},
	}
}

// guardRef is the owner reference of guard on the cluster's children: not
// a controller, and not blocking: a foreground deletion of the guard
// itself need not wait for the children.
func guardRef(guard *corev1.ConfigMap) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: guardAPIVersion, Kind: guardKind, Name: guard.Name, UID: guard.UID}
}

// heldBy adds guard to obj's owners and returns obj.
func heldBy[T client.Object](obj T, guard *corev1.ConfigMap) T {
	if guard == nil {
		return obj
	}
	refs := obj.GetOwnerReferences()
	if !slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == guard.UID }) {
		obj.SetOwnerReferences(append(refs, guardRef(guard)))
	}
	return obj
}

// isHeldBy reports whether guard is one of obj's owners.
func isHeldBy(obj client.Object, guard *corev1.ConfigMap) bool {
	return guard != nil && slices.ContainsFunc(obj.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == guard.UID })
}

// ensureGuard returns c's guard, creating it if it does not exist. A
// ConfigMap of the guard's name that guards another cluster (an earlier
// one of the same name, until GuardCollector deletes it) or nothing is
// refused with *ownership.NotControlledError: nothing of c is created
// before its own guard exists.
func (h *ClusterHooks) ensureGuard(ctx context.Context, c *v1alpha1.EtcdCluster) (*corev1.ConfigMap, error) {
	guard, err := h.getGuard(ctx, c)
	if err != nil || guard != nil {
		return guard, err
	}
	guard = guardOf(c)
	if err := h.Client.Create(ctx, guard); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating the guard of %s: %w (a guard not in the cache yet; retried)", c.Name, err)
		}
		return nil, fmt.Errorf("creating the guard of %s: %w", c.Name, err)
	}
	return guard, nil
}

// getGuard returns c's guard, or nil if there is none. A ConfigMap of the
// guard's name that is not c's guard is refused with
// *ownership.NotControlledError.
func (h *ClusterHooks) getGuard(ctx context.Context, c *v1alpha1.EtcdCluster) (*corev1.ConfigMap, error) {
	var guard corev1.ConfigMap
	err := h.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: GuardName(c.Name)}, &guard)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the guard of %s: %w", c.Name, err)
	}
	if guard.Labels[LabelGuardOf] != string(c.UID) {
		return nil, &ownership.NotControlledError{Object: &guard}
	}
	return &guard, nil
}

// holdChildren makes guard an owner of c's member pods and claims that
// lack it: those created by an operator before guards. An object c does
// not control (an orphaned claim of an earlier cluster) is not touched.
func (h *ClusterHooks) holdChildren(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation, guard *corev1.ConfigMap) error {
	var objs []client.Object
	for _, name := range slices.Sorted(maps.Keys(obs.pods)) {
		objs = append(objs, obs.pods[name])
	}
	for _, name := range slices.Sorted(maps.Keys(obs.claimObjects)) {
		objs = append(objs, obs.claimObjects[name])
	}
	for _, obj := range objs {
		if isHeldBy(obj, guard) || !metav1.IsControlledBy(obj, c) {
			continue
		}
		patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
		heldBy(obj, guard)
		if err := h.Client.Patch(ctx, obj, patch); err != nil {
			return fmt.Errorf("adding the guard to the owners of %s: %w", obj.GetName(), err)
		}
	}
	return nil
}

// releaseGuard deletes c's guard, if it has one: the garbage collector
// then deletes the children whose other owner, c, is gone or going. A
// ConfigMap of the guard's name that is not c's guard is left alone.
func (h *ClusterHooks) releaseGuard(ctx context.Context, c *v1alpha1.EtcdCluster) error {
	guard, err := h.getGuard(ctx, c)
	if ownership.IsConflict(err) {
		return nil
	}
	if err != nil || guard == nil {
		return err
	}
	uid := guard.UID
	err = h.Client.Delete(ctx, guard, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the guard of %s: %w", c.Name, err)
	}
	return nil
}

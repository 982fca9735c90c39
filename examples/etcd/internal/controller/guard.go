package controller

import (
	"context"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/guard"
)

// Every child of an EtcdCluster (member pods, data claims, Services, the
// PodDisruptionBudget, certificate Secrets) is held by the cluster's guard
// (package guard): under foreground and orphan deletion the garbage
// collector keeps them, and while the namespace is being deleted the
// guard's admission policy does, until Finalize has taken the final backup
// and released the guard.
const (
	// LabelGuardOf, on a guard, is the UID of the EtcdCluster it guards.
	LabelGuardOf = "etcd.opkit.dev/guard-of"
	// GuardPolicy names the guard's ValidatingAdmissionPolicy and binding
	// (config/guard).
	GuardPolicy = "etcd-operator-guard"
)

// GuardName returns the name of the guard of the EtcdCluster named cluster.
func GuardName(cluster string) string { return cluster + "-guard" }

// newGuard returns the Guard of EtcdClusters.
func newGuard(c client.Client) (*guard.Guard, error) {
	return guard.New(c, &v1alpha1.EtcdCluster{}, guard.WithLabel(LabelGuardOf))
}

// heldBy makes g an owner of obj and returns obj.
func heldBy[T client.Object](obj T, g *corev1.ConfigMap) T { return guard.Hold(obj, g) }

// isHeldBy reports whether g is one of obj's owners: a child whose
// EtcdCluster owner a foreground or orphan deletion removed is still c's.
func isHeldBy(obj client.Object, g *corev1.ConfigMap) bool { return guard.IsOwnedBy(obj, g) }

// holdChildren makes g hold c's member pods and claims that it does not
// hold yet: those made by an operator before guards, or before
// guard.LabelHeldBy. An object c does not control (an orphaned claim of an
// earlier cluster) is not touched.
func (h *ClusterHooks) holdChildren(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation, g *corev1.ConfigMap) error {
	var objs []client.Object
	for _, name := range slices.Sorted(maps.Keys(obs.pods)) {
		objs = append(objs, obs.pods[name])
	}
	for _, name := range slices.Sorted(maps.Keys(obs.claimObjects)) {
		objs = append(objs, obs.claimObjects[name])
	}
	objs = slices.DeleteFunc(objs, func(o client.Object) bool { return !metav1.IsControlledBy(o, c) })
	return guard.HoldExisting(ctx, h.Client, g, objs...)
}

// NewGuardCollector returns the collector of guards whose EtcdCluster is
// gone without its finalizer (guard.Collector); apiReader reads clusters
// uncached.
func NewGuardCollector(c client.Client, apiReader client.Reader) (*guard.Collector, error) {
	g, err := newGuard(c)
	if err != nil {
		return nil, err
	}
	return guard.NewCollector(g, apiReader)
}

func (h *ClusterHooks) ensureGuard(ctx context.Context, c *v1alpha1.EtcdCluster) (*corev1.ConfigMap, error) {
	return h.guard.Ensure(ctx, c)
}

func (h *ClusterHooks) getGuard(ctx context.Context, c *v1alpha1.EtcdCluster) (*corev1.ConfigMap, error) {
	return h.guard.Get(ctx, c)
}

func (h *ClusterHooks) releaseGuard(ctx context.Context, c *v1alpha1.EtcdCluster) error {
	return h.guard.Release(ctx, c)
}

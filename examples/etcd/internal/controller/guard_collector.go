package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
)

// GuardCollector deletes guards (see LabelGuardOf) whose EtcdCluster is
// gone: normally the cluster's finalizer deletes its guard after the final
// backup, but a finalizer removed by hand, while the operator was down for
// example, leaves the guard holding the cluster's pods and claims, which
// the garbage collector would then never delete. It looks at every guard
// when it starts and at a cluster's guard when the cluster is deleted.
//
// A guard whose cluster still exists, being deleted or not, is left to the
// cluster's finalizer: deleting it early would let a foreground deletion
// remove the members before their final backup.
type GuardCollector struct {
	// Client reads guards (through the manager's cache) and deletes them.
	Client client.Client
	// APIReader reads EtcdClusters from the API server (the manager's
	// GetAPIReader): a cluster created a moment ago may not be in the
	// cache yet, and its new guard must not pass for a leftover.
	APIReader client.Reader
}

// NewGuardCollector returns a GuardCollector; both readers are required.
func NewGuardCollector(c client.Client, apiReader client.Reader) (*GuardCollector, error) {
	if c == nil || apiReader == nil {
		return nil, errors.New("controller.NewGuardCollector: the client and the API reader are required")
	}
	return &GuardCollector{Client: c, APIReader: apiReader}, nil
}

// Reconcile deletes the guard named by req if its EtcdCluster is gone (not
// found, or found with another UID: a new cluster of the same name).
func (g *GuardCollector) Reconcile(ctx context.Context, req crreconcile.Request) (crreconcile.Result, error) {
	var guard corev1.ConfigMap
	if err := g.Client.Get(ctx, req.NamespacedName, &guard); err != nil {
		return crreconcile.Result{}, client.IgnoreNotFound(err)
	}
	uid := guard.Labels[LabelGuardOf]
	if uid == "" || guard.DeletionTimestamp != nil {
		return crreconcile.Result{}, nil
	}
	var c v1alpha1.EtcdCluster
	err := g.APIReader.Get(ctx, types.NamespacedName{Namespace: guard.Namespace, Name: guard.Labels[LabelCluster]}, &c)
	switch {
	case err == nil && string(c.UID) == uid:
		return crreconcile.Result{}, nil
	case err != nil && !apierrors.IsNotFound(err):
		return crreconcile.Result{}, fmt.Errorf("reading the EtcdCluster of guard %s: %w", guard.Name, err)
	}
	guardUID := guard.UID
	err = g.Client.Delete(ctx, &guard, client.Preconditions{UID: &guardUID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if client.IgnoreNotFound(err) != nil {
		return crreconcile.Result{}, fmt.Errorf("deleting guard %s of a deleted EtcdCluster: %w", guard.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("deleted the guard of a deleted EtcdCluster; its pods and claims go with it",
		"guard", klog.KObj(&guard), "etcdcluster", guard.Labels[LabelCluster], "uid", uid)
	return crreconcile.Result{}, nil
}

// SetupWithManager runs the collector in mgr, on the guards the manager's
// cache holds (restrict it to LabelGuardOf: see CacheOptions).
func (g *GuardCollector) SetupWithManager(mgr ctrl.Manager) error {
	isGuard := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := o.GetLabels()[LabelGuardOf]
		return ok
	})
	deleted := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
	}
	guardOfCluster := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []crreconcile.Request {
		return []crreconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: GuardName(o.GetName())}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("etcdcluster-guard").
		For(&corev1.ConfigMap{}, builder.WithPredicates(isGuard)).
		Watches(&v1alpha1.EtcdCluster{}, guardOfCluster, builder.WithPredicates(deleted)).
		Complete(g)
}

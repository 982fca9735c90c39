package main

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// setupWatchOnly registers a controller that watches what any operator of
// this kind must (its Memcacheds' specs and their Deployments, to learn
// when one has rolled out) and does nothing else: each pass reads its
// Memcached from the cache. hack/scale's watched contender runs it beside
// the floor, for the floor's cost plus watching alone.
func setupWatchOnly(mgr ctrl.Manager, workers int) error {
	c := mgr.GetClient()
	return ctrl.NewControllerManagedBy(mgr).
		For(&memcached{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&appsv1.Deployment{}).
		Named("memcached-watch-only").
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(reconcile.Func(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
			return ctrl.Result{}, client.IgnoreNotFound(c.Get(ctx, req.NamespacedName, &memcached{}))
		}))
}

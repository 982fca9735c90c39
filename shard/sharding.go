package shard

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Sharding spreads a reconciler's kind over the members of a Ring: a
// Sharder labels each object and child with its slot, and Handoff passes
// a member only its own. It is what reconcile.WithShard takes.
type Sharding struct {
	ring     Ring
	children []Child
}

// For returns the Sharding of a kind over ring. children are kinds whose
// objects take their owner's slot beyond those the reconciler writes
// itself (a Deployment's pods, say). The manager's cache must be
// ring.NewCache with the kind, every child kind and those children.
// RBAC: Leases in ring.Namespace (get, list, watch, create, patch,
// delete), get and patch on the kind, patch on its children.
func For(ring Ring, children ...Child) *Sharding {
	return &Sharding{ring: ring, children: children}
}

// Setup adds a Sharder of obj's kind to mgr, with s's children and owned
// (selected by sel) unless given among them, and returns r wrapped in
// Handoff.
func (s *Sharding) Setup(mgr ctrl.Manager, obj client.Object, owned []client.Object, sel labels.Selector,
	r reconcile.Reconciler) (reconcile.Reconciler, error) {
	gvk, err := apiutil.GVKForObject(obj, mgr.GetScheme())
	if err != nil {
		return nil, fmt.Errorf("shard: %w", err)
	}
	sh := &Sharder{Ring: s.ring, GVK: gvk, Children: s.children}
	given := map[schema.GroupVersionKind]bool{}
	for _, c := range s.children {
		gvk, err := apiutil.GVKForObject(c.Object, mgr.GetScheme())
		if err != nil {
			return nil, fmt.Errorf("shard: a child kind: %w", err)
		}
		given[gvk] = true
	}
	for _, o := range owned {
		gvk, err := apiutil.GVKForObject(o, mgr.GetScheme())
		if err != nil {
			return nil, fmt.Errorf("shard: an owned kind: %w", err)
		}
		if !given[gvk] {
			sh.Children = append(sh.Children, Child{Object: o, Selector: sel})
		}
	}
	if err := sh.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	return Handoff(mgr, obj, r), nil
}

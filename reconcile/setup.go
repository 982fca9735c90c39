package reconcile

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// SetupWithManager builds a Reconciler for T with New, using the manager's
// client, scheme and event recorder, and registers a controller for it:
//
//	For(T) with the default predicates (or WithPredicates),
//	Owns(each WithOwns type), Watches(each WithWatches registration),
//	WatchesRawSource(each WithRawSource source),
//	the controller options of WithControllerOptions,
//	MaxConcurrentReconciles (WithMaxConcurrentReconciles),
//	and with WithShard the ring's member, its Sharder and Handoff.
//
// The default predicates let through what the Reconciler must act on and
// drop what it need not: a change of generation (spec), of labels or
// annotations, of finalizers, the start of deletion, creations and
// deletions. Status-only updates, including the Reconciler's own status
// writes, and periodic resyncs are dropped, so they cost no pass. Owned
// children's events pass unless they are resyncs (an update that changes
// nothing, not even the resourceVersion): a child's resync would cost its
// owner a pass that finds what the last one found, N passes every resync
// period for N objects. WithWatches registrations keep their own
// predicates; add predicate.ResourceVersionChangedPredicate to drop their
// resyncs too.
//
// SetupWithManager also reads the OpenAPI schema the API server publishes
// for T (one discovery request, allowed to every authenticated user by the
// default RBAC) and fails with ErrStatusSchema, naming the CRD and the fix,
// when it lacks status.observedGeneration or status.conditions keyed by
// type: the Go type has them but the CRD was not regenerated, and every
// status write would fail. A schema it cannot read is not an error (a CRD
// just created may not be published yet): the status write's error then
// wraps ErrStatusSchema with the same fix.
//
// For anything else build the controller with ctrl.NewControllerManagedBy
// and pass it a Reconciler from New.
func SetupWithManager[T Object](mgr ctrl.Manager, hooks Hooks[T], opts ...SetupOption) (*Reconciler[T], error) {
	if mgr == nil {
		return nil, fmt.Errorf("reconcile.SetupWithManager: manager is nil")
	}
	newObj, err := constructor[T]()
	if err != nil {
		return nil, err
	}
	var so setupOptions
	// A func literal, not the method value: GetEventRecorder's result type
	// differs between controller-runtime v0.24 and v0.25.
	recorderFor := func(name string) events.EventRecorder { return mgr.GetEventRecorder(name) }
	r, err := build(mgr.GetClient(), mgr.GetScheme(), hooks, recorderFor, func(o *options) error {
		so.options = *o
		for _, opt := range opts {
			opt.applyToSetup(&so)
		}
		*o = so.options
		return so.validate()
	})
	if err != nil {
		return nil, err
	}

	crdName, namespaced := "", true
	if m, err := mgr.GetRESTMapper().RESTMapping(r.gvk.GroupKind(), r.gvk.Version); err == nil {
		crdName = m.Resource.Resource + "." + r.gvk.Group
		namespaced = m.Scope.Name() != meta.RESTScopeNameRoot
	}
	if err := checkStatusSchema(mgr.GetConfig(), r.gvk, crdName); err != nil {
		return nil, fmt.Errorf("reconcile.SetupWithManager: %w", err)
	}

	preds := so.predicates
	if len(preds) == 0 {
		preds = []predicate.Predicate{DefaultPredicate()}
	}
	r.cache = mgr.GetCache()
	preds = append([]predicate.Predicate{r.writesSeen()}, preds...)
	b := ctrl.NewControllerManagedBy(mgr).
		Named(r.opts.name).
		For(newObj(), builder.WithPredicates(preds...)).
		WithOptions(so.controllerOptions())
	// WithOwns and WithDependents may name one kind twice.
	owned, err := distinctKinds(mgr.GetScheme(), so.owns)
	if err != nil {
		return nil, fmt.Errorf("setting up controller %s: %w", r.opts.name, err)
	}
	unseen := &unseenCreates{kinds: map[schema.GroupVersionKind]bool{}}
	for _, o := range owned {
		unseen.kinds[o.gvk] = true
		b = b.Owns(o.obj, builder.WithPredicates(unseen.predicate(o.gvk), predicate.ResourceVersionChangedPredicate{}))
	}
	r.pass.unseen = unseen
	for _, w := range so.watches {
		b = b.Watches(w.obj, w.handler, w.opts...)
	}
	for _, src := range so.rawSources {
		b = b.WatchesRawSource(src)
	}
	if so.namespaceDeletion && namespaced { // a cluster-scoped kind has no namespace to go
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := r.watchNamespaces(ctx, mgr, b)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("setting up controller %s: %w", r.opts.name, err)
		}
	}
	var inner crreconcile.Reconciler = r
	if so.shard != nil {
		objs := make([]client.Object, len(owned))
		for i, o := range owned {
			objs[i] = o.obj
		}
		if inner, err = so.shard.Setup(mgr, newObj(), objs, writtenByChildren, r); err != nil {
			return nil, fmt.Errorf("setting up controller %s: %w", r.opts.name, err)
		}
	}
	if err := b.Complete(inner); err != nil {
		return nil, fmt.Errorf("setting up controller %s: %w", r.opts.name, err)
	}
	return r, nil
}

// controllerOptions merges WithControllerOptions with the options of
// their own.
func (so *setupOptions) controllerOptions() controller.Options {
	o := so.controller
	if so.maxConcurrent > 0 {
		o.MaxConcurrentReconciles = so.maxConcurrent
	}
	if so.skipNameCheck != nil {
		o.SkipNameValidation = so.skipNameCheck
	}
	return o
}

// DefaultPredicate is SetupWithManager's filter for the reconciled kind: it
// passes creations, deletions, and updates that change the generation,
// labels, annotations or finalizers, or that start deletion.
func DefaultPredicate() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			if o == nil || n == nil {
				return true
			}
			return o.GetGeneration() != n.GetGeneration() ||
				!maps.Equal(o.GetLabels(), n.GetLabels()) ||
				!maps.Equal(o.GetAnnotations(), n.GetAnnotations()) ||
				!slices.Equal(o.GetFinalizers(), n.GetFinalizers()) ||
				o.GetDeletionTimestamp().IsZero() != n.GetDeletionTimestamp().IsZero()
		},
	}
}

// writtenByChildren selects the objects Children wrote.
var writtenByChildren = func() labels.Selector {
	r, err := labels.NewRequirement(LabelAppliedDigest, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant key
	}
	return labels.NewSelector().Add(*r)
}()

type ownedKind struct {
	obj client.Object
	gvk schema.GroupVersionKind
}

// distinctKinds returns objs with one object per kind, by GVK: two
// unstructured kinds share a Go type.
func distinctKinds(scheme *runtime.Scheme, objs []client.Object) ([]ownedKind, error) {
	var out []ownedKind
	seen := map[schema.GroupVersionKind]bool{}
	for _, o := range objs {
		gvk, err := apiutil.GVKForObject(o, scheme)
		if err != nil {
			return nil, err
		}
		if !seen[gvk] {
			seen[gvk] = true
			out = append(out, ownedKind{obj: o, gvk: gvk})
		}
	}
	return out, nil
}

// writesSeen is a predicate that filters nothing: each event of the kind
// settles what the Reconciler keeps of the object against the informer's
// store (settle). Not against the event's object: a listener delivers
// events after the store has moved on, possibly several versions later.
func (r *Reconciler[T]) writesSeen() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			r.settle(context.Background(), client.ObjectKeyFromObject(e.ObjectNew))
			return true
		},
		DeleteFunc: func(e event.DeleteEvent) bool {
			r.settle(context.Background(), client.ObjectKeyFromObject(e.Object))
			return true
		},
	}
}

package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/internal/nsgoing"
)

// WithNamespaceDeletion runs the deletion flow (Finalize, then the
// finalizer's removal) as soon as an object's namespace is being deleted,
// not once the namespace controller deletes the object: with ordered
// namespace deletion (Kubernetes 1.34+) that comes only after the
// namespace's pods are gone, which a guard keeps until Finalize releases
// them. Finalize learns why from NamespaceGoing. The Reconciler's events
// about objects of going namespaces are dropped (the API server refuses
// them).
//
// SetupWithManager reads namespaces from one metadata informer of the
// manager's cache (RBAC: get, list and watch on namespaces, which it
// checks) and queues a namespace's objects when its deletion starts; New
// reads them through its client.
func WithNamespaceDeletion() Option {
	return reconcilerOption(func(o *options) { o.namespaceDeletion = true })
}

// NamespaceGoing reports whether the pass of ctx runs because the
// object's namespace is being deleted (WithNamespaceDeletion): the
// namespace controller is deleting what Finalize may read (Secrets,
// ConfigMaps), so take what it needs first.
func NamespaceGoing(ctx context.Context) bool {
	going, _ := ctx.Value(namespaceGoingKey{}).(bool)
	return going
}

type namespaceGoingKey struct{}

// DropEventsInGoingNamespaces returns rec without the events about
// objects whose namespace is being deleted: the API server refuses them,
// and client-go logs each refusal as an error. It reads the namespace
// through r per event; the manager's cache, with WithNamespaceDeletion's
// informer, sends no request.
func DropEventsInGoingNamespaces(rec events.EventRecorder, r client.Reader) events.EventRecorder {
	if g, ok := rec.(goingNamespaces); ok {
		return goingNamespaces{EventRecorder: g.EventRecorder, reader: r}
	}
	return goingNamespaces{EventRecorder: rec, reader: r}
}

type goingNamespaces struct {
	events.EventRecorder
	reader client.Reader
}

// eventReadTimeout bounds the namespace read of an event.
const eventReadTimeout = 5 * time.Second

func (r goingNamespaces) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	if o, ok := regarding.(client.Object); ok && o.GetNamespace() != "" {
		ctx, cancel := context.WithTimeout(context.Background(), eventReadTimeout)
		going, err := nsgoing.Terminating(ctx, r.reader, o.GetNamespace())
		cancel()
		if err == nil && going {
			return
		}
	}
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

// namespaceReadTimeout bounds a pass's namespace read: a cache whose
// namespace informer cannot sync (no RBAC) would block it for good.
const namespaceReadTimeout = 10 * time.Second

// namespaceGoing reports whether obj's namespace is being deleted, when
// the Reconciler watches namespaces.
func (r *Reconciler[T]) namespaceGoing(ctx context.Context, obj T) (bool, error) {
	if r.namespaces == nil || obj.GetNamespace() == "" {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, namespaceReadTimeout)
	defer cancel()
	return nsgoing.Terminating(ctx, r.namespaces, obj.GetNamespace())
}

// watchNamespaces makes b queue a namespace's objects of the kind when
// its deletion starts, and r read namespaces from mgr's cache.
func (r *Reconciler[T]) watchNamespaces(ctx context.Context, mgr ctrl.Manager, b *builder.Builder) error {
	if err := mgr.GetAPIReader().List(ctx, nsgoing.NewList(), client.Limit(1)); err != nil {
		return fmt.Errorf("WithNamespaceDeletion needs get, list and watch on namespaces (a ClusterRole): %w", err)
	}
	list, err := mgr.GetScheme().New(r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List"))
	if err != nil {
		return fmt.Errorf("WithNamespaceDeletion: %w", err)
	}
	objs, ok := list.(client.ObjectList)
	if !ok {
		return errors.New("WithNamespaceDeletion: the kind's list is not a client.ObjectList")
	}
	cache := mgr.GetCache()
	r.namespaces = cache
	objectsIn := func(ctx context.Context, ns client.Object) []crreconcile.Request {
		l := objs.DeepCopyObject().(client.ObjectList)
		if err := cache.List(ctx, l, client.InNamespace(ns.GetName())); err != nil {
			return nil
		}
		var reqs []crreconcile.Request
		_ = meta.EachListItem(l, func(o runtime.Object) error {
			if m, ok := o.(client.Object); ok {
				reqs = append(reqs, crreconcile.Request{NamespacedName: client.ObjectKeyFromObject(m)})
			}
			return nil
		})
		return reqs
	}
	b.Watches(nsgoing.New(), handler.EnqueueRequestsFromMapFunc(objectsIn), builder.WithPredicates(deletionStarted()))
	return nil
}

// deletionStarted passes a namespace whose deletion has started: an
// update that sets its deletionTimestamp, or one found deleting.
func deletionStarted() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return e.Object.GetDeletionTimestamp() != nil },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetDeletionTimestamp() == nil && e.ObjectNew.GetDeletionTimestamp() != nil
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

package shard

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Sharder labels every object of a kind with the member of Ring that owns
// it (Owner of namespace/name among the live members). An object whose
// member died is relabelled at once; one whose member lives but no longer
// owns it is labelled to drain, and relabelled only after that member
// acknowledged (Handoff). Every write is conditional on the version read,
// so sharders with different views of the ring never undo each other's
// work; only the member owning the key "sharder" writes, to keep it to one.
type Sharder struct {
	Ring Ring
	// Identity is this replica, a member of Ring.
	Identity string
	// GVK is the kind sharded.
	GVK schema.GroupVersionKind
}

// SetupWithManager runs the sharder on every replica, leader or not. It
// keeps a cache of its own: the kind's metadata, all of it, and the ring's
// Leases, since the manager's cache holds only this member's objects.
func (s *Sharder) SetupWithManager(mgr ctrl.Manager) error {
	if s.Identity == "" {
		return ErrIdentity
	}
	// A scheme of its own: the manager's need not know Leases, and
	// metadata needs none.
	scheme := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: scheme, Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient(),
		ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{s.Ring.Namespace: {}}},
		},
	})
	if err != nil {
		return fmt.Errorf("shard: the sharder's cache: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return err
	}
	r := &sharder{Sharder: *s, cache: c, writer: mgr.GetClient(), view: s.Ring.View(), changed: make(chan event.GenericEvent, 1024)}
	if err := mgr.Add(r); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("shard-" + s.Ring.Name).
		WatchesRawSource(source.Kind(c, r.object(), &handler.TypedEnqueueRequestForObject[*metav1.PartialObjectMetadata]{})).
		WatchesRawSource(source.Channel(r.changed, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

type sharder struct {
	Sharder
	cache   cache.Cache
	writer  client.Client
	view    *View
	changed chan event.GenericEvent

	mu      sync.Mutex
	members []string
}

var (
	_ manager.LeaderElectionRunnable = (*sharder)(nil)
	_ reconcile.Reconciler           = (*sharder)(nil)
)

func (s *sharder) object() *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{}
	o.SetGroupVersionKind(s.GVK)
	return o
}

func (s *sharder) NeedLeaderElection() bool { return false }

// Start follows the ring's membership, checked at a tenth of the lease
// duration (a read of its own cache); when it changes, every object is
// queued.
func (s *sharder) Start(ctx context.Context) error {
	if !s.cache.WaitForCacheSync(ctx) {
		return ctx.Err()
	}
	tick := time.NewTicker(s.Ring.leaseDuration() / 10)
	defer tick.Stop()
	for {
		members, err := s.view.Members(ctx, s.cache, time.Now())
		if err == nil {
			s.mu.Lock()
			same := slices.Equal(members, s.members)
			s.members = members
			s.mu.Unlock()
			if !same {
				s.queueAll(ctx)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (s *sharder) queueAll(ctx context.Context) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(s.GVK.GroupVersion().WithKind(s.GVK.Kind + "List"))
	if err := s.cache.List(ctx, list); err != nil {
		return
	}
	for i := range list.Items {
		select {
		case s.changed <- event.GenericEvent{Object: &list.Items[i]}:
		case <-ctx.Done():
			return
		}
	}
}

func (s *sharder) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	s.mu.Lock()
	members := s.members
	s.mu.Unlock()
	if len(members) == 0 || Owner("sharder", members) != s.Identity {
		return reconcile.Result{}, nil
	}
	obj := s.object()
	if err := s.cache.Get(ctx, req.NamespacedName, obj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	cur, draining := obj.Labels[s.Ring.Label()], obj.Labels[s.Ring.DrainLabel()] != ""
	want := Owner(req.String(), members)
	patch := client.MergeFromWithOptions(obj.DeepCopy(), client.MergeFromWithOptimisticLock{})
	switch {
	case cur == want && !draining:
		return reconcile.Result{}, nil
	case cur == "" || !slices.Contains(members, cur):
		metav1.SetMetaDataLabel(&obj.ObjectMeta, s.Ring.Label(), want)
		delete(obj.Labels, s.Ring.DrainLabel())
	case cur == want: // drained, then wanted back before the member acknowledged
		delete(obj.Labels, s.Ring.DrainLabel())
	case draining:
		return reconcile.Result{}, nil // the member acknowledges
	default:
		metav1.SetMetaDataLabel(&obj.ObjectMeta, s.Ring.DrainLabel(), "true")
	}
	if err := s.writer.Patch(ctx, obj, patch); err != nil {
		return reconcile.Result{}, fmt.Errorf("shard: labelling %s for %s: %w", req, want, err)
	}
	return reconcile.Result{}, nil
}

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
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
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
	// Children are the kinds whose objects move with their owner.
	Children []Child
}

// SetupWithManager runs the sharder on every replica, leader or not. It
// keeps a cache of its own: the metadata of the kind and its Children,
// all of it, trimmed to what it reads, and the ring's Leases, since the
// manager's cache holds only this member's objects.
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
	byObject := map[client.Object]cache.ByObject{
		&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{s.Ring.Namespace: {}}},
		metadataOf(s.GVK):       {Transform: trim},
	}
	kinds := map[schema.GroupVersionKind]bool{s.GVK: true}
	children := make([]child, len(s.Children))
	for i, c := range s.Children {
		gvk, err := apiutil.GVKForObject(c.Object, mgr.GetScheme())
		if err != nil {
			return fmt.Errorf("shard: Sharder.Children[%d]: %w", i, err)
		}
		if kinds[gvk] {
			return fmt.Errorf("shard: Sharder.Children[%d]: %s is sharded or a child already: give each kind once", i, gvk.Kind)
		}
		kinds[gvk] = true
		owner := c.Owner
		if owner == nil {
			owner = ControlledBy(s.GVK.GroupKind())
		}
		children[i] = child{gvk: gvk, owner: owner}
		byObject[metadataOf(gvk)] = cache.ByObject{Label: c.Selector, Transform: trim}
	}
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: scheme, Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient(), ByObject: byObject,
	})
	if err != nil {
		return fmt.Errorf("shard: the sharder's cache: %w", err)
	}
	for _, ch := range children {
		err := c.IndexField(context.Background(), metadataOf(ch.gvk), ownerIndex, func(o client.Object) []string {
			if key, ok := ch.owner(o); ok {
				return []string{key.String()}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("shard: indexing %s by owner: %w", ch.gvk.Kind, err)
		}
	}
	if err := mgr.Add(c); err != nil {
		return err
	}
	r := &sharder{Sharder: *s, children: children, cache: c, writer: mgr.GetClient(), view: s.Ring.View(), changed: make(chan event.GenericEvent, 1024)}
	if err := mgr.Add(r); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("shard-" + s.Ring.Name).
		WatchesRawSource(source.Kind(c, metadataOf(s.GVK), &handler.TypedEnqueueRequestForObject[*metav1.PartialObjectMetadata]{})).
		WatchesRawSource(source.Channel(r.changed, &handler.EnqueueRequestForObject{}))
	for _, ch := range children {
		toOwner := handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, o *metav1.PartialObjectMetadata) []reconcile.Request {
			if key, ok := ch.owner(o); ok && o.Labels[s.Ring.Label()] == "" {
				return []reconcile.Request{{NamespacedName: key}}
			}
			return nil
		})
		b = b.WatchesRawSource(source.Kind(c, metadataOf(ch.gvk), toOwner, unlabelled(s.Ring.Label())))
	}
	return b.Complete(r)
}

// ownerIndex indexes the sharder's cache of children by their owner.
const ownerIndex = "shard.opkit.dev/owner"

type child struct {
	gvk   schema.GroupVersionKind
	owner func(client.Object) (types.NamespacedName, bool)
}

func metadataOf(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{}
	o.SetGroupVersionKind(gvk)
	return o
}

// trim keeps of an object's metadata what the sharder reads: every
// replica caches all objects of its kinds.
func trim(obj any) (any, error) {
	o, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	m := metav1.ObjectMeta{
		Name: o.Name, Namespace: o.Namespace, UID: o.UID, ResourceVersion: o.ResourceVersion,
		Labels: o.Labels, DeletionTimestamp: o.DeletionTimestamp,
	}
	if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
		m.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	o.ObjectMeta = m
	return o, nil
}

// unlabelled passes a child's creation or labelling without the ring's
// label: the sharder labels it. Moves of labelled children follow their
// owner's events.
func unlabelled(label string) predicate.TypedPredicate[*metav1.PartialObjectMetadata] {
	return predicate.TypedFuncs[*metav1.PartialObjectMetadata]{
		CreateFunc: func(e event.TypedCreateEvent[*metav1.PartialObjectMetadata]) bool {
			return e.Object.Labels[label] == ""
		},
		UpdateFunc: func(e event.TypedUpdateEvent[*metav1.PartialObjectMetadata]) bool {
			return e.ObjectNew.Labels[label] == "" && e.ObjectOld.Labels[label] != ""
		},
		DeleteFunc:  func(event.TypedDeleteEvent[*metav1.PartialObjectMetadata]) bool { return false },
		GenericFunc: func(event.TypedGenericEvent[*metav1.PartialObjectMetadata]) bool { return false },
	}
}

type sharder struct {
	Sharder
	children []child
	cache    cache.Cache
	writer   client.Client
	view     *View
	changed  chan event.GenericEvent

	mu      sync.Mutex
	members []string
}

var (
	_ manager.LeaderElectionRunnable = (*sharder)(nil)
	_ reconcile.Reconciler           = (*sharder)(nil)
)

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
	obj := metadataOf(s.GVK)
	if err := s.cache.Get(ctx, req.NamespacedName, obj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	cur, draining := obj.Labels[s.Ring.Label()], obj.Labels[s.Ring.DrainLabel()] != ""
	want := Owner(req.String(), members)
	patch := client.MergeFromWithOptions(obj.DeepCopy(), client.MergeFromWithOptimisticLock{})
	// The children follow the object's member; they move before it, so
	// that its new member finds them, and only once its old member
	// acknowledged or died, so that the old one never misses them.
	member, write := cur, true
	switch {
	case cur == want && !draining:
		write = false
	case cur == "" || !slices.Contains(members, cur):
		member = want
		metav1.SetMetaDataLabel(&obj.ObjectMeta, s.Ring.Label(), want)
		delete(obj.Labels, s.Ring.DrainLabel())
	case cur == want: // drained, then wanted back before the member acknowledged
		delete(obj.Labels, s.Ring.DrainLabel())
	case draining:
		write = false // the member acknowledges
	default:
		metav1.SetMetaDataLabel(&obj.ObjectMeta, s.Ring.DrainLabel(), "true")
	}
	if err := s.label(ctx, req.NamespacedName, member); err != nil {
		return reconcile.Result{}, err
	}
	if !write {
		return reconcile.Result{}, nil
	}
	if err := s.writer.Patch(ctx, obj, patch); err != nil {
		return reconcile.Result{}, fmt.Errorf("shard: labelling %s for %s: %w", req, want, err)
	}
	return reconcile.Result{}, nil
}

// label labels the children of key with member.
func (s *sharder) label(ctx context.Context, key types.NamespacedName, member string) error {
	for _, ch := range s.children {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(ch.gvk.GroupVersion().WithKind(ch.gvk.Kind + "List"))
		if err := s.cache.List(ctx, list, client.InNamespace(key.Namespace), client.MatchingFields{ownerIndex: key.String()}); err != nil {
			return fmt.Errorf("shard: listing the %s children of %s: %w", ch.gvk.Kind, key, err)
		}
		for i := range list.Items {
			c := &list.Items[i]
			if c.Labels[s.Ring.Label()] == member {
				continue
			}
			// No optimistic lock: the label is the sharder's alone,
			// and children change often (a Deployment's status).
			patch := client.MergeFrom(c.DeepCopy())
			metav1.SetMetaDataLabel(&c.ObjectMeta, s.Ring.Label(), member)
			if err := s.writer.Patch(ctx, c, patch); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("shard: labelling %s %s/%s for %s: %w", ch.gvk.Kind, c.Namespace, c.Name, member, err)
			}
		}
	}
	return nil
}

package shard

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
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
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// Sharder labels every object of a kind with the member of Ring that owns
// it (Owner of namespace/name among the live members). An object whose
// member died is relabelled at once; one whose member lives but no longer
// owns it is labelled to drain, and relabelled only after that member
// acknowledged (Handoff). Every write is conditional on the version read,
// so sharders with different views of the ring never undo each other's
// work; only the member owning the key "sharder" caches and writes.
type Sharder struct {
	Ring Ring
	// Identity is this replica, a member of Ring.
	Identity string
	// GVK is the kind sharded.
	GVK schema.GroupVersionKind
	// Children are the kinds whose objects move with their owner.
	Children []Child
}

// SetupWithManager runs the sharder on every replica, leader or not:
// each follows the ring's Leases, and the one owning the key "sharder"
// keeps a cache of its own, of the metadata of the kind and its Children,
// trimmed to what it reads, and writes the labels. The manager's cache
// holds only this member's objects.
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
	leases, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: scheme, Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient(),
		ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{s.Ring.Namespace: {}}},
		},
	})
	if err != nil {
		return fmt.Errorf("shard: the sharder's cache of Leases: %w", err)
	}
	if err := mgr.Add(leases); err != nil {
		return err
	}
	byObject := map[client.Object]cache.ByObject{metadataOf(s.GVK): {Transform: trim}}
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
	r := &sharder{Sharder: *s, children: children, leases: leases, writer: mgr.GetClient(), view: s.Ring.View(),
		log: mgr.GetLogger().WithValues("controller", "shard-"+s.Ring.Name),
		newCache: func() (cache.Cache, error) {
			opts := cache.Options{Scheme: scheme, Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient(), ByObject: byObject}
			if len(s.Ring.Namespaces) > 0 {
				opts.DefaultNamespaces = map[string]cache.Config{}
				for _, ns := range s.Ring.Namespaces {
					opts.DefaultNamespaces[ns] = cache.Config{}
				}
			}
			return cache.New(mgr.GetConfig(), opts)
		}}
	return mgr.Add(r)
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

// trim keeps of an object's metadata what the sharder reads: the
// sharder's replica caches every object of its kinds.
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

// childChanged passes a child's creation, and a change of its labels or
// controller: the sharder checks its owner's member then. Status updates,
// the bulk of a child's events, pass not.
func childChanged() predicate.TypedPredicate[*metav1.PartialObjectMetadata] {
	return predicate.TypedFuncs[*metav1.PartialObjectMetadata]{
		UpdateFunc: func(e event.TypedUpdateEvent[*metav1.PartialObjectMetadata]) bool {
			o, n := e.ObjectOld, e.ObjectNew
			return !maps.Equal(o.Labels, n.Labels) || !slices.Equal(o.OwnerReferences, n.OwnerReferences)
		},
		DeleteFunc:  func(event.TypedDeleteEvent[*metav1.PartialObjectMetadata]) bool { return false },
		GenericFunc: func(event.TypedGenericEvent[*metav1.PartialObjectMetadata]) bool { return false },
	}
}

type sharder struct {
	Sharder
	children []child
	leases   cache.Cache
	writer   client.Client
	view     *View
	log      logr.Logger
	newCache func() (cache.Cache, error)

	mu      sync.Mutex
	members []string
}

var _ manager.LeaderElectionRunnable = (*sharder)(nil)

func (s *sharder) NeedLeaderElection() bool { return false }

// Start follows the ring's membership, checked at a tenth of the lease
// duration (a read of the Leases' cache). While this member owns the key
// "sharder" it runs a term: a cache and a controller of its own, which
// queue every object again whenever the membership changes.
func (s *sharder) Start(ctx context.Context) error {
	if !s.leases.WaitForCacheSync(ctx) {
		return ctx.Err()
	}
	tick := time.NewTicker(s.Ring.leaseDuration() / 10)
	defer tick.Stop()
	var cur *term
	defer func() { cur.stop() }()
	for {
		members, err := s.view.Members(ctx, s.leases, time.Now())
		if err == nil {
			s.mu.Lock()
			same := slices.Equal(members, s.members)
			s.members = members
			s.mu.Unlock()
			leads := len(members) > 0 && Owner("sharder", members) == s.Identity
			switch {
			case leads && (cur == nil || cur.ended()):
				cur.stop()
				if cur, err = s.startTerm(ctx); err != nil {
					s.log.Error(err, "starting the sharder")
				}
			case !leads && cur != nil:
				cur.stop()
				cur = nil
			case leads && !same:
				go cur.queueAll()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (s *sharder) currentMembers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.members
}

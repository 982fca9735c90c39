package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// ErrNoSlotCache is returned when the manager's cache is not a member's
// (Ring.NewCache).
var ErrNoSlotCache = errors.New("shard: the manager's cache must come from Ring.NewCache (manager.Options.NewCache)")

// Sharder writes each object's slot into its Ring.SlotLabel, once:
// objects of the kind GVK by their own name, Children by their owner's.
// Every member runs one, caching the metadata of the objects that lack
// the label; an object's label is written by the member holding its
// slot.
type Sharder struct {
	Ring Ring
	// GVK is the kind sharded.
	GVK schema.GroupVersionKind
	// Children are the kinds whose objects take their owner's slot. A
	// child written in a pass carries it already (SlotFrom); those
	// written before the ring existed are labelled here.
	Children []Child
}

// SetupWithManager runs the Sharder on mgr, whose cache must be Ring's
// (Ring.NewCache).
func (s *Sharder) SetupWithManager(mgr ctrl.Manager) error {
	sc, ok := mgr.GetCache().(*slotCache)
	if !ok {
		return ErrNoSlotCache
	}
	if sc.ring.Name != s.Ring.Name || sc.ring.slots() != s.Ring.slots() {
		return fmt.Errorf("shard: Sharder.Ring %s with %d slots, the cache's %s with %d: give both one Ring", s.Ring.Name, s.Ring.slots(), sc.ring.Name, sc.ring.slots())
	}
	// Without the label, or with one that is no slot.
	unlabelled := s.Ring.slotsRequirement(nil)
	kinds := []kind{{gvk: s.GVK, owner: func(o client.Object) (types.NamespacedName, bool) { return client.ObjectKeyFromObject(o), true }}}
	byObject := map[client.Object]cache.ByObject{metadataOf(s.GVK): {Label: labels.NewSelector().Add(unlabelled), Transform: trim}}
	for i, c := range s.Children {
		gvk, err := apiutil.GVKForObject(c.Object, mgr.GetScheme())
		if err != nil {
			return fmt.Errorf("shard: Sharder.Children[%d]: %w", i, err)
		}
		for _, k := range kinds {
			if k.gvk == gvk {
				return fmt.Errorf("shard: Sharder.Children[%d]: %s is sharded or a child already: give each kind once", i, gvk.Kind)
			}
		}
		owner := c.Owner
		if owner == nil {
			owner = ControlledBy(s.GVK.GroupKind())
		}
		kinds = append(kinds, kind{gvk: gvk, owner: owner})
		sel := c.Selector
		if sel == nil {
			sel = labels.Everything()
		}
		byObject[metadataOf(gvk)] = cache.ByObject{Label: sel.DeepCopySelector().Add(unlabelled), Transform: trim}
	}
	opts := cache.Options{Scheme: runtime.NewScheme(), Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient(), ByObject: byObject}
	if len(s.Ring.Namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range s.Ring.Namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	c, err := cache.New(mgr.GetConfig(), opts)
	if err != nil {
		return fmt.Errorf("shard: the sharder's cache: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return err
	}
	l := &labeller{ring: s.Ring, slots: sc, cache: c, writer: mgr.GetClient(), kinds: kinds}
	ctl, err := controller.NewTyped("shard-"+s.Ring.Name, mgr, controller.TypedOptions[request]{
		Reconciler: l, SkipNameValidation: ptr.To(true), UsePriorityQueue: ptr.To(false), NeedLeaderElection: ptr.To(false),
	})
	if err != nil {
		return err
	}
	if err := ctl.Watch(source.TypedFunc[request](l.start)); err != nil {
		return err
	}
	sc.whenHeld(l.taken)
	for i := range kinds {
		enqueue := func(o *metav1.PartialObjectMetadata, q workqueue.TypedRateLimitingInterface[request]) {
			if req, ok := l.request(i, o); ok {
				q.Add(req)
			}
		}
		// An object leaving the cache has its label: nothing to do.
		h := handler.TypedFuncs[*metav1.PartialObjectMetadata, request]{
			CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*metav1.PartialObjectMetadata], q workqueue.TypedRateLimitingInterface[request]) {
				enqueue(e.Object, q)
			},
			UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*metav1.PartialObjectMetadata], q workqueue.TypedRateLimitingInterface[request]) {
				enqueue(e.ObjectNew, q)
			},
		}
		if err := ctl.Watch(source.TypedKind(c, metadataOf(kinds[i].gvk), h)); err != nil {
			return err
		}
	}
	return nil
}

type kind struct {
	gvk   schema.GroupVersionKind
	owner func(client.Object) (types.NamespacedName, bool)
}

// request is an object of kinds[kind].
type request struct {
	kind int
	key  types.NamespacedName
}

type labeller struct {
	ring   Ring
	slots  *slotCache
	cache  cache.Cache
	writer client.Client
	kinds  []kind

	mu    sync.Mutex
	ctx   context.Context
	queue workqueue.TypedRateLimitingInterface[request]
}

// start keeps the queue, and queues the objects of the slots held
// already: the sources start at once, so a Hold may come before.
func (l *labeller) start(ctx context.Context, q workqueue.TypedRateLimitingInterface[request]) error {
	l.mu.Lock()
	l.ctx, l.queue = ctx, q
	l.mu.Unlock()
	l.taken(l.slots.Slots())
	return nil
}

// request is o's, of kinds[kind], if this member holds its slot: each
// member queues only its own objects, and those of a slot it takes
// later when it takes it.
func (l *labeller) request(kind int, o client.Object) (request, bool) {
	slot, ok := l.ownerSlot(l.kinds[kind], o)
	if !ok || !l.slots.holds(slot) {
		return request{}, false
	}
	return request{kind: kind, key: client.ObjectKeyFromObject(o)}, true
}

// ownerSlot is the slot of o, of kind k: its owner's; false if it has none.
func (l *labeller) ownerSlot(k kind, o client.Object) (int, bool) {
	owner, ok := k.owner(o)
	if !ok {
		return 0, false
	}
	return l.ring.Slot(owner), true
}

// taken queues the unlabelled objects of slots, just held. An object
// the cache adds meanwhile is queued by its event, whose handler runs
// once the store has it: it sees the slot's gate open, or is listed.
func (l *labeller) taken(slots []int) {
	l.mu.Lock()
	ctx, q := l.ctx, l.queue
	l.mu.Unlock()
	if q == nil || len(slots) == 0 {
		return // start lists what is held by then
	}
	go func() {
		for i, k := range l.kinds {
			list := metadataListOf(k.gvk)
			if err := l.cache.List(ctx, list); err != nil {
				return // the context ended
			}
			for _, o := range list.Items {
				if slot, ok := l.ownerSlot(k, &o); ok && slices.Contains(slots, slot) {
					q.Add(request{kind: i, key: client.ObjectKeyFromObject(&o)})
				}
			}
		}
	}()
}

// Reconcile labels an object with its slot if this member holds it. A
// slot given up meanwhile is its next member's to label (taken).
func (l *labeller) Reconcile(ctx context.Context, req request) (reconcile.Result, error) {
	k := l.kinds[req.kind]
	obj := metadataOf(k.gvk)
	if err := l.cache.Get(ctx, req.key, obj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if _, ok := l.ring.slotOf(obj.Labels); ok {
		return reconcile.Result{}, nil
	}
	slot, ok := l.ownerSlot(k, obj)
	if !ok {
		return reconcile.Result{}, nil
	}
	leave, err := l.slots.enter(slot)
	if errors.Is(err, errNotHeld) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{RequeueAfter: l.ring.leaseDuration() / 10}, nil
	}
	defer leave()
	patch := client.MergeFrom(obj.DeepCopy())
	metav1.SetMetaDataLabel(&obj.ObjectMeta, l.ring.SlotLabel(), strconv.Itoa(slot))
	if err := l.writer.Patch(ctx, obj, patch); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("shard: labelling %s %s with slot %d: %w", k.gvk.Kind, req.key, slot, err))
	}
	return reconcile.Result{}, nil
}

func metadataOf(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{}
	o.SetGroupVersionKind(gvk)
	return o
}

// metadataListOf is an empty metadata list of kind gvk.
func metadataListOf(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadataList {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	return l
}

// trim keeps of an object's metadata what the Sharder reads.
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

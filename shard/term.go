package shard

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// term is one member's time as the sharder: only then does it cache the
// metadata of every object and child, so the other members hold their
// share alone.
type term struct {
	*sharder
	cache   cache.Cache
	changed chan event.GenericEvent
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
}

// startTerm starts a cache and a controller that end with stop.
func (s *sharder) startTerm(parent context.Context) (*term, error) {
	c, err := s.newCache()
	if err != nil {
		return nil, fmt.Errorf("shard: the sharder's cache: %w", err)
	}
	for _, ch := range s.children {
		err := c.IndexField(parent, metadataOf(ch.gvk), ownerIndex, func(o client.Object) []string {
			if key, ok := ch.owner(o); ok {
				return []string{key.String()}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("shard: indexing %s by owner: %w", ch.gvk.Kind, err)
		}
	}
	t := &term{sharder: s, cache: c, changed: make(chan event.GenericEvent, 1024), done: make(chan struct{})}
	// Several workers: each waits for the cache after its write. No
	// priority queue: controller-runtime v0.24's can deadlock when a term
	// stops (kubernetes-sigs/controller-runtime#3538, fixed in v0.25.2).
	ctl, err := controller.NewTypedUnmanaged("shard-"+s.Ring.Name, controller.Options{
		Reconciler: t, Logger: s.log, SkipNameValidation: ptr.To(true), MaxConcurrentReconciles: 8,
		UsePriorityQueue: ptr.To(false),
	})
	if err != nil {
		return nil, err
	}
	sources := []source.Source{
		source.Kind(c, metadataOf(s.GVK), &handler.TypedEnqueueRequestForObject[*metav1.PartialObjectMetadata]{}),
		source.Channel(t.changed, &handler.EnqueueRequestForObject{}),
	}
	for _, ch := range s.children {
		toOwner := handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, o *metav1.PartialObjectMetadata) []reconcile.Request {
			if key, ok := ch.owner(o); ok {
				return []reconcile.Request{{NamespacedName: key}}
			}
			return nil
		})
		sources = append(sources, source.Kind(c, metadataOf(ch.gvk), toOwner, childChanged()))
	}
	for _, src := range sources {
		if err := ctl.Watch(src); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(parent)
	t.ctx, t.cancel = ctx, cancel
	go func() {
		defer close(t.done)
		go func() { _ = c.Start(ctx) }()
		// The sources' first lists queue every object.
		if err := ctl.Start(ctx); err != nil && ctx.Err() == nil {
			s.log.Error(err, "the sharder stopped")
		}
	}()
	return t, nil
}

// ended says whether the term stopped by itself (a failed start).
func (t *term) ended() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// stop ends the term and waits for its controller; nil is a no-op.
func (t *term) stop() {
	if t == nil {
		return
	}
	t.cancel()
	<-t.done
}

// queueAll queues every object again, for a membership change.
func (t *term) queueAll() {
	ctx := t.ctx
	if !t.cache.WaitForCacheSync(ctx) {
		return
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(t.GVK.GroupVersion().WithKind(t.GVK.Kind + "List"))
	if err := t.cache.List(ctx, list); err != nil {
		return
	}
	for i := range list.Items {
		select {
		case t.changed <- event.GenericEvent{Object: &list.Items[i]}:
		case <-ctx.Done():
			return
		}
	}
}

func (t *term) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	s := t.sharder
	members := s.currentMembers()
	if len(members) == 0 || Owner("sharder", members) != s.Identity {
		return reconcile.Result{}, nil
	}
	obj := metadataOf(s.GVK)
	if err := t.cache.Get(ctx, req.NamespacedName, obj); err != nil {
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
	case cur != "" && !slices.Contains(members, cur) && !s.view.Dead(cur, time.Now()):
		// Joined after this sharder's last look, or about to expire.
		return reconcile.Result{RequeueAfter: s.Ring.leaseDuration() / 10}, nil
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
	if err := t.label(ctx, req.NamespacedName, member); err != nil {
		return reconcile.Result{}, err
	}
	if !write {
		return reconcile.Result{}, nil
	}
	read := obj.ResourceVersion
	if err := s.writer.Patch(ctx, obj, patch); err != nil {
		return reconcile.Result{}, fmt.Errorf("shard: labelling %s for %s: %w", req, want, err)
	}
	// Until the cache has the write, a pass would move the children
	// again from the version before it.
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cur := metadataOf(s.GVK)
		err := t.cache.Get(ctx, req.NamespacedName, cur)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && cur.ResourceVersion != read, err
	})
	return reconcile.Result{}, err
}

// label labels the children of key with member.
func (t *term) label(ctx context.Context, key types.NamespacedName, member string) error {
	s := t.sharder
	for _, ch := range s.children {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(ch.gvk.GroupVersion().WithKind(ch.gvk.Kind + "List"))
		if err := t.cache.List(ctx, list, client.InNamespace(key.Namespace), client.MatchingFields{ownerIndex: key.String()}); err != nil {
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

package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// errNotStarted is returned by a slot cache's Hold before its Start.
var errNotStarted = errors.New("shard: the cache has not started")

// slotCache caches its sharded kinds only for the slots it holds: one
// cache per Hold (a segment), whose informers select those slots; every
// other kind is the embedded cache's. controller-runtime's caches take
// their selectors once, so a change of slots is a cache started or
// stopped, not a selector changed.
type slotCache struct {
	cache.Cache
	ring   Ring
	config *rest.Config
	opts   cache.Options
	kinds  map[schema.GroupVersionKind]bool

	started chan struct{}
	ctx     context.Context

	// gates[s] is held shared by each pass over an object of slot s
	// (enter), and exclusively by Release to close it. active[s] is
	// written under it, and read without it by holds.
	gates  []sync.RWMutex
	active []atomic.Bool
	work   []slotWork
	holder *holder // nil: Hold and Release by hand (tests)
	// fence, once set, is when the member's Lease may run out: no pass
	// is admitted after it.
	fence atomic.Pointer[time.Time]

	// build orders segments' creation and IndexField, so that no
	// segment misses an index.
	build     sync.Mutex
	mu        sync.Mutex
	segments  []*segment
	informers map[informerKey]*slotInformer
	indexes   []index
	onHold    []func(slots []int)
}

type segment struct {
	slots  []int
	cache  cache.Cache
	ctx    context.Context // ends when the segment stops
	cancel context.CancelFunc
	done   chan struct{}
	// restarting marks the segment a Release restarts slots in, until it
	// synced: reads go to it first. synced is set once it synced.
	restarting, synced atomic.Bool
}

// readOrder returns segs newest first, as reads go: a segment restarting
// slots another still holds first, since its events follow the read;
// then the synced ones; last those a Hold is still syncing, whose slots
// no other segment holds, so that a read of another slot's object does
// not wait for their list.
func readOrder(segs []*segment) []*segment {
	out := make([]*segment, 0, len(segs))
	for _, pass := range []func(*segment) bool{
		func(s *segment) bool { return s.restarting.Load() },
		func(s *segment) bool { return !s.restarting.Load() && s.synced.Load() },
		func(s *segment) bool { return !s.restarting.Load() && !s.synced.Load() },
	} {
		for i := len(segs) - 1; i >= 0; i-- {
			if pass(segs[i]) {
				out = append(out, segs[i])
			}
		}
	}
	return out
}

// bound returns ctx ended also when s stops: a read that waits for an
// informer of s to sync must not outlive s, whose informers then never
// sync.
func (s *segment) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

type index struct {
	obj     client.Object
	field   string
	extract client.IndexerFunc
}

// informerKey tells controller-runtime's three informers of a kind
// apart: typed, unstructured and metadata-only.
type informerKey struct {
	gvk  schema.GroupVersionKind
	form string
}

func formOf(obj client.Object) string {
	switch obj.(type) {
	case *unstructured.Unstructured:
		return "unstructured"
	case *metav1.PartialObjectMetadata:
		return "metadata"
	}
	return "typed"
}

// NewCache returns the cache of member identity of r, for the
// manager's cache.Options.NewCache: the member holds a Lease while the
// cache runs, and kinds are cached only for the slots it holds, its
// share of r.Slots. Every other kind is cached as the options say. The
// objects of kinds carry their slot in r.SlotLabel (Sharder).
//
// identity must be unique among the live replicas, such as the pod's
// name: two processes of one identity would hold the same slots. Start
// returns the first error renewing the Lease, which stops the manager:
// a member that cannot renew must not go on.
func (r Ring) NewCache(identity string, kinds ...client.Object) cache.NewCacheFunc {
	return func(config *rest.Config, opts cache.Options) (cache.Cache, error) {
		if identity == "" {
			return nil, ErrIdentity
		}
		c, err := newSlotCache(r, config, opts, kinds...)
		if err != nil {
			return nil, err
		}
		leases, err := coordinationv1client.NewForConfigAndClient(config, c.opts.HTTPClient)
		if err != nil {
			return nil, err
		}
		c.holder = &holder{ring: r, identity: identity, cache: c, leases: leases, view: r.View()}
		return c, nil
	}
}

// newSlotCache caches kinds per slot of r, and everything else as opts
// say. opts.ByObject's selectors of kinds are kept, with the slots added.
func newSlotCache(r Ring, config *rest.Config, opts cache.Options, kinds ...client.Object) (*slotCache, error) {
	// The segments share the base's scheme, client and mapper.
	var err error
	if opts.Scheme == nil {
		opts.Scheme = clientgoscheme.Scheme
	}
	if opts.HTTPClient == nil {
		if opts.HTTPClient, err = rest.HTTPClientFor(config); err != nil {
			return nil, err
		}
	}
	if opts.Mapper == nil {
		if opts.Mapper, err = apiutil.NewDynamicRESTMapper(config, opts.HTTPClient); err != nil {
			return nil, err
		}
	}
	base, err := cache.New(config, opts)
	if err != nil {
		return nil, err
	}
	c := &slotCache{
		Cache: base, ring: r, config: config, opts: opts, kinds: map[schema.GroupVersionKind]bool{},
		started: make(chan struct{}), gates: make([]sync.RWMutex, r.slots()), active: make([]atomic.Bool, r.slots()),
		work:      make([]slotWork, r.slots()),
		informers: map[informerKey]*slotInformer{},
	}
	for _, k := range kinds {
		gvk, err := apiutil.GVKForObject(k, opts.Scheme)
		if err != nil {
			return nil, fmt.Errorf("shard: a sharded kind: %w", err)
		}
		c.kinds[gvk] = true
	}
	return c, nil
}

func (c *slotCache) sharded(obj runtime.Object) (schema.GroupVersionKind, bool, error) {
	gvk, err := apiutil.GVKForObject(obj, c.opts.Scheme)
	if err != nil {
		return gvk, false, err
	}
	if _, ok := obj.(client.ObjectList); ok {
		gvk.Kind = gvk.Kind[:max(0, len(gvk.Kind)-len("List"))]
	}
	return gvk, c.kinds[gvk], nil
}

func (c *slotCache) Start(ctx context.Context) error {
	c.ctx = ctx
	close(c.started)
	base := make(chan error, 1)
	go func() { base <- c.Cache.Start(ctx) }()
	var err error
	if c.holder != nil {
		if err = c.holder.run(ctx); err != nil {
			return err
		}
	}
	if e := <-base; e != nil {
		err = e
	}
	c.mu.Lock()
	segs := c.segments
	c.mu.Unlock()
	for _, s := range segs {
		<-s.done
	}
	return err
}

func (c *slotCache) WaitForCacheSync(ctx context.Context) bool {
	if !c.Cache.WaitForCacheSync(ctx) {
		return false
	}
	for _, s := range c.held() {
		if !s.cache.WaitForCacheSync(ctx) {
			return false
		}
	}
	return true
}

func (c *slotCache) held() []*segment {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.segments)
}

// Slots returns the slots held, sorted.
func (c *slotCache) Slots() []int {
	var all []int
	for _, s := range c.held() {
		all = append(all, s.slots...)
	}
	slices.Sort(all)
	return all
}

func (c *slotCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	gvk, sharded, err := c.sharded(obj)
	if err != nil || !sharded {
		return c.Cache.Get(ctx, key, obj, opts...)
	}
	for _, s := range readOrder(c.held()) {
		rctx, done := s.bound(ctx)
		err := s.cache.Get(rctx, key, obj, opts...)
		done()
		if !apierrors.IsNotFound(err) {
			return err
		}
	}
	gr := schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}
	if m, err := c.opts.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
		gr = m.Resource.GroupResource()
	}
	return apierrors.NewNotFound(gr, key.Name)
}

func (c *slotCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	_, sharded, err := c.sharded(list)
	if err != nil || !sharded {
		return c.Cache.List(ctx, list, opts...)
	}
	var all []runtime.Object
	// In Get's order; a Release restarting a segment lists the objects
	// of the slots it keeps twice until the old one goes.
	segs := readOrder(c.held())
	var seen map[types.NamespacedName]bool
	if len(segs) > 1 {
		seen = map[types.NamespacedName]bool{}
	}
	for _, s := range segs {
		l := list.DeepCopyObject().(client.ObjectList)
		rctx, done := s.bound(ctx)
		err := s.cache.List(rctx, l, opts...)
		done()
		if err != nil {
			return err
		}
		items, err := apimeta.ExtractList(l)
		if err != nil {
			return err
		}
		for _, o := range items {
			if seen != nil {
				m, err := apimeta.Accessor(o)
				if err != nil {
					return err
				}
				key := types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}
				if seen[key] {
					continue
				}
				seen[key] = true
			}
			all = append(all, o)
		}
	}
	return apimeta.SetList(list, all)
}

func (c *slotCache) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	_, sharded, err := c.sharded(obj)
	if err != nil || !sharded {
		return c.Cache.IndexField(ctx, obj, field, extract)
	}
	c.build.Lock()
	defer c.build.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.indexes = append(c.indexes, index{obj: obj, field: field, extract: extract})
	for _, s := range c.segments {
		if err := s.cache.IndexField(ctx, obj, field, extract); err != nil {
			return err
		}
	}
	return nil
}

func (c *slotCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	gvk, sharded, err := c.sharded(obj)
	if err != nil || !sharded {
		return c.Cache.GetInformer(ctx, obj, opts...)
	}
	return c.informer(ctx, informerKey{gvk, formOf(obj)}, obj, opts)
}

func (c *slotCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	if !c.kinds[gvk] {
		return c.Cache.GetInformerForKind(ctx, gvk, opts...)
	}
	return c.informer(ctx, informerKey{gvk, "typed"}, nil, opts)
}

func (c *slotCache) informer(ctx context.Context, key informerKey, obj client.Object, opts []cache.InformerGetOption) (cache.Informer, error) {
	c.mu.Lock()
	i, ok := c.informers[key]
	if !ok {
		i = &slotInformer{c: c, key: key, obj: obj, per: map[*segment]cache.Informer{}, regs: map[*slotRegistration]bool{}}
		for _, s := range c.segments {
			if err := i.attach(ctx, s); err != nil {
				c.mu.Unlock()
				return nil, err
			}
		}
		c.informers[key] = i
	}
	c.mu.Unlock()
	o := cache.InformerGetOptions{}
	for _, opt := range opts {
		opt(&o)
	}
	if o.BlockUntilSynced == nil || *o.BlockUntilSynced {
		if !toolscache.WaitForCacheSync(ctx.Done(), i.HasSynced) {
			return nil, fmt.Errorf("shard: waiting for the %s informer: %w", key.gvk.Kind, ctx.Err())
		}
	}
	return i, nil
}

func (c *slotCache) RemoveInformer(ctx context.Context, obj client.Object) error {
	gvk, sharded, err := c.sharded(obj)
	if err != nil || !sharded {
		return c.Cache.RemoveInformer(ctx, obj)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.informers, informerKey{gvk, formOf(obj)})
	for _, s := range c.segments {
		if err := s.cache.RemoveInformer(ctx, obj); err != nil {
			return err
		}
	}
	return nil
}

package shard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// ErrNotStarted is returned by a slot cache's Hold before its Start.
var ErrNotStarted = errors.New("shard: the cache has not started")

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
	// (enter), and exclusively by Release to close it.
	gates  []sync.RWMutex
	active []bool
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
}

type segment struct {
	slots  []int
	cache  cache.Cache
	cancel context.CancelFunc
	done   chan struct{}
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
		started: make(chan struct{}), gates: make([]sync.RWMutex, r.slots()), active: make([]bool, r.slots()),
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
	for _, s := range c.held() {
		if err := s.cache.Get(ctx, key, obj, opts...); !apierrors.IsNotFound(err) {
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
	for _, s := range c.held() {
		l := list.DeepCopyObject().(client.ObjectList)
		if err := s.cache.List(ctx, l, opts...); err != nil {
			return err
		}
		items, err := apimeta.ExtractList(l)
		if err != nil {
			return err
		}
		all = append(all, items...)
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

// Hold starts caching slots and opens their gates; it returns once the
// new segment's informers synced. Slots already held are skipped.
func (c *slotCache) Hold(ctx context.Context, slots ...int) error {
	held := c.Slots()
	var want []int
	for _, s := range slots {
		if s < 0 || s >= c.ring.slots() {
			return fmt.Errorf("shard: slot %d of ring %s: want 0 to %d", s, c.ring.Name, c.ring.slots()-1)
		}
		if !slices.Contains(held, s) && !slices.Contains(want, s) {
			want = append(want, s)
		}
	}
	if len(want) == 0 {
		return nil
	}
	select {
	case <-c.started:
	default:
		return ErrNotStarted
	}
	slices.Sort(want)
	// Open before the handlers see the objects added: a pass they queue
	// must be admitted.
	c.setGates(want, true)
	seg, err := c.add(ctx, want)
	if err != nil {
		c.setGates(want, false)
		return err
	}
	if !seg.cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("shard: waiting for slots %v: %w", want, ctx.Err())
	}
	return nil
}

// add starts a segment for slots and adds it, with every informer and
// handler known.
func (c *slotCache) add(ctx context.Context, slots []int) (*segment, error) {
	c.build.Lock()
	defer c.build.Unlock()
	seg, err := c.start(ctx, slots)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, i := range c.informers {
		if err := i.attach(ctx, seg); err != nil {
			for _, i := range c.informers {
				i.detach(seg, nil)
			}
			seg.cancel()
			<-seg.done
			return nil, err
		}
	}
	c.segments = append(c.segments, seg)
	return seg, nil
}

// start starts the cache of a segment, with the indexes known so far.
func (c *slotCache) start(ctx context.Context, slots []int) (*segment, error) {
	opts := c.opts
	req := c.ring.slotsRequirement(slots)
	add := func(sel labels.Selector) labels.Selector {
		if sel == nil {
			sel = c.opts.DefaultLabelSelector
		}
		if sel == nil {
			sel = labels.Everything()
		}
		return sel.DeepCopySelector().Add(req)
	}
	opts.ByObject = map[client.Object]cache.ByObject{}
	for obj, by := range c.opts.ByObject {
		if _, sharded, err := c.sharded(obj); err != nil || !sharded {
			continue
		}
		by.Label = add(by.Label)
		by.Namespaces = maps.Clone(by.Namespaces)
		for ns, cfg := range by.Namespaces {
			if cfg.LabelSelector != nil {
				cfg.LabelSelector = add(cfg.LabelSelector)
				by.Namespaces[ns] = cfg
			}
		}
		opts.ByObject[obj] = by
	}
	opts.DefaultLabelSelector = add(c.opts.DefaultLabelSelector)
	opts.DefaultNamespaces = maps.Clone(c.opts.DefaultNamespaces)
	for ns, cfg := range opts.DefaultNamespaces {
		if cfg.LabelSelector != nil {
			cfg.LabelSelector = add(cfg.LabelSelector)
			opts.DefaultNamespaces[ns] = cfg
		}
	}
	sc, err := cache.New(c.config, opts)
	if err != nil {
		return nil, fmt.Errorf("shard: the cache of slots %v: %w", slots, err)
	}
	c.mu.Lock()
	indexes := slices.Clone(c.indexes)
	c.mu.Unlock()
	for _, ix := range indexes { // c.build keeps IndexField out meanwhile
		if err := sc.IndexField(ctx, ix.obj, ix.field, ix.extract); err != nil {
			return nil, err
		}
	}
	sctx, cancel := context.WithCancel(c.ctx)
	s := &segment{slots: slots, cache: sc, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = sc.Start(sctx)
	}()
	// Until it started, its reads fail rather than wait.
	if !sc.WaitForCacheSync(ctx) {
		cancel()
		<-s.done
		return nil, fmt.Errorf("shard: starting the cache of slots %v: %w", slots, ctx.Err())
	}
	return s, nil
}

// setGates opens or closes the gates of slots; closing one waits for
// the passes it admitted.
func (c *slotCache) setGates(slots []int, open bool) {
	for _, n := range slots {
		if n >= 0 && n < c.ring.slots() {
			c.gates[n].Lock()
			c.active[n] = open
			c.gates[n].Unlock()
		}
	}
}

// Why enter refused a pass.
var (
	errNotHeld = errors.New("shard: slot not held")
	errFenced  = errors.New("shard: the member's Lease may have run out")
)

// enter admits a pass over an object of slot if the slot is held and
// the member's Lease live; the pass calls leave when it ends. Release
// waits for the passes admitted.
func (c *slotCache) enter(slot int) (leave func(), err error) {
	if slot < 0 || slot >= c.ring.slots() {
		return nil, errNotHeld
	}
	g := &c.gates[slot]
	g.RLock()
	if !c.active[slot] {
		g.RUnlock()
		return nil, errNotHeld
	}
	if d := c.fence.Load(); d != nil && !time.Now().Before(*d) {
		g.RUnlock()
		return nil, errFenced
	}
	return g.RUnlock, nil
}

// fenceAt admits passes until t only.
func (c *slotCache) fenceAt(t time.Time) { c.fence.Store(&t) }

// Release closes the gates of slots, waits for the passes they
// admitted, and stops caching them: each handler sees every object of
// those slots deleted. A segment that held other slots too is replaced
// by one of those, whose handlers see their objects added again; if
// that fails, those slots are given up too, and the error returned.
func (c *slotCache) Release(ctx context.Context, slots ...int) error {
	c.setGates(slots, false)
	var failed error
	for _, old := range c.held() {
		keep := minus(old.slots, slots)
		if len(keep) == len(old.slots) {
			continue
		}
		if len(keep) > 0 {
			if _, err := c.add(ctx, keep); err != nil {
				c.setGates(keep, false)
				keep, failed = nil, err
			}
		}
		c.mu.Lock()
		c.segments = slices.DeleteFunc(c.segments, func(s *segment) bool { return s == old })
		var gone []func()
		for _, i := range c.informers {
			gone = append(gone, i.detach(old, func(o any) bool {
				m, err := apimeta.Accessor(o)
				if err != nil {
					return false
				}
				n, ok := c.ring.slotOf(m.GetLabels())
				return !ok || !slices.Contains(keep, n)
			}))
		}
		c.mu.Unlock()
		old.cancel()
		<-old.done
		for _, f := range gone {
			f()
		}
	}
	return failed
}

// slotInformer is one informer of a sharded kind over every segment.
type slotInformer struct {
	c    *slotCache
	key  informerKey
	obj  client.Object // nil: by kind
	per  map[*segment]cache.Informer
	regs map[*slotRegistration]bool
	ixs  []toolscache.Indexers
}

var _ cache.Informer = (*slotInformer)(nil)

// attach gets the informer of s and adds the handlers and indexers
// known; c.mu is held.
func (i *slotInformer) attach(ctx context.Context, s *segment) error {
	var inf cache.Informer
	var err error
	if i.obj != nil {
		inf, err = s.cache.GetInformer(ctx, i.obj, cache.BlockUntilSynced(false))
	} else {
		inf, err = s.cache.GetInformerForKind(ctx, i.key.gvk, cache.BlockUntilSynced(false))
	}
	if err != nil {
		return err
	}
	for _, ix := range i.ixs {
		if err := inf.AddIndexers(ix); err != nil {
			return err
		}
	}
	for r := range i.regs {
		h, err := inf.AddEventHandlerWithOptions(r.handler, r.opts)
		if err != nil {
			return err
		}
		r.per[s] = h
	}
	i.per[s] = inf
	return nil
}

// detach forgets s; the func it returns, called once s stopped, tells
// each handler that the objects of s that released says are deleted.
// c.mu is held.
func (i *slotInformer) detach(s *segment, released func(any) bool) func() {
	_, had := i.per[s]
	delete(i.per, s)
	var handlers []toolscache.ResourceEventHandler
	for r := range i.regs {
		delete(r.per, s)
		handlers = append(handlers, r.handler)
	}
	return func() {
		if !had || released == nil {
			return
		}
		// The segment's cache, stopped, still lists what it held; its
		// informer may be per namespace, with no one store.
		list, err := i.newList()
		if err != nil || s.cache.List(context.Background(), list) != nil {
			return
		}
		objs, err := apimeta.ExtractList(list)
		if err != nil {
			return
		}
		for _, o := range objs {
			if released(o) {
				for _, h := range handlers {
					h.OnDelete(o)
				}
			}
		}
	}
}

// newList returns an empty list of the informer's kind and form.
func (i *slotInformer) newList() (client.ObjectList, error) {
	gvk := i.key.gvk.GroupVersion().WithKind(i.key.gvk.Kind + "List")
	switch i.key.form {
	case "metadata":
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(gvk)
		return l, nil
	case "unstructured":
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gvk)
		return l, nil
	}
	o, err := i.c.opts.Scheme.New(gvk)
	if err != nil {
		return nil, err
	}
	l, ok := o.(client.ObjectList)
	if !ok {
		return nil, fmt.Errorf("shard: %s is no list", gvk)
	}
	return l, nil
}

func (i *slotInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandlerWithOptions(h, toolscache.HandlerOptions{})
}

func (i *slotInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, p time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandlerWithOptions(h, toolscache.HandlerOptions{ResyncPeriod: &p})
}

func (i *slotInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	i.c.mu.Lock()
	defer i.c.mu.Unlock()
	r := &slotRegistration{c: i.c, handler: h, opts: o, per: map[*segment]toolscache.ResourceEventHandlerRegistration{}}
	for s, inf := range i.per {
		reg, err := inf.AddEventHandlerWithOptions(h, o)
		if err != nil {
			return nil, err
		}
		r.per[s] = reg
	}
	i.regs[r] = true
	return r, nil
}

func (i *slotInformer) RemoveEventHandler(h toolscache.ResourceEventHandlerRegistration) error {
	r, ok := h.(*slotRegistration)
	if !ok {
		return fmt.Errorf("shard: %T is not a registration of this informer", h)
	}
	i.c.mu.Lock()
	defer i.c.mu.Unlock()
	delete(i.regs, r)
	for s, reg := range r.per {
		if err := i.per[s].RemoveEventHandler(reg); err != nil {
			return err
		}
	}
	return nil
}

func (i *slotInformer) AddIndexers(ix toolscache.Indexers) error {
	i.c.mu.Lock()
	defer i.c.mu.Unlock()
	i.ixs = append(i.ixs, ix)
	for _, inf := range i.per {
		if err := inf.AddIndexers(ix); err != nil {
			return err
		}
	}
	return nil
}

func (i *slotInformer) HasSynced() bool {
	i.c.mu.Lock()
	defer i.c.mu.Unlock()
	for _, inf := range i.per {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

func (i *slotInformer) HasSyncedChecker() toolscache.DoneChecker {
	return poller{name: "shard " + i.key.gvk.Kind, synced: i.HasSynced}
}

func (i *slotInformer) IsStopped() bool {
	select {
	case <-i.c.started:
		return i.c.ctx.Err() != nil
	default:
		return false
	}
}

type slotRegistration struct {
	c       *slotCache
	handler toolscache.ResourceEventHandler
	opts    toolscache.HandlerOptions
	per     map[*segment]toolscache.ResourceEventHandlerRegistration // under c.mu
}

func (r *slotRegistration) HasSynced() bool {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	for _, reg := range r.per {
		if !reg.HasSynced() {
			return false
		}
	}
	return true
}

func (r *slotRegistration) HasSyncedChecker() toolscache.DoneChecker {
	return poller{name: "shard handler", synced: r.HasSynced}
}

// poller is a DoneChecker over a set of informers that changes: it polls.
type poller struct {
	name   string
	synced func() bool
}

func (p poller) Name() string { return p.name }

func (p poller) Done() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for !p.synced() {
			time.Sleep(100 * time.Millisecond)
		}
		close(ch)
	}()
	return ch
}

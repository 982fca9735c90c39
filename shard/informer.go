package shard

import (
	"context"
	"fmt"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

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
		// informer may be per namespace, with no one store. A List of
		// an informer stopped before it synced waits for the context.
		done, cancel := context.WithCancel(context.Background())
		cancel()
		list, err := i.newList()
		if err != nil || s.cache.List(done, list) != nil {
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
		return metadataListOf(i.key.gvk), nil
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

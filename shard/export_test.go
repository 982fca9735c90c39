package shard

import (
	"context"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SlotCache exposes the slot cache to the package's tests.
type SlotCache interface {
	cache.Cache
	Hold(ctx context.Context, slots ...int) error
	Release(ctx context.Context, slots ...int) error
	Slots() []int
	Enter(slot int) (leave func(), ok bool)
}

type slotCacheForTest struct{ *slotCache }

func (c slotCacheForTest) Enter(slot int) (func(), bool) {
	leave, err := c.enter(slot)
	return leave, err == nil
}

func NewSlotCache(r Ring, config *rest.Config, opts cache.Options, kinds ...client.Object) (SlotCache, error) {
	c, err := newSlotCache(r, config, opts, kinds...)
	if err != nil {
		return nil, err
	}
	return slotCacheForTest{c}, nil
}

// ErrNotStarted is Hold's error before Start.
var ErrNotStarted = errNotStarted

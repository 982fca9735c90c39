package shard

import (
	"context"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// SlotCache exposes the slot cache to the package's tests.
type SlotCache interface {
	cache.Cache
	Hold(ctx context.Context, slots ...int) error
	Release(ctx context.Context, slots ...int) error
	Slots() []int
	Enter(slot int) (leave func(), ok bool)
	Go(slot int, f func(ctx context.Context)) bool
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

// EnterSlot admits a pass in slot of c, a Ring.NewCache cache.
func EnterSlot(c cache.Cache, slot int) (leave func(), ok bool) {
	leave, err := c.(*slotCache).enter(slot)
	return leave, err == nil
}

// Assign is the slots each member is to hold.
func Assign(n int, members ...string) map[string][]int { return assign(n, members) }

// Minus and Union are the package's sorted set helpers.
var Minus, Union = minus, union

// FormatSlots is the SlotsAnnotation of slots; ParseSlots its slots.
var FormatSlots, ParseSlots = formatSlots, parseSlots

// Webhook is the handler SetupWebhookWithManager serves.
func (r Ring) Webhook() *admission.Webhook { return r.webhook() }

// SetRenewHook runs hook in every renewal, before it writes the Lease,
// until the test ends.
func SetRenewHook(t *testing.T, hook func(namespace, identity string)) {
	renewHook.Store(&hook)
	t.Cleanup(func() { renewHook.Store(nil) })
}

// Go starts f as work of slot, as a pass's operation run would.
func (c slotCacheForTest) Go(slot int, f func(ctx context.Context)) bool {
	return slotScope{c: c.slotCache, slot: slot}.Go(f)
}

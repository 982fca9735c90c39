package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"
)

// SlotsAnnotation on a member's Lease lists the slots it holds or is
// about to: no other member takes them until they are gone from it, or
// the Lease ran out.
const SlotsAnnotation = "shard.opkit.dev/slots"

// renewHook, set by tests, runs in a renewal before it writes the Lease.
var renewHook atomic.Pointer[func(namespace, identity string)]

// holder keeps a slot cache holding its member's share of the slots.
type holder struct {
	ring     Ring
	identity string
	cache    *slotCache
	leases   coordinationv1client.LeasesGetter
	view     *View
	watch    *leaseWatch // set by run

	mu sync.Mutex
	// published is the SlotsAnnotation last written; fence when the
	// Lease may run out; lapsed that a renewal came too late, or found
	// the Lease gone: others may hold its slots.
	published []int
	fence     time.Time
	lapsed    bool
}

// run renews the Lease at a third of the lease duration, and moves
// slots at a tenth of it, until ctx ends; then it closes every gate and
// deletes the Lease, so that the others take over at once. It returns
// the first error renewing the Lease: a member that cannot renew must
// stop.
func (h *holder) run(ctx context.Context) error {
	if h.identity == "" {
		return ErrIdentity
	}
	defer h.leave()
	if err := h.publish(ctx, nil); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := h.watchLeases(ctx)
	if ctx.Err() != nil {
		return nil // stopped while it listed the Leases
	} else if err != nil {
		return err
	}
	h.watch = w
	renewed := make(chan error, 1)
	// Renewals run apart from the steps, which wait for caches and
	// passes.
	go func() {
		tick := time.NewTicker(h.ring.leaseDuration() / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				renewed <- nil
				return
			case <-tick.C:
			}
			if hook := renewHook.Load(); hook != nil {
				(*hook)(h.ring.Namespace, h.identity)
			}
			if err := h.renew(ctx); err != nil && ctx.Err() == nil {
				renewed <- err
				return
			}
		}
	}()
	// A step runs when a Lease changes its slots or comes or goes, when
	// one runs out, and at least every tenth of a lease.
	next := time.NewTimer(0)
	defer next.Stop()
	for {
		if err := h.step(ctx); err != nil && ctx.Err() == nil {
			cancel()
			return errors.Join(err, <-renewed)
		}
		wait := h.ring.leaseDuration() / 10
		if at := h.view.nextExpiry(); !at.IsZero() {
			wait = max(min(wait, time.Until(at)), 0)
		}
		next.Reset(wait)
		select {
		case <-ctx.Done():
			return <-renewed
		case err := <-renewed:
			return err
		case <-next.C:
		case <-w.wake:
		}
	}
}

// step takes the slots the member owns that no live member holds, and
// releases those it no longer owns. After a lapse it first gives up every
// slot: others may have taken them.
func (h *holder) step(ctx context.Context) error {
	h.mu.Lock()
	lapsed := h.lapsed
	h.mu.Unlock()
	if lapsed {
		if err := h.cache.Release(ctx, h.cache.Slots()...); err != nil {
			return nil
		}
		if err := h.publish(ctx, h.cache.Slots()); err != nil {
			return err
		}
	}
	others, members, err := h.claims(ctx, false)
	if err != nil {
		return nil // the next step lists again; only renewals must succeed
	}
	want := assign(h.ring.slots(), members)[h.identity]
	if !slices.Contains(members, h.identity) {
		want = h.cache.Slots() // not seen yet: keep what it holds
	}
	// Free slots first: giving one up waits for its passes and restarts
	// the cache of the slots kept with it, which must not delay a
	// takeover.
	if err := h.take(ctx, minus(minus(want, h.cache.Slots()), others)); err != nil {
		return err
	}
	if drop := minus(h.cache.Slots(), want); len(drop) > 0 {
		// Their gates closed and their work ended, the slots are free:
		// published before the cache of the slots kept restarts, which
		// waits for a list.
		if err := h.cache.giveUp(ctx, drop); err == nil {
			if err := h.publish(ctx, minus(h.cache.Slots(), drop)); err != nil {
				return err
			}
		}
		_ = h.cache.Release(ctx, drop...) // what it still holds is published
		return h.publish(ctx, h.cache.Slots())
	}
	return nil
}

// take holds the slots of take that no other member claims by the time
// this one's claim is in etcd.
func (h *holder) take(ctx context.Context, take []int) error {
	if len(take) == 0 {
		return nil
	}
	// Claim, then read every Lease from etcd: of two members claiming
	// one slot, the later writer sees the earlier one's claim.
	if err := h.publish(ctx, union(h.cache.Slots(), take)); err != nil {
		return err
	}
	others, _, err := h.claims(ctx, true)
	if err == nil {
		take = minus(take, others)
	} else {
		take = nil
	}
	_ = h.cache.Hold(ctx, take...) // what it holds is published below
	h.mu.Lock()
	published := h.published
	h.mu.Unlock()
	if held := h.cache.Slots(); !slices.Equal(held, published) {
		return h.publish(ctx, held)
	}
	return nil
}

// claims returns the slots that members other than this one, not dead,
// list on their Leases, and the live members: from etcd if fresh, else
// from the watch.
func (h *holder) claims(ctx context.Context, fresh bool) (others []int, members []string, err error) {
	var leases []coordinationv1.Lease
	if fresh {
		list, err := h.leases.Leases(h.ring.Namespace).List(ctx, metav1.ListOptions{LabelSelector: RingLabel + "=" + h.ring.Name})
		if err != nil {
			return nil, nil, fmt.Errorf("shard: listing the Leases of ring %s: %w", h.ring.Name, err)
		}
		leases = list.Items
	} else {
		leases = h.watch.leases()
	}
	now := time.Now()
	members = h.view.observe(leases, now)
	for _, l := range leases {
		id := ptr.Deref(l.Spec.HolderIdentity, "")
		// Live by this list, whatever the watch observed since.
		if id == h.identity || id == "" || !slices.Contains(members, id) && h.view.Dead(id, now) {
			continue
		}
		others = union(others, parseSlots(l.Annotations[SlotsAnnotation]))
	}
	return others, members, nil
}

// publish writes slots into the Lease and renews it, creating it if
// needed. A renewal answered before the fence moves it a lease duration
// on from when it was sent; one answered after it, or that found the
// Lease gone, marks a lapse instead: the gates stay closed until step
// gave up every slot.
func (h *holder) publish(ctx context.Context, slots []int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.publishLocked(ctx, slots)
}

// renew publishes the slots last published. It reads them under the
// lock it writes under: a claim published in between stays listed.
func (h *holder) renew(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.publishLocked(ctx, h.published)
}

func (h *holder) publishLocked(ctx context.Context, slots []int) error {
	start := time.Now()
	now := metav1.NewMicroTime(start)
	seconds := int32((h.ring.leaseDuration() + time.Second - 1) / time.Second) // others may wait longer, never less
	name, leases := h.ring.leaseName(h.identity), h.leases.Leases(h.ring.Namespace)
	annotation := formatSlots(slots)
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{SlotsAnnotation: annotation}},
		"spec":     map[string]any{"renewTime": now, "holderIdentity": h.identity, "leaseDurationSeconds": seconds},
	})
	if err != nil {
		return err
	}
	_, err = leases.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	gone := apierrors.IsNotFound(err)
	if gone {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: h.ring.Namespace, Labels: map[string]string{RingLabel: h.ring.Name},
				Annotations: map[string]string{SlotsAnnotation: annotation},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(h.identity),
				LeaseDurationSeconds: ptr.To(seconds),
				AcquireTime:          &now,
				RenewTime:            &now,
			},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("shard: renewing the Lease %s/%s of ring %s: %w", h.ring.Namespace, name, h.ring.Name, err)
	}
	h.published = slices.Clone(slots)
	// Written after the fence, it may have landed after another member
	// read the Lease as run out and took the slots.
	if !h.fence.IsZero() && (gone || !time.Now().Before(h.fence)) || h.lapsed {
		h.lapsed = len(slots) > 0
		if h.lapsed {
			return nil
		}
	}
	h.fence = start.Add(h.ring.leaseDuration())
	h.cache.fenceAt(h.fence)
	return nil
}

// leave closes every gate, waits for the passes, lists no slot on the
// Lease, then deletes it, with a context of its own: the manager's has
// ended.
func (h *holder) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h.cache.fenceAt(time.Time{})
	if err := h.cache.Release(ctx, h.cache.Slots()...); err != nil {
		return // the Lease runs out instead
	}
	if err := h.publish(ctx, nil); err != nil {
		return
	}
	_ = h.leases.Leases(h.ring.Namespace).Delete(ctx, h.ring.leaseName(h.identity), metav1.DeleteOptions{})
}

func formatSlots(slots []int) string {
	s := make([]string, len(slots))
	for i, n := range slots {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func parseSlots(v string) []int {
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// minus returns a without b's members; union the sorted union.
func minus(a, b []int) []int {
	return slices.DeleteFunc(slices.Clone(a), func(n int) bool { return slices.Contains(b, n) })
}

func union(a, b []int) []int {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

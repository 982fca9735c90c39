package shard

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// View returns a View of r's members.
func (r Ring) View() *View {
	return &View{ring: r, seen: map[string]observation{}, live: map[string]bool{}, known: map[string]bool{}, asked: map[string]time.Time{}}
}

// View tells the live members of a ring from their Leases. Like leader
// election it times a lease from when this View saw it change, not from
// the renewTime another replica's clock wrote, so clocks need not agree;
// a lease seen for the first time counts as just renewed.
type View struct {
	ring Ring
	mu   sync.Mutex
	seen map[string]observation
	// live is the last Members; known every identity ever live; asked
	// when Dead was first asked about an identity never live.
	live, known map[string]bool
	asked       map[string]time.Time
	looked      time.Time // the last observe
}

type observation struct {
	version   string // the Lease's resourceVersion
	at, until time.Time
}

// Members lists the ring's Leases with c and returns, sorted, the
// identities whose Lease changed within its duration before now.
func (v *View) Members(ctx context.Context, c client.Reader, now time.Time) ([]string, error) {
	var leases coordinationv1.LeaseList
	if err := c.List(ctx, &leases, client.InNamespace(v.ring.Namespace), client.MatchingLabels{RingLabel: v.ring.Name}); err != nil {
		return nil, fmt.Errorf("shard: listing the Leases of ring %s: %w", v.ring.Name, err)
	}
	return v.observe(leases.Items, now), nil
}

// observe is Members of leases, listed at now.
func (v *View) observe(leases []coordinationv1.Lease, now time.Time) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	seen := make(map[string]observation, len(leases))
	var live []string
	for _, l := range leases {
		if l.Spec.HolderIdentity == nil || l.Name != v.ring.leaseName(*l.Spec.HolderIdentity) {
			continue
		}
		o, ok := v.seen[l.Name]
		if !ok || o.version != l.ResourceVersion {
			o = observation{version: l.ResourceVersion, at: now}
		}
		d := v.ring.leaseDuration()
		if l.Spec.LeaseDurationSeconds != nil {
			d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		o.until = o.at.Add(d)
		seen[l.Name] = o
		if now.Before(o.until) {
			live = append(live, *l.Spec.HolderIdentity)
		}
	}
	v.seen, v.looked = seen, now
	clear(v.live)
	for _, id := range live {
		v.live[id], v.known[id] = true, true
		delete(v.asked, id)
	}
	slices.Sort(live)
	return live
}

// nextExpiry is when the first Lease live at the last look runs out,
// or zero.
func (v *View) nextExpiry() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	var first time.Time
	for _, o := range v.seen {
		if o.until.After(v.looked) && (first.IsZero() || o.until.Before(first)) {
			first = o.until
		}
	}
	return first
}

// Dead says whether member, not live at the last Members, is gone for
// good: its Lease was seen to go or expire, or, never seen live, nobody
// has seen it for a lease duration since Dead was first asked. A member
// that just joined is unknown to a View that lags, not dead.
func (v *View) Dead(member string, now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case v.live[member]:
		return false
	case v.known[member]:
		return true
	}
	first, ok := v.asked[member]
	if !ok {
		v.asked[member] = now
		return false
	}
	return now.Sub(first) >= v.ring.leaseDuration()
}

// Holders returns the slots each member's Lease lists (SlotsAnnotation),
// read with c. A killed member's Lease lists its slots until it is
// deleted: check the holders against the live members.
func (r Ring) Holders(ctx context.Context, c client.Reader) (map[string][]int, error) {
	var leases coordinationv1.LeaseList
	if err := c.List(ctx, &leases, client.InNamespace(r.Namespace), client.MatchingLabels{RingLabel: r.Name}); err != nil {
		return nil, fmt.Errorf("shard: listing the Leases of ring %s: %w", r.Name, err)
	}
	out := map[string][]int{}
	for _, l := range leases.Items {
		if id := ptr.Deref(l.Spec.HolderIdentity, ""); id != "" {
			out[id] = parseSlots(l.Annotations[SlotsAnnotation])
		}
	}
	return out, nil
}

package shard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/shard"
)

// slotMember runs the cache of member id until stop.
type slotMember struct {
	id    string
	slots func() []int
	enter func(slot int) (leave func(), ok bool)
	stop  func()
}

func startSlotMember(t *testing.T, r shard.Ring, id string) *slotMember {
	t.Helper()
	return startSlotMemberWith(t, r, id, env.Config)
}

func startSlotMemberWith(t *testing.T, r shard.Ring, id string, config *rest.Config) *slotMember {
	t.Helper()
	c, err := r.NewCache(id, &corev1.ConfigMap{})(config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{r.Namespace: {}}})
	if err != nil {
		t.Fatal(err)
	}
	return &slotMember{
		id:    id,
		slots: c.(interface{ Slots() []int }).Slots,
		enter: func(slot int) (func(), bool) { return shard.EnterSlot(c, slot) },
		stop:  testkit.Start(t, "member "+id, c),
	}
}

func TestMembersShareSlotsOneAtATime(t *testing.T) {
	r := shard.Ring{Name: "widgets", Namespace: env.Namespace(t), LeaseDuration: 3 * time.Second, Slots: 12}
	var mu sync.Mutex
	var live []*slotMember
	var overlaps []string
	quit, watching := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watching)
		for {
			select {
			case <-quit:
				return
			default:
			}
			mu.Lock()
			ms := slices.Clone(live)
			mu.Unlock()
			// a's slots, b's, a's again: a slot in all three was held
			// by both at once.
			for _, a := range ms {
				for _, b := range ms {
					if a == b {
						continue
					}
					sa, sb := a.slots(), b.slots()
					for _, s := range a.slots() {
						if slices.Contains(sa, s) && slices.Contains(sb, s) {
							mu.Lock()
							overlaps = append(overlaps, fmt.Sprintf("slot %d held by %s and %s", s, a.id, b.id))
							mu.Unlock()
						}
					}
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	join := func(id string) {
		m := startSlotMember(t, r, id)
		mu.Lock()
		live = append(live, m)
		mu.Unlock()
	}
	leave := func(id string) {
		mu.Lock()
		i := slices.IndexFunc(live, func(m *slotMember) bool { return m.id == id })
		m := live[i]
		mu.Unlock()
		m.stop()
		mu.Lock()
		live = slices.Delete(live, i, i+1)
		mu.Unlock()
	}
	// settled waits until the members hold every slot, want each.
	settled := func(want map[string]int) time.Duration {
		t.Helper()
		start := time.Now()
		var got map[string]int
		for end := start.Add(15 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			got = map[string]int{}
			var all []int
			mu.Lock()
			for _, m := range live {
				s := m.slots()
				got[m.id] = len(s)
				all = append(all, s...)
			}
			mu.Unlock()
			slices.Sort(all)
			if len(all) == r.Slots && len(slices.Compact(all)) == r.Slots && fmt.Sprint(got) == fmt.Sprint(want) {
				return time.Since(start)
			}
		}
		t.Fatalf("slots held: %v; want %v", got, want)
		return 0
	}

	join("a")
	settled(map[string]int{"a": 12})
	join("b")
	join("c")
	settled(map[string]int{"a": 4, "b": 4, "c": 4})
	leave("c")
	if d := settled(map[string]int{"a": 6, "b": 6}); d > 2*time.Second {
		t.Errorf("the slots of a member that left were taken after %v; want its Lease's deletion to hand them over within 2s", d)
	}
	join("d")
	settled(map[string]int{"a": 4, "b": 4, "d": 4})
	close(quit)
	<-watching
	if len(overlaps) > 0 {
		t.Errorf("%d samples saw a slot held twice, the first: %s", len(overlaps), overlaps[0])
	}
}

// A member that must give a slot up while a pass in it runs still takes
// a departed member's slots at once: giving up waits for the pass.
func TestMemberTakesFreeSlotsBeforeGivingUp(t *testing.T) {
	r := shard.Ring{Name: "widgets", Namespace: env.Namespace(t), LeaseDuration: 3 * time.Second, Slots: 12}
	three, two := shard.Assign(r.Slots, "a", "c", "d"), shard.Assign(r.Slots, "a", "c")
	gives := shard.Minus(three["c"], two["c"])
	takes := slices.DeleteFunc(slices.Clone(two["c"]), func(s int) bool { return !slices.Contains(three["d"], s) })
	if len(gives) == 0 || len(takes) == 0 {
		t.Fatalf("c gives %v and takes %v of d's when d leaves: pick members for which it does both", gives, takes)
	}
	members := map[string]*slotMember{}
	for _, id := range []string{"a", "c", "d"} {
		members[id] = startSlotMember(t, r, id)
	}
	waitSlots(t, 15*time.Second, members["c"], three["c"])
	waitSlots(t, 15*time.Second, members["d"], three["d"])
	enter, ok := members["c"].enter(gives[0])
	if !ok {
		t.Fatalf("c admitted no pass in slot %d", gives[0])
	}
	leave := sync.OnceFunc(enter)
	t.Cleanup(leave) // before the members stop: they wait for it
	members["d"].stop()
	start := time.Now()
	waitSlots(t, 2*time.Second, members["c"], shard.Union(three["c"], takes))
	t.Logf("c took d's slots %v %v after d left, with a pass open in slot %d", takes, time.Since(start).Round(time.Millisecond), gives[0])
	leave()
	waitSlots(t, 5*time.Second, members["c"], two["c"])
	waitSlots(t, 5*time.Second, members["a"], two["a"])
}

// A crashed member's slots are taken when its Lease runs out by the
// survivor's clock, not at the survivor's next look at the Leases.
func TestMemberTakesSlotsWhenALeaseRunsOut(t *testing.T) {
	// A long lease spreads the lag of a periodic look over seconds.
	r := shard.Ring{Name: "widgets", Namespace: env.Namespace(t), LeaseDuration: 20 * time.Second, Slots: 12}
	share := shard.Assign(r.Slots, "a", "ghost")
	ghost := ghostLease(t, r, share["ghost"])
	a := startSlotMember(t, r, "a")
	waitSlots(t, 15*time.Second, a, share["a"])

	sent := time.Now()
	ghost.Spec.RenewTime = &metav1.MicroTime{Time: sent}
	testkit.Must(t, env.Client.Update(t.Context(), ghost)) // its last renewal
	renewed := time.Now()
	for time.Since(renewed) < r.LeaseDuration+5*time.Second && len(a.slots()) < r.Slots {
		time.Sleep(5 * time.Millisecond)
	}
	taken := time.Now()
	if got := a.slots(); len(got) < r.Slots {
		t.Fatalf("a holds %v %v after the ghost's last renewal; want all %d slots", got, taken.Sub(renewed), r.Slots)
	}
	if early := sent.Add(r.LeaseDuration); taken.Before(early) {
		t.Errorf("a took the ghost's slots %v before its Lease ran out", early.Sub(taken))
	}
	if late := taken.Sub(renewed.Add(r.LeaseDuration)); late > 500*time.Millisecond {
		t.Errorf("a took the ghost's slots %v after its Lease ran out; want within 500ms", late)
	} else {
		t.Logf("a took the ghost's slots %v after its Lease ran out", late)
	}
}

// A renewal sent before the fence but written after it is a lapse:
// another member may have taken the slots before it landed.
func TestLateRenewalIsALapse(t *testing.T) {
	r := shard.Ring{Name: "widgets", Namespace: env.Namespace(t), LeaseDuration: 3 * time.Second, Slots: 4}
	var slow atomic.Bool
	config := interceptedConfig(func(req *http.Request) *http.Response {
		if slow.Load() && req.Method == http.MethodPatch && strings.HasSuffix(req.URL.Path, "/leases/"+r.Name+"-a") {
			// Sent a third of a lease after the last renewal, it lands
			// past that one's lease, before its own runs out.
			time.Sleep(r.LeaseDuration * 9 / 10)
		}
		return nil
	})
	share := shard.Assign(r.Slots, "a", "b")
	a := startSlotMemberWith(t, r, "a", config)
	b := startSlotMember(t, r, "b")
	waitSlots(t, 15*time.Second, a, share["a"])
	waitSlots(t, 15*time.Second, b, share["b"])

	slow.Store(true)
	took := false
	for end := time.Now().Add(3 * r.LeaseDuration); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		for _, s := range b.slots() {
			if !slices.Contains(share["a"], s) {
				continue
			}
			took = true
			if leave, ok := a.enter(s); ok {
				leave()
				t.Fatalf("a admitted a pass in slot %d while b held it", s)
			}
		}
	}
	if !took {
		t.Fatalf("b never took a's slots %v: the test proves nothing", share["a"])
	}
}

// The Lease states the lease in whole seconds, never less than the
// member's own: others must not time it out before the member's fence.
func TestLeaseStatesAtLeastTheLease(t *testing.T) {
	r := shard.Ring{Name: "widgets", Namespace: env.Namespace(t), LeaseDuration: 1500 * time.Millisecond, Slots: 4}
	startSlotMember(t, r, "a")
	var l coordinationv1.Lease
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: r.Namespace, Name: r.Name + "-a"}, &l)
		if err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatal(err)
		}
	}
	if got := ptr.Deref(l.Spec.LeaseDurationSeconds, 0); got != 2 {
		t.Errorf("a lease of %v is stated as %d s; want 2", r.LeaseDuration, got)
	}
}

// A member that cannot list the ring's Leases stops with an error
// instead of running without ever renewing.
func TestMemberThatCannotListLeasesStops(t *testing.T) {
	r := shard.Ring{Name: "widgets", Namespace: env.Namespace(t), LeaseDuration: 3 * time.Second, Slots: 4}
	config := interceptedConfig(func(req *http.Request) *http.Response {
		if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/leases") {
			return &http.Response{StatusCode: http.StatusForbidden, Body: io.NopCloser(strings.NewReader("{}")), Header: http.Header{}, Request: req}
		}
		return nil
	})
	c, err := r.NewCache("a", &corev1.ConfigMap{})(config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{r.Namespace: {}}})
	testkit.Must(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 5*r.LeaseDuration)
	defer cancel()
	start := time.Now()
	err = c.Start(ctx)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("Start returned %v after %v; want an error within 5 leases", err, time.Since(start))
	}
	t.Logf("Start: %v after %v", err, time.Since(start).Round(time.Millisecond))
}

// waitSlots waits until m holds want.
func waitSlots(t *testing.T, within time.Duration, m *slotMember, want []int) {
	t.Helper()
	var got []int
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if got = m.slots(); slices.Equal(got, want) {
			return
		}
	}
	t.Fatalf("%s holds slots %v after %v; want %v", m.id, got, within, want)
}

// A renewal writes the slots the member lists when it writes, never
// those it listed when the renewal began: a claim written in between
// must not be un-listed while the member takes its slots.
func TestRenewalKeepsAClaimMadeMeanwhile(t *testing.T) {
	r := shard.Ring{Name: "widgets", Namespace: env.Namespace(t), LeaseDuration: 6 * time.Second, Slots: 4}
	share := shard.Assign(r.Slots, "a", "ghost")
	ghostLease(t, r, share["ghost"])
	var mu sync.Mutex
	var armed bool
	var written []string // a's SlotsAnnotation, in order, once armed
	claimed := make(chan struct{})
	config := interceptedConfig(func(req *http.Request) *http.Response {
		if req.Method != http.MethodPatch || !strings.HasSuffix(req.URL.Path, "/leases/"+r.Name+"-a") {
			return nil
		}
		body, err := io.ReadAll(req.Body)
		testkit.Must(t, err)
		req.Body = io.NopCloser(bytes.NewReader(body))
		var l coordinationv1.Lease
		testkit.Must(t, json.Unmarshal(body, &l))
		mu.Lock()
		defer mu.Unlock()
		if armed {
			written = append(written, l.Annotations[shard.SlotsAnnotation])
			if slices.Equal(shard.ParseSlots(l.Annotations[shard.SlotsAnnotation]), shard.Union(share["a"], share["ghost"])) && len(written) == 1 {
				close(claimed)
			}
		}
		return nil
	})
	paused := make(chan struct{})
	shard.SetRenewHook(t, func(ns, id string) {
		mu.Lock()
		on := armed && ns == r.Namespace && id == "a"
		mu.Unlock()
		if !on {
			return
		}
		select {
		case paused <- struct{}{}:
		default:
			return // only the first renewal once armed waits
		}
		select {
		case <-claimed:
		case <-time.After(r.LeaseDuration / 3):
		}
	})
	a := startSlotMemberWith(t, r, "a", config)
	waitSlots(t, 15*time.Second, a, share["a"])

	mu.Lock()
	armed = true
	mu.Unlock()
	select {
	case <-paused:
	case <-time.After(r.LeaseDuration):
		t.Fatal("no renewal within a lease")
	}
	// The ghost leaves while a's renewal is under way: a claims its slots.
	testkit.Must(t, env.Client.Delete(t.Context(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name + "-ghost"}}))
	waitSlots(t, 15*time.Second, a, shard.Union(share["a"], share["ghost"]))
	time.Sleep(r.LeaseDuration / 2) // the renewal that waited, and one more

	mu.Lock()
	defer mu.Unlock()
	if len(written) == 0 || shard.FormatSlots(shard.ParseSlots(written[0])) != shard.FormatSlots(shard.Union(share["a"], share["ghost"])) {
		t.Fatalf("a wrote %q once the renewal waited; want its claim of every slot first: the test proves nothing", written)
	}
	all := shard.FormatSlots(shard.Union(share["a"], share["ghost"]))
	for i, w := range written {
		if w != all {
			t.Errorf("a's write %d after its claim lists slots %q; want %q: it un-lists slots it is taking (writes %q)", i, w, all, written)
		}
	}
}

// A member giving slots up to one that joins frees them once their
// gates closed, before the cache of the slots it keeps restarted: that
// restart waits for a list, which must not delay the takeover.
func TestGivenUpSlotsFreeBeforeTheKeptCacheRestarts(t *testing.T) {
	r := shard.Ring{Name: "widgets", Namespace: env.Namespace(t), LeaseDuration: 3 * time.Second, Slots: 12}
	config, held := heldListsConfig()
	ac, err := r.NewCache("a", &corev1.ConfigMap{})(config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{r.Namespace: {}}})
	testkit.Must(t, err)
	a := &slotMember{id: "a", slots: ac.(interface{ Slots() []int }).Slots, stop: testkit.Start(t, "member a", ac)}
	waitSlots(t, 15*time.Second, a, shard.Assign(r.Slots, "a")["a"])
	_, err = ac.GetInformer(t.Context(), &corev1.ConfigMap{}) // a controller's watch: a restarted cache lists
	testkit.Must(t, err)
	held.hold()
	t.Cleanup(func() { held.release() }) // before a stops: its Release waits for them
	share := shard.Assign(r.Slots, "a", "c")
	c := startSlotMember(t, r, "c")
	start := time.Now()
	waitSlots(t, 5*time.Second, c, share["c"])
	t.Logf("c took its slots %v after it started, a's lists held", time.Since(start).Round(time.Millisecond))
}

package shard_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/shard"
)

// slotMember runs the cache of member id until stop.
type slotMember struct {
	id    string
	slots func() []int
	stop  func()
}

func startSlotMember(t *testing.T, r shard.Ring, id string) *slotMember {
	t.Helper()
	c, err := r.NewCache(id, &corev1.ConfigMap{})(env.Config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{r.Namespace: {}}})
	if err != nil {
		t.Fatal(err)
	}
	return &slotMember{id: id, slots: c.(interface{ Slots() []int }).Slots, stop: testkit.Start(t, "member "+id, c)}
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

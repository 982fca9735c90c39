package shard

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
	"github.com/opkit-dev/opkit/internal/repo"
	"github.com/opkit-dev/opkit/shard"
	"github.com/opkit-dev/opkit/statusutil"
)

const (
	ns = "shard-e2e"
	// count Memcacheds: enough that each of three shards owns some
	// (all but certain: 3·(2/3)^30 ≈ 2e-5 that one owns none).
	count = 30
	// takeover is how long a killed shard's Memcacheds may wait for a
	// survivor: its Lease's duration (the default, 15 s) plus 10 s.
	takeover = shard.DefaultLeaseDuration + 10*time.Second
	// joinRounds is how often r3 leaves or joins with changes in flight.
	joinRounds = 8
)

var ring = shard.Ring{Name: "memcached", Namespace: shardNamespace}

// TestMemcachedShards runs the memcached operator as shards r0, r1 and
// r2: the Memcacheds are spread over all three and become Ready; r1 is
// killed (SIGKILL: its Lease stays until it expires), and within its
// lease duration + 10 s the survivors hold every one of its slots, and
// a spec change to all of them converges; r1 comes back
// and takes its share again, and the next change converges too. Then
// the shards scale to 2 (r2 stops gracefully: its share moves at once)
// and to 4 (r2 and r3 start), converging each time: no Memcached is
// left without a live shard.
func TestMemcachedShards(t *testing.T) {
	f := features.New("memcached shards").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if out, err := harness.Kubectl(ctx, cfg, "create", "namespace", ns); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for i := range count {
				m := &v1beta1.Memcached{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("mc-%d", i), Namespace: ns},
					Spec:       v1beta1.MemcachedSpec{Replicas: 1, Image: "memcached:1.6"},
				}
				if err := cfg.Client().Resources().Create(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
			return ctx
		}).
		Assess("the three shards share the Memcacheds, all Ready", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			converged(ctx, t, cfg, time.Minute, "r0", "r1", "r2")
			return ctx
		}).
		Assess("r1 killed: its Memcacheds move to r0 and r2 within the lease duration + 10 s, and a change converges", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := shards[1].Kill(); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			labelled(ctx, t, cfg, takeover, "r0", "r2")
			t.Logf("r1's slots taken over %v after the kill", time.Since(killed).Round(100*time.Millisecond))
			scaleAll(ctx, t, cfg, 2)
			converged(ctx, t, cfg, 2*time.Minute, "r0", "r2")
			return ctx
		}).
		Assess("r1 back: it takes its share again, and a change converges", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := shards[1].Restart(); err != nil {
				t.Fatal(err)
			}
			back := time.Now()
			labelled(ctx, t, cfg, time.Minute, "r0", "r1", "r2")
			t.Logf("rebalanced %v after r1's restart", time.Since(back).Round(100*time.Millisecond))
			scaleAll(ctx, t, cfg, 1)
			converged(ctx, t, cfg, 2*time.Minute, "r0", "r1", "r2")
			return ctx
		}).
		Assess("scaled to 2: r2 stops (SIGTERM) and releases its Lease, its share moves at once, and a change converges", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := shards[2].Terminate(); err != nil {
				t.Fatal(err)
			}
			stopped := time.Now()
			labelled(ctx, t, cfg, 10*time.Second, "r0", "r1")
			t.Logf("r2's slots taken over %v after it exited", time.Since(stopped).Round(100*time.Millisecond))
			scaleAll(ctx, t, cfg, 2)
			converged(ctx, t, cfg, 2*time.Minute, "r0", "r1")
			return ctx
		}).
		Assess("scaled to 4: r2 and r3 start and take their shares, and a change converges", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := shards[2].Restart(); err != nil {
				t.Fatal(err)
			}
			root, err := repo.Root()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := shards[3].Start(root)(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			started := time.Now()
			labelled(ctx, t, cfg, time.Minute, "r0", "r1", "r2", "r3")
			t.Logf("rebalanced over 4 %v after r3 started", time.Since(started).Round(100*time.Millisecond))
			scaleAll(ctx, t, cfg, 1)
			converged(ctx, t, cfg, 2*time.Minute, "r0", "r1", "r2", "r3")
			return ctx
		}).
		Assess("changes made while a shard joins or leaves converge, whatever the offset", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			// r3 leaves and joins again, each time with every Memcached
			// changed 0 to 3 s before or after: the changes land in the
			// middle of the slots' moves.
			joined := true
			for i := range joinRounds {
				offset := time.Duration(i%7) * 500 * time.Millisecond
				move := shards[3].Terminate
				if !joined {
					move = shards[3].Restart
				}
				go func() { time.Sleep(offset); _ = move() }()
				scaleAll(ctx, t, cfg, i%2)
				time.Sleep(3*time.Second - offset)
				joined = !joined
				members := []string{"r0", "r1", "r2"}
				if joined {
					members = append(members, "r3")
				}
				converged(ctx, t, cfg, time.Minute, members...)
				t.Logf("round %d (offset %v) converged", i, offset)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if t.Failed() {
				for _, s := range shards {
					if s.Log() == "" {
						continue
					}
					t.Logf("%s log:\n%s", s.Name, tail(s.Log(), 40))
				}
			}
			_, _ = harness.Kubectl(ctx, cfg, "delete", "namespace", ns, "--wait=false")
			return ctx
		}).Feature()
	testEnv.Test(t, f)
}

// labelled waits until members hold every slot, each some, and every
// Memcached is labelled with its slot.
func labelled(ctx context.Context, t *testing.T, cfg *envconf.Config, within time.Duration, members ...string) {
	t.Helper()
	waitAll(ctx, t, cfg, within, members, false)
}

// converged waits as labelled does, and until every Memcached is Ready at
// its generation.
func converged(ctx context.Context, t *testing.T, cfg *envconf.Config, within time.Duration, members ...string) {
	t.Helper()
	waitAll(ctx, t, cfg, within, members, true)
}

func waitAll(ctx context.Context, t *testing.T, cfg *envconf.Config, within time.Duration, members []string, ready bool) {
	t.Helper()
	harness.WaitFor(ctx, t, fmt.Sprintf("every Memcached on a slot of one of %v", members), within, 200*time.Millisecond, func(ctx context.Context) (bool, string) {
		var list v1beta1.MemcachedList
		if err := cfg.Client().Resources(ns).List(ctx, &list); err != nil {
			return false, err.Error()
		}
		if len(list.Items) != count {
			return false, fmt.Sprintf("%d Memcacheds", len(list.Items))
		}
		held, why := harness.ShardHolders(ctx, cfg, ring, shardNamespace, members)
		if why != "" {
			return false, why
		}
		owned := map[string]int{}
		owner := map[string]string{}
		for _, m := range list.Items {
			slot := ring.Slot(types.NamespacedName{Namespace: ns, Name: m.Name})
			owner[m.Name] = strconv.Itoa(slot)
			if got := m.Labels[ring.SlotLabel()]; got != owner[m.Name] {
				return false, fmt.Sprintf("%s labelled with slot %q, want %d", m.Name, got, slot)
			}
			owned[held[slot]]++
			if !ready {
				continue
			}
			c := meta.FindStatusCondition(m.Status.Conditions, statusutil.ConditionReady)
			if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != m.Generation {
				return false, fmt.Sprintf("%s not Ready at generation %d: %+v", m.Name, m.Generation, c)
			}
		}
		for _, mem := range members {
			if owned[mem] == 0 {
				return false, fmt.Sprintf("%s holds no Memcached: %v", mem, owned)
			}
		}
		if ready {
			return harness.ShardChildrenLabelled(ctx, cfg, ns, ring.SlotLabel(), owner)
		}
		return true, ""
	})
}

// scaleAll sets every Memcached's replicas.
func scaleAll(ctx context.Context, t *testing.T, cfg *envconf.Config, replicas int) {
	t.Helper()
	var list v1beta1.MemcachedList
	if err := cfg.Client().Resources(ns).List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(list.Items))
	for _, m := range list.Items {
		names = append(names, m.Name)
	}
	sort.Strings(names)
	for _, n := range names {
		if out, err := harness.Kubectl(ctx, cfg, "patch", "memcached", n, "-n", ns, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

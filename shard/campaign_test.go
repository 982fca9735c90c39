package shard_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/guard"
	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/operation"
	"github.com/opkit-dev/opkit/shard"
)

var (
	shardSeed      = flag.Uint64("shardcampaign.seed", 1, "the shard campaign's seed")
	shardSchedules = flag.Int("shardcampaign.schedules", 1, "the shard campaign's schedules")
	shardSteps     = flag.Int("shardcampaign.steps", 6, "membership changes per schedule of the shard campaign")
)

// TestShardCampaign draws, per schedule, replicas of a sharded operator
// joining, leaving and dying (cut off from the API server, then stopped:
// their Lease runs out) while each of eight Widgets runs one operation
// after another, its guard ensured in every pass. It checks that no
// Widget is passed, and no operation runs, on two replicas at once, that
// an operation takes effect at most once, that every Widget's operations
// go on once the membership settles, and then that every Widget's guard
// carries its slot and a deleted Widget's guard is collected.
func TestShardCampaign(t *testing.T) {
	for i := range *shardSchedules {
		t.Run(fmt.Sprintf("%03d", i), func(t *testing.T) {
			c := newShardCampaign(t, *shardSeed, i)
			c.run(*shardSteps)
			if v := c.violations(); len(v) > 0 {
				t.Errorf("seed %d schedule %d: %d violations:\n  %s\nsteps:\n  %s", *shardSeed, i, len(v),
					strings.Join(v, "\n  "), strings.Join(c.log, "\n  "))
			}
			fmt.Printf("shard campaign: seed %d schedule %d, %d membership changes, %d passes, %d operation effects, %d violations\n",
				*shardSeed, i, len(c.log), c.passes.Load(), c.effectCount(), len(c.violations()))
		})
	}
}

type shardCampaign struct {
	t       *testing.T
	rd      *rand.Rand
	ring    shard.Ring
	widgets []string
	next    int
	live    []*campaignReplica
	log     []string
	passes  atomic.Int64

	mu      sync.Mutex
	records map[string]operation.Record // by Widget: its status, as the API server keeps it
	passing map[string]string           // by Widget: the replica passing it
	running map[string]string           // by operation ID: the replica whose run goes
	effects map[string]int              // by operation ID
	broken  []string
}

type campaignReplica struct {
	id   string
	cut  atomic.Bool
	stop context.CancelFunc
	done chan struct{}
}

func newShardCampaign(t *testing.T, seed uint64, i int) *shardCampaign {
	ns := env.Namespace(t)
	c := &shardCampaign{t: t, rd: rand.New(rand.NewPCG(seed, uint64(i))),
		ring:    shard.Ring{Name: "widgets", Namespace: ns, LeaseDuration: 2 * time.Second, Slots: 6},
		records: map[string]operation.Record{}, passing: map[string]string{}, running: map[string]string{}, effects: map[string]int{}}
	for i := range 8 {
		w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%d", i), Namespace: ns}}
		testkit.Must(t, env.Client.Create(t.Context(), w))
		c.widgets = append(c.widgets, w.Name)
	}
	t.Cleanup(func() {
		for _, r := range c.live {
			r.stop()
			<-r.done
		}
	})
	return c
}

func (c *shardCampaign) violate(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.broken = append(c.broken, fmt.Sprintf(format, args...))
}

func (c *shardCampaign) violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.broken...)
}

func (c *shardCampaign) effectCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.effects {
		n += e
	}
	return n
}

func (c *shardCampaign) run(steps int) {
	c.join()
	for range steps {
		time.Sleep(time.Duration(500+c.rd.IntN(1500)) * time.Millisecond)
		switch n := c.rd.IntN(3); {
		case len(c.live) < 3 && (n == 0 || len(c.live) == 1):
			c.join()
		case n == 1:
			c.leave(false)
		default:
			c.leave(true)
		}
	}
	if len(c.live) == 0 {
		c.join()
	}
	c.logf("settled with %d replicas", len(c.live))
	before := c.successes()
	deadline := time.Now().Add(30 * time.Second)
	for {
		after := c.successes()
		var stuck []string
		for _, w := range c.widgets {
			if after[w] <= before[w] {
				stuck = append(stuck, w)
			}
		}
		if len(stuck) == 0 {
			c.checkGuards()
			return
		}
		if time.Now().After(deadline) {
			c.violate("no operation of %v succeeded within 30 s of the membership settling", stuck)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *shardCampaign) logf(format string, args ...any) {
	c.log = append(c.log, fmt.Sprintf(format, args...))
}

// checkGuards checks, once membership settled, that every Widget has a
// guard carrying its slot label, then deletes two Widgets and wants
// their guards collected by whichever replica holds their slots.
func (c *shardCampaign) checkGuards() {
	ctx := c.t.Context()
	label := c.ring.SlotLabel()
	for _, name := range c.widgets {
		w, cm := &testv1.Widget{}, &corev1.ConfigMap{}
		testkit.Must(c.t, env.Client.Get(ctx, client.ObjectKey{Namespace: c.ring.Namespace, Name: name}, w))
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: c.ring.Namespace, Name: guard.Name(w)}, cm); err != nil {
			c.violate("%s has no guard: %v", name, err)
			continue
		}
		if cm.Labels[label] == "" || cm.Labels[label] != w.Labels[label] {
			c.violate("%s's guard has slot %q, the Widget %q", name, cm.Labels[label], w.Labels[label])
		}
	}
	gone := []string{c.widgets[c.rd.IntN(4)], c.widgets[4+c.rd.IntN(4)]}
	c.logf("the user deletes %v", gone)
	for _, name := range gone {
		testkit.Must(c.t, env.Client.Delete(ctx, &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: c.ring.Namespace, Name: name}}))
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var left []string
		for _, name := range gone {
			err := env.Client.Get(ctx, client.ObjectKey{Namespace: c.ring.Namespace, Name: name + "-guard"}, &corev1.ConfigMap{})
			if client.IgnoreNotFound(err) != nil {
				c.t.Fatal(err)
			}
			if err == nil {
				left = append(left, name)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(end) {
			c.violate("the guards of deleted %v not collected within 30 s", left)
			return
		}
	}
}

// successes counts each Widget's succeeded operations.
func (c *shardCampaign) successes() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for _, w := range c.widgets {
		rec := c.records[w]
		var k int
		if _, err := fmt.Sscanf(strings.TrimPrefix(rec.ID, w+"/"), "%d", &k); err == nil {
			out[w] = k
			if rec.Phase == operation.Succeeded {
				out[w]++
			}
		}
	}
	return out
}

// join starts a replica.
func (c *shardCampaign) join() {
	c.next++
	rep := &campaignReplica{id: fmt.Sprintf("r%d", c.next), done: make(chan struct{})}
	c.logf("%s joins", rep.id)
	cfg := interceptedConfig(func(req *http.Request) *http.Response {
		if rep.cut.Load() {
			return &http.Response{StatusCode: http.StatusServiceUnavailable, Body: io.NopCloser(strings.NewReader("")), Request: req}
		}
		return nil
	})
	// Guards are sharded with their owners: their slot labels are the
	// owner's.
	mgr := managerWith(c.t, cfg, nil, c.ring.NewCache(rep.id, &testv1.Widget{}, &corev1.ConfigMap{}))
	runner := operation.NewRunner(nil)
	testkit.Must(c.t, mgr.Add(runner))
	g, err := guard.New(mgr.GetClient(), &testv1.Widget{})
	testkit.Must(c.t, err)
	collector, err := guard.NewCollector(g, mgr.GetAPIReader())
	testkit.Must(c.t, err)
	testkit.Must(c.t, collector.SetupWithManager(mgr))
	s := &shard.Sharder{Ring: c.ring, GVK: testv1.GroupVersion.WithKind("Widget")}
	testkit.Must(c.t, s.SetupWithManager(mgr))
	testkit.Must(c.t, ctrl.NewControllerManagedBy(mgr).Named("widgets-"+rep.id).For(&testv1.Widget{}).
		Complete(shard.Handoff(mgr, &testv1.Widget{}, c.reconciler(rep.id, mgr.GetClient(), g, runner))))
	ctx, cancel := context.WithCancel(context.Background())
	rep.stop = cancel
	go func() {
		defer close(rep.done)
		_ = mgr.Start(ctx) // a replica cut off stops with an error
	}()
	c.live = append(c.live, rep)
}

// leave stops a replica rd draws: gracefully, or cut off from the API
// server first, so that its Lease runs out.
func (c *shardCampaign) leave(kill bool) {
	if what := leaveOne(c.rd, &c.live, kill); what != "" {
		c.logf("%s", what)
	}
}

// leaveOne stops a replica of live that rd draws, unless it is the last:
// gracefully, or cut off from the API server first; it says which.
func leaveOne(rd *rand.Rand, live *[]*campaignReplica, kill bool) string {
	if len(*live) <= 1 {
		return ""
	}
	i := rd.IntN(len(*live))
	rep := (*live)[i]
	*live = slices.Delete(*live, i, i+1)
	what := rep.id + " leaves"
	if kill {
		what = rep.id + " dies"
		rep.cut.Store(true)
	}
	rep.stop()
	<-rep.done
	return what
}

// reconciler is replica's pass: it ensures the Widget's guard and runs
// one operation after another on it, checking that no other replica
// passes it meanwhile.
func (c *shardCampaign) reconciler(replica string, cl client.Client, g *guard.Guard, runner *operation.Runner) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		if req.Namespace != c.ring.Namespace {
			return reconcile.Result{}, nil // another test's Widget: the replicas watch every namespace
		}
		c.passes.Add(1)
		c.mu.Lock()
		if other, ok := c.passing[req.Name]; ok {
			c.broken = append(c.broken, fmt.Sprintf("%s passed by %s while %s passes it", req.Name, replica, other))
		}
		c.passing[req.Name] = replica
		rec := c.records[req.Name]
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			delete(c.passing, req.Name)
			c.mu.Unlock()
		}()
		w := &testv1.Widget{}
		if err := cl.Get(ctx, req.NamespacedName, w); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		if _, err := g.Ensure(ctx, w); err != nil {
			return reconcile.Result{}, err
		}
		if !rec.Active() {
			k := 0
			if rec.ID != "" {
				_, _ = fmt.Sscanf(strings.TrimPrefix(rec.ID, req.Name+"/"), "%d", &k)
				k++
			}
			if err := operation.Start(&rec, "op", fmt.Sprintf("%s/%d", req.Name, k), time.Now()); err != nil {
				return reconcile.Result{}, err
			}
		}
		owner := &metav1.ObjectMeta{UID: types.UID("uid-" + req.Name)}
		next := runner.Step(ctx, owner, &rec, c.op(replica))
		c.mu.Lock()
		c.records[req.Name] = rec
		c.mu.Unlock()
		return reconcile.Result{RequeueAfter: max(next, 50*time.Millisecond)}, nil
	})
}

// op runs for 100 to 600 ms, then takes effect unless cancelled.
func (c *shardCampaign) op(replica string) operation.Operation {
	return operation.Operation{Type: "op", Poll: 50 * time.Millisecond, MaxAttempts: 1000,
		Run: func(ctx context.Context, id string, _ func(string)) error {
			c.mu.Lock()
			if other, ok := c.running[id]; ok {
				c.broken = append(c.broken, fmt.Sprintf("operation %s runs on %s while it runs on %s", id, replica, other))
			}
			c.running[id] = replica
			c.mu.Unlock()
			defer func() {
				c.mu.Lock()
				delete(c.running, id)
				c.mu.Unlock()
			}()
			select {
			case <-time.After(time.Duration(100+rand.IntN(500)) * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if c.effects[id]++; c.effects[id] > 1 {
				c.broken = append(c.broken, fmt.Sprintf("operation %s took effect %d times", id, c.effects[id]))
			}
			return nil
		},
		Done: func(_ context.Context, id string) (bool, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.effects[id] > 0, nil
		},
	}
}

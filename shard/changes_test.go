package shard_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/shard"
)

var changeSchedules = flag.Int("changecampaign.schedules", 2, "schedules of TestHandoverMissesNoChange")

// TestHandoverMissesNoChange draws replicas joining, leaving and dying
// while a writer changes the Widgets' specs, the user's way: passes
// never requeue, so a change is seen only through its event or the list
// of the member that takes its slot. Once the membership settles, every
// Widget's last generation must have been read by a pass.
func TestHandoverMissesNoChange(t *testing.T) {
	for i := range *changeSchedules {
		t.Run(fmt.Sprintf("%03d", i), func(t *testing.T) {
			c := newChangeCampaign(t, *shardSeed, i)
			c.run(8)
		})
	}
}

type changeCampaign struct {
	t       *testing.T
	rd      *rand.Rand
	ring    shard.Ring
	widgets []string
	next    int
	live    []*campaignReplica
	log     []string

	mu   sync.Mutex
	seen map[string]int64 // by Widget: the highest generation a pass read
	last map[string]int64 // by Widget: the generation of its last change
}

func newChangeCampaign(t *testing.T, seed uint64, i int) *changeCampaign {
	ns := env.Namespace(t)
	c := &changeCampaign{t: t, rd: rand.New(rand.NewPCG(seed, uint64(1000+i))),
		ring: shard.Ring{Name: "changes", Namespace: ns, LeaseDuration: 2 * time.Second, Slots: 6},
		seen: map[string]int64{}, last: map[string]int64{}}
	for i := range 12 {
		w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%d", i), Namespace: ns}}
		testkit.Must(t, env.Client.Create(t.Context(), w))
		c.widgets = append(c.widgets, w.Name)
		c.last[w.Name] = w.Generation
	}
	t.Cleanup(func() {
		for _, r := range c.live {
			r.stop()
			<-r.done
		}
	})
	return c
}

func (c *changeCampaign) run(steps int) {
	ctx, stopWriting := context.WithCancel(c.t.Context())
	written, wrd := make(chan struct{}), rand.New(rand.NewPCG(c.rd.Uint64(), 0))
	go func() {
		defer close(written)
		c.write(ctx, wrd)
	}()
	c.join()
	c.join()
	for range steps {
		time.Sleep(time.Duration(300+c.rd.IntN(1200)) * time.Millisecond)
		switch n := c.rd.IntN(3); {
		case len(c.live) < 4 && (n == 0 || len(c.live) == 1):
			c.join()
		case n == 1:
			c.leave(false)
		default:
			c.leave(true)
		}
	}
	stopWriting()
	<-written
	if len(c.live) == 0 {
		c.join()
	}
	c.log = append(c.log, fmt.Sprintf("settled with %d replicas", len(c.live)))
	// Two lease durations for a dead member's slots, then time to list.
	deadline := time.Now().Add(2*c.ring.LeaseDuration + 10*time.Second)
	for {
		missed := c.missed()
		if len(missed) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("changes no pass read within %v of the membership settling:\n  %s\nsteps:\n  %s",
				time.Until(deadline)+2*c.ring.LeaseDuration+10*time.Second, strings.Join(missed, "\n  "), strings.Join(c.log, "\n  "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// missed lists the Widgets whose last change no pass has read.
func (c *changeCampaign) missed() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, w := range c.widgets {
		if c.seen[w] < c.last[w] {
			out = append(out, fmt.Sprintf("%s: generation %d written, %d read", w, c.last[w], c.seen[w]))
		}
	}
	return out
}

// write changes a Widget's spec every 20 to 200 ms until ctx ends.
func (c *changeCampaign) write(ctx context.Context, rd *rand.Rand) {
	for k := 0; ; k++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(20+rd.IntN(180)) * time.Millisecond):
		}
		w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: c.ring.Namespace, Name: c.widgets[rd.IntN(len(c.widgets))]}}
		patch := client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, `{"spec":{"message":"change %d"}}`, k))
		if err := env.Client.Patch(context.WithoutCancel(ctx), w, patch); err != nil {
			c.t.Errorf("changing %s: %v", w.Name, err)
			return
		}
		c.mu.Lock()
		c.last[w.Name] = max(c.last[w.Name], w.Generation)
		c.mu.Unlock()
	}
}

// join starts a replica whose passes record the generation they read.
func (c *changeCampaign) join() {
	c.next++
	rep := &campaignReplica{id: fmt.Sprintf("r%d", c.next), done: make(chan struct{})}
	c.log = append(c.log, rep.id+" joins")
	cfg := interceptedConfig(func(req *http.Request) *http.Response {
		if rep.cut.Load() {
			return &http.Response{StatusCode: http.StatusServiceUnavailable, Body: io.NopCloser(strings.NewReader("")), Request: req}
		}
		return nil
	})
	mgr := managerWith(c.t, cfg, nil, c.ring.NewCache(rep.id, &testv1.Widget{}))
	testkit.Must(c.t, (&shard.Sharder{Ring: c.ring, GVK: testv1.GroupVersion.WithKind("Widget")}).SetupWithManager(mgr))
	cl := mgr.GetClient()
	pass := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		if req.Namespace != c.ring.Namespace {
			return reconcile.Result{}, nil // another test's Widget
		}
		w := &testv1.Widget{}
		if err := cl.Get(ctx, req.NamespacedName, w); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		c.mu.Lock()
		c.seen[w.Name] = max(c.seen[w.Name], w.Generation)
		c.mu.Unlock()
		return reconcile.Result{}, nil
	})
	testkit.Must(c.t, ctrl.NewControllerManagedBy(mgr).Named("changes-"+rep.id).For(&testv1.Widget{}).
		Complete(shard.Handoff(mgr, &testv1.Widget{}, pass)))
	ctx, cancel := context.WithCancel(context.Background())
	rep.stop = cancel
	go func() {
		defer close(rep.done)
		_ = mgr.Start(ctx)
	}()
	c.live = append(c.live, rep)
}

// leave stops a replica rd draws, gracefully or cut off first.
func (c *changeCampaign) leave(kill bool) {
	if what := leaveOne(c.rd, &c.live, kill); what != "" {
		c.log = append(c.log, what)
	}
}

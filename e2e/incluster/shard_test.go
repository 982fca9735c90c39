package incluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
	"github.com/opkit-dev/opkit/shard"
	"github.com/opkit-dev/opkit/statusutil"
)

// shardPrefix names the shard steps' Memcacheds.
const shardPrefix = "memcached-shard-"

// deleteShardMemcacheds deletes the shard steps' Memcacheds, for a
// teardown too.
func deleteShardMemcacheds(ctx context.Context, t *testing.T, cfg *envconf.Config, ns string) {
	t.Helper()
	for i := range shardCount {
		if out, err := harness.Kubectl(ctx, cfg, "delete", "memcached", fmt.Sprintf("%s%d", shardPrefix, i), "-n", ns, "--ignore-not-found", "--wait=false"); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	}
}

// shardCount Memcacheds are spread over the operator's shards: a
// replica may hold none of them, so the steps check that every slot is
// held and every Memcached labelled with its slot.
const shardCount = 9

var shardRing = shard.Ring{Name: "memcached"}

// shardSteps are TestMemcachedOperatorInCluster's shard steps, named
// "Shards: ...": the chart upgraded to sharding.enable with 3 replicas
// spreads Memcacheds over them, their children labelled alike; a replica's pod
// killed, the Deployment scaled to 2 and then to 4, every Memcached ends
// labelled for a live replica and a change to all converges.
func (o operator) shardSteps(ns string) []step {
	scale := func(replicas int) func(context.Context, *testing.T, *envconf.Config) {
		return func(ctx context.Context, t *testing.T, cfg *envconf.Config) {
			mustKubectl(ctx, t, cfg, "", "scale", "deployment", o.deployment(), "-n", o.namespace, fmt.Sprintf("--replicas=%d", replicas))
		}
	}
	return []step{
		{"Shards: the chart upgraded to sharding.enable with 3 replicas spreads the Memcacheds over them, children alike", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r, err := o.release(cfg)
			if err != nil {
				t.Fatal(err)
			}
			values := map[string]any{
				"manager":        map[string]any{"replicas": 3, "args": []string{}},
				"leaderElection": map[string]any{"enable": false},
				"sharding":       map[string]any{"enable": true},
			}
			if out, err := r.Upgrade(ctx, values); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for i := range shardCount {
				m := &v1beta1.Memcached{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s%d", shardPrefix, i), Namespace: ns},
					Spec:       v1beta1.MemcachedSpec{Replicas: 1, Image: "memcached:1.6"},
				}
				harness.Admitted(ctx, t, "creating "+m.Name, func(ctx context.Context) error {
					if err := cfg.Client().Resources().Create(ctx, m.DeepCopy()); !apierrors.IsAlreadyExists(err) {
						return err
					}
					return nil
				})
			}
			o.shardsConverge(ctx, t, cfg, ns, 3, 1)
			labelledAtCreation(ctx, t, cfg, ns)
			return ctx
		}},
		{"Shards: a replica's pod killed, its Memcacheds move to the live replicas, and a change converges", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			victim := o.livePods(ctx, t, cfg)[0]
			mustKubectl(ctx, t, cfg, "", "delete", "pod", victim, "-n", o.namespace, "--force", "--grace-period=0")
			killed := time.Now()
			o.shardsConverge(ctx, t, cfg, ns, 3, 0)
			t.Logf("converged %v after %s was killed", time.Since(killed).Round(100*time.Millisecond), victim)
			return ctx
		}},
		{"Shards: the Deployment scaled to 2, a change converges", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			scale(2)(ctx, t, cfg)
			o.shardsConverge(ctx, t, cfg, ns, 2, 1)
			return ctx
		}},
		{"Shards: the Deployment scaled to 4, a change converges", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			scale(4)(ctx, t, cfg)
			o.shardsConverge(ctx, t, cfg, ns, 4, 0)
			deleteShardMemcacheds(ctx, t, cfg, ns)
			return ctx
		}},
	}
}

// labelledAtCreation creates Memcacheds until one is stored with its
// slot, written by the chart's shard webhook, and deletes them: a
// minute allows for the CA reaching the configuration.
func labelledAtCreation(ctx context.Context, t *testing.T, cfg *envconf.Config, ns string) {
	t.Helper()
	for i, end := 0, time.Now().Add(time.Minute); ; i++ {
		m := &v1beta1.Memcached{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("memcached-admitted-%d", i), Namespace: ns},
			Spec:       v1beta1.MemcachedSpec{Replicas: 1, Image: "memcached:1.6"},
		}
		harness.Admitted(ctx, t, "creating "+m.Name, func(ctx context.Context) error {
			return cfg.Client().Resources().Create(ctx, m)
		})
		mustKubectl(ctx, t, cfg, "", "delete", "memcached", m.Name, "-n", ns, "--timeout=2m")
		want := strconv.Itoa(shardRing.Slot(types.NamespacedName{Namespace: ns, Name: m.Name}))
		got := m.Labels[shardRing.SlotLabel()]
		if got == want {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s stored with slot label %q, want %s: the shard webhook did not label it", m.Name, got, want)
		}
		time.Sleep(2 * time.Second)
	}
}

// step is a named Assess function.
type step struct {
	name string
	fn   func(context.Context, *testing.T, *envconf.Config) context.Context
}

// livePods is the operator's running, ready pods that are not being
// deleted, sorted: the ring's members once their Leases say so.
func (o operator) livePods(ctx context.Context, t *testing.T, cfg *envconf.Config) []string {
	t.Helper()
	var pods corev1.PodList
	if err := cfg.Client().Resources(o.namespace).List(ctx, &pods, resources.WithLabelSelector(o.podSelector())); err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(&p) {
			live = append(live, p.Name)
		}
	}
	slices.Sort(live)
	return live
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// shardsConverge sets every shard Memcached's replicas, then waits until
// replicas operator pods are live and hold every slot, each Memcached is
// labelled with its slot and is Ready at its generation, and each of its
// Deployment, Service and budget carries the same label.
func (o operator) shardsConverge(ctx context.Context, t *testing.T, cfg *envconf.Config, ns string, replicas, size int) {
	t.Helper()
	var list v1beta1.MemcachedList
	if err := cfg.Client().Resources(ns).List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	for _, m := range list.Items {
		if !strings.HasPrefix(m.Name, shardPrefix) {
			continue
		}
		harness.Admitted(ctx, t, "a patch of "+m.Name, func(ctx context.Context) error {
			out, err := harness.Kubectl(ctx, cfg, "patch", "memcached", m.Name, "-n", ns, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"replicas":%d}}`, size))
			if err != nil {
				return fmt.Errorf("%w: %s", err, out)
			}
			return nil
		})
	}
	defer func() {
		if t.Failed() {
			o.shardLogs(ctx, t, cfg)
		}
	}()
	harness.WaitFor(ctx, t, fmt.Sprintf("%d shards, every Memcached on its shard and Ready with %d pods", replicas, size), 3*time.Minute, time.Second, func(ctx context.Context) (bool, string) {
		members := o.livePods(ctx, t, cfg)
		if len(members) != replicas {
			return false, fmt.Sprintf("live operator pods %v", members)
		}
		var list v1beta1.MemcachedList
		if err := cfg.Client().Resources(ns).List(ctx, &list); err != nil {
			return false, err.Error()
		}
		if _, why := harness.ShardHolders(ctx, cfg, shardRing, o.namespace, members); why != "" {
			return false, why
		}
		owner := map[string]string{}
		for _, m := range list.Items {
			if !strings.HasPrefix(m.Name, shardPrefix) {
				continue
			}
			slot := strconv.Itoa(shardRing.Slot(types.NamespacedName{Namespace: ns, Name: m.Name}))
			owner[m.Name] = slot
			if got := m.Labels[shardRing.SlotLabel()]; got != slot {
				return false, fmt.Sprintf("%s labelled with slot %q, want %s", m.Name, got, slot)
			}
			c := meta.FindStatusCondition(m.Status.Conditions, statusutil.ConditionReady)
			if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != m.Generation || len(m.Status.Nodes) != size {
				return false, fmt.Sprintf("%s not Ready with %d pods at generation %d: %+v, nodes %v", m.Name, size, m.Generation, c, m.Status.Nodes)
			}
		}
		if len(owner) != shardCount {
			return false, fmt.Sprintf("%d shard Memcacheds", len(owner))
		}
		return harness.ShardChildrenLabelled(ctx, cfg, ns, shardRing.SlotLabel(), owner)
	})
}

// shardLogs logs, for a failure, the slots each member's Lease lists and
// the end of every operator pod's log.
func (o operator) shardLogs(ctx context.Context, t *testing.T, cfg *envconf.Config) {
	t.Helper()
	ctx = context.WithoutCancel(ctx)
	r := shardRing
	r.Namespace = o.namespace
	held, err := r.Holders(ctx, cfg.Client().Resources().GetControllerRuntimeClient())
	t.Logf("the Leases' slots: %v (%v)", held, err)
	for _, pod := range o.livePods(ctx, t, cfg) {
		out, err := harness.Kubectl(ctx, cfg, "logs", "-n", o.namespace, pod, "--tail=150")
		t.Logf("%s log (%v):\n%s", pod, err, out)
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/shard"
)

// The shards experiment (-replicas): the opkit operator alone, as one
// replica and as several shards (--shard), each count on a fresh cluster.
// Every run creates N Memcacheds until all are Ready and records, per
// replica, the Memcacheds it holds, its resident set, CPU, passes and
// requests. Then one replica is restarted (with every Memcached Ready:
// its passes, writes and time to the last pass, against the time one list
// of the Memcacheds takes), or, with several, one is killed (the time
// until a survivor holds and has passed each of its Memcacheds).

// shardsResult is the experiment, written to shards.json.
type shardsResult struct {
	Command string      `json:"command"`
	Machine machine     `json:"machine"`
	Config  config      `json:"config"`
	Runs    []*shardRun `json:"runs"`
}

// shardRun is one count of replicas.
type shardRun struct {
	Replicas int             `json:"replicas"`
	N        int             `json:"n"`
	Create   phase           `json:"create"`
	Members  []shardMember   `json:"members"`
	Restart  *restartResult  `json:"restart,omitempty"`
	Failover *failoverResult `json:"failover,omitempty"`
}

// shardMember is one replica over the create step.
type shardMember struct {
	Name string `json:"name"`
	// Held is the Memcacheds of its slots after the create step (all
	// of them with one replica).
	Held            int      `json:"held"`
	RSSBeforeCreate int64    `json:"rssBeforeCreateBytes"`
	RSSAfterCreate  int64    `json:"rssAfterCreateBytes"`
	AnonAfterCreate int64    `json:"anonRSSAfterCreateBytes"`
	GoHeapInuse     float64  `json:"goHeapInuseBytes"`
	CPUSeconds      float64  `json:"cpuSeconds"`
	Requests        requests `json:"requests"`
	// Webhooks is the requests its webhook server handled, by path, and
	// the seconds its handlers took.
	Webhooks map[string]apiKind `json:"webhooks,omitempty"`
}

// restartResult is a replica stopped (SIGTERM) and started again with
// every Memcached Ready.
type restartResult struct {
	// ListSeconds is one uncached list of the N Memcacheds by the
	// benchmark: the floor of a restart.
	ListSeconds float64 `json:"listSeconds"`
	// ListAllSeconds lists, one after the other, everything the operator
	// caches: the Memcacheds, Deployments, Services, budgets, pods.
	ListAllSeconds float64 `json:"listAllSeconds"`
	// ReadySeconds and LastPassSeconds run from the new process's start
	// to its /readyz (its probe server: readiness does not wait for the
	// caches) and to its last pass (none for 10 s after).
	ReadySeconds    float64 `json:"readySeconds"`
	LastPassSeconds float64 `json:"lastPassSeconds"`
	// Requests is every request of the new process.
	Requests requests `json:"requests"`
	// ClusterWrites is the API server's writes from every client over the
	// restart (node and component Leases included).
	ClusterWrites map[string]float64 `json:"clusterWrites"`
}

// failoverResult is a replica killed (SIGKILL) with every Memcached Ready.
type failoverResult struct {
	Killed string `json:"killed"`
	// Moved is the Memcacheds of its slots when it was killed.
	Moved        int     `json:"moved"`
	LeaseSeconds float64 `json:"leaseSeconds"`
	// RelabelledSeconds is until survivors held every one of its slots
	// (before slots: until each Memcached was relabelled for one);
	// PassedSeconds until the survivors had also run at least Moved
	// more passes, so that each was passed by its new replica.
	RelabelledSeconds float64 `json:"relabelledSeconds"`
	// FirstMovedSeconds is until a survivor held the first of them: the
	// lease's expiry as the survivors saw it.
	FirstMovedSeconds float64 `json:"firstMovedSeconds"`
	PassedSeconds     float64 `json:"passedSeconds"`
}

var shardRing = shard.Ring{Name: "memcached"}

func runShards(ctx context.Context, cfg config) error {
	out, err := outDir(cfg.Out)
	if err != nil {
		return err
	}
	res := &shardsResult{Command: "cd hack && go run ./scale " + strings.Join(os.Args[1:], " "), Config: cfg}
	for _, k := range cfg.Replicas {
		fmt.Fprintf(os.Stderr, "\n== N=%d, %d replicas\n", cfg.N, k)
		c := cfg
		c.replicas = k
		r, m, err := shardOnce(ctx, c)
		if err != nil {
			return fmt.Errorf("%d replicas: %w", k, err)
		}
		res.Machine = m
		res.Runs = append(res.Runs, r)
		// Written after every run, so that a failure keeps the earlier.
		if err := writeShards(out, res); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "\nresults in %s\n", out)
	return nil
}

func shardOnce(ctx context.Context, cfg config) (res *shardRun, m machine, err error) {
	e, err := setUp(ctx, cfg)
	defer func() {
		if terr := e.tearDown(); terr != nil {
			err = errors.Join(err, terr)
		}
	}()
	if err != nil {
		return nil, m, err
	}
	c := e.contenders[contOpkit]
	b := &bench{e: e, cfg: cfg, cur: c, deployments: map[string]*appsv1.Deployment{}}
	res = &shardRun{Replicas: cfg.replicas, N: cfg.N}
	before := make([]snapshot, len(e.replicas))
	for i, op := range e.replicas {
		if before[i], err = scrape(ctx, op.metricsURL); err != nil {
			return nil, m, err
		}
		st, err := procStatus(op.pid())
		if err != nil {
			return nil, m, err
		}
		res.Members = append(res.Members, shardMember{Name: op.name, RSSBeforeCreate: int64(st.VmRSS)})
	}
	if err := waitForMembers(ctx, e, cfg.replicas); err != nil {
		return nil, m, err
	}
	cpuBefore := replicaCPU(e.replicas)
	objNames := names("mc", cfg.N)
	res.Create, err = b.readyPhase(ctx, fmt.Sprintf("create %d Memcacheds, %d replicas", cfg.N, cfg.replicas), objNames, 1,
		func(ctx context.Context, name string) error { return c.create(ctx, e.client, name) })
	if err != nil {
		return nil, m, err
	}
	time.Sleep(2 * time.Second) // the passes of the last watch events
	cpuAfter := replicaCPU(e.replicas)
	for _, op := range e.replicas {
		if op.pprofURL != "" {
			path := filepath.Join(cfg.Profile, fmt.Sprintf("heap-%d-%d-%s.pprof", cfg.N, cfg.replicas, op.name))
			if err := saveHeap(ctx, op.pprofURL, path); err != nil {
				return nil, m, err
			}
		}
	}
	held, err := heldBy(ctx, e)
	if err != nil {
		return nil, m, err
	}
	for i, op := range e.replicas {
		after, err := scrape(ctx, op.metricsURL)
		if err != nil {
			return nil, m, err
		}
		st, err := procStatus(op.pid())
		if err != nil {
			return nil, m, err
		}
		mem := &res.Members[i]
		d := delta(before[i], after)
		mem.Requests = summarise(d)
		mem.Webhooks = webhookHandlers(d)
		mem.GoHeapInuse = after.sum("go_memstats_heap_inuse_bytes", nil)
		mem.RSSAfterCreate, mem.AnonAfterCreate = int64(st.VmRSS), int64(st.RssAnon)
		mem.CPUSeconds = cpuAfter[i] - cpuBefore[i]
		mem.Held = held[op.name]
		if cfg.replicas == 1 {
			mem.Held = cfg.N
		}
		progress(fmt.Sprintf("%s: holds %d, RSS %s after create (%s before), %.1f CPU-s, %.0f passes\n",
			op.name, mem.Held, mb(mem.RSSAfterCreate), mb(mem.RSSBeforeCreate), mem.CPUSeconds, mem.Requests.Reconciles))
	}
	if cfg.replicas == 1 {
		res.Restart, err = b.restart(ctx)
	} else {
		res.Failover, err = b.failover(ctx)
	}
	return res, describe(e), err
}

// waitForMembers waits until each of k shards holds its Lease and its
// share of the slots, so that no slot moves during the create.
func waitForMembers(ctx context.Context, e *env, k int) error {
	if k < 2 {
		return nil
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		held, err := slotHolders(ctx, e)
		if err != nil {
			return false, err
		}
		per := map[string]int{}
		for _, m := range held {
			per[m]++
		}
		if len(held) != shard.DefaultSlots || len(per) != k {
			return false, nil
		}
		for _, n := range per {
			if n < shard.DefaultSlots/k {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d shards to hold every slot: %w", k, err)
	}
	return nil
}

// slotHolders maps each slot to the live replica whose Lease lists it.
func slotHolders(ctx context.Context, e *env) (map[int]string, error) {
	r := shardRing
	r.Namespace = namespace(contOpkit)
	members, err := r.Holders(ctx, e.client)
	if err != nil {
		return nil, err
	}
	held := map[int]string{}
	for _, op := range e.replicas {
		if !op.killed {
			for _, n := range members[op.name] {
				held[n] = op.name
			}
		}
	}
	return held, nil
}

// replicaCPU is each replica's CPU seconds so far.
func replicaCPU(ops []*operator) []float64 {
	out := make([]float64, len(ops))
	for i, op := range ops {
		out[i], _ = cpuSeconds(op.pid())
	}
	return out
}

// heldBy counts the Memcacheds by the live shard holding their slot; ""
// counts those not labelled yet, or of a slot no live shard holds.
func heldBy(ctx context.Context, e *env) (map[string]int, error) {
	perSlot, err := slotCounts(ctx, e)
	if err != nil {
		return nil, err
	}
	holders, err := slotHolders(ctx, e)
	if err != nil {
		return nil, err
	}
	return countHeld(perSlot, holders), nil
}

// slotCounts counts the Memcacheds by the slot their label names, -1 for
// those not labelled yet.
func slotCounts(ctx context.Context, e *env) (map[int]int, error) {
	out := map[int]int{}
	for _, ns := range e.contenders[contOpkit].namespaces {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(memcachedGVK.GroupVersion().WithKind("MemcachedList"))
		if err := e.client.List(ctx, list, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		for _, o := range list.Items {
			n, err := strconv.Atoi(o.Labels[shardRing.SlotLabel()])
			if err != nil {
				n = -1
			}
			out[n]++
		}
	}
	return out, nil
}

// countHeld sums perSlot by the holder of each slot.
func countHeld(perSlot map[int]int, holders map[int]string) map[string]int {
	out := map[string]int{}
	for n, c := range perSlot {
		out[holders[n]] += c
	}
	return out
}

// restart stops the single replica and starts it again, then waits until
// it has run no pass for 10 s.
func (b *bench) restart(ctx context.Context) (*restartResult, error) {
	e := b.e
	res := &restartResult{}
	namespaces := e.contenders[contOpkit].namespaces
	start := time.Now()
	for _, ns := range namespaces {
		if err := e.client.List(ctx, memcachedList(), client.InNamespace(ns)); err != nil {
			return nil, err
		}
	}
	res.ListSeconds = time.Since(start).Seconds()
	// What the operator lists as it starts: the Memcacheds, their
	// children, the pods' metadata.
	start = time.Now()
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	for _, ns := range namespaces {
		for _, l := range []client.ObjectList{memcachedList(), &appsv1.DeploymentList{}, &corev1.ServiceList{}, &policyv1.PodDisruptionBudgetList{}, pods} {
			if err := e.client.List(ctx, l, client.InNamespace(ns)); err != nil {
				return nil, err
			}
		}
	}
	res.ListAllSeconds = time.Since(start).Seconds()
	apiBefore, err := b.apiserverMetrics(ctx)
	if err != nil {
		return nil, err
	}
	old := e.replicas[0]
	old.killed = true
	if err := old.stop(); err != nil {
		return nil, err
	}
	progress("restarting the operator")
	start = time.Now()
	op, err := e.startReplica(ctx, b.cfg, old.bin, old.args, 0)
	if err != nil {
		return nil, err
	}
	res.ReadySeconds = time.Since(start).Seconds()
	b.cur.op = op
	var last snapshot
	lastPass, passes := start, -1.0
	for time.Since(lastPass) < 10*time.Second {
		if last, err = scrape(ctx, op.metricsURL); err != nil {
			return nil, err
		}
		if p := last.sum("controller_runtime_reconcile_total", nil); p != passes {
			passes, lastPass = p, time.Now()
		}
		if err := op.alive(); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	res.LastPassSeconds = lastPass.Sub(start).Seconds()
	res.Requests = summarise(last)
	apiAfter, err := b.apiserverMetrics(ctx)
	if err != nil {
		return nil, err
	}
	res.ClusterWrites = clusterWrites(delta(apiBefore, apiAfter))
	progress(fmt.Sprintf("restart: ready %.1fs, last pass %.1fs (list %.2fs, all %.2fs), %.0f passes, %.0f writes\n",
		res.ReadySeconds, res.LastPassSeconds, res.ListSeconds, res.ListAllSeconds, res.Requests.Reconciles, res.Requests.Writes))
	return res, nil
}

// failover kills replica r1 and waits until a survivor holds, and has
// passed, each of its Memcacheds.
func (b *bench) failover(ctx context.Context) (*failoverResult, error) {
	e := b.e
	victim := e.replicas[1]
	held, err := heldBy(ctx, e)
	if err != nil {
		return nil, err
	}
	res := &failoverResult{Killed: victim.name, Moved: held[victim.name], LeaseSeconds: shard.DefaultLeaseDuration.Seconds()}
	var survivors []*operator
	for _, op := range e.replicas {
		if op != victim {
			survivors = append(survivors, op)
		}
	}
	passes := func() (float64, error) {
		var sum float64
		for _, op := range survivors {
			s, err := scrape(ctx, op.metricsURL)
			if err != nil {
				return 0, err
			}
			sum += s.sum("controller_runtime_reconcile_total", map[string]string{"controller": "memcached"})
		}
		return sum, nil
	}
	passesBefore, err := passes()
	if err != nil {
		return nil, err
	}
	// The slot labels never change: listing only the Leases after the
	// kill times a takeover to a Lease list, not to 10 000 objects'.
	perSlot, err := slotCounts(ctx, e)
	if err != nil {
		return nil, err
	}
	victim.killed = true
	if err := syscall.Kill(-victim.pid(), syscall.SIGKILL); err != nil {
		return nil, err
	}
	start := time.Now()
	progress(fmt.Sprintf("killed %s, which held %d Memcacheds", victim.name, res.Moved))
	limit := time.Duration(res.LeaseSeconds*float64(time.Second)) + b.cfg.Timeout
	for res.PassedSeconds == 0 {
		if time.Since(start) > limit {
			return nil, fmt.Errorf("%s's Memcacheds not taken over after %v", victim.name, limit)
		}
		if res.RelabelledSeconds == 0 {
			holders, err := slotHolders(ctx, e)
			if err != nil {
				return nil, err
			}
			at := time.Since(start).Seconds()
			// The victim's Lease no longer counts: its Memcacheds are
			// "" until a survivor holds their slots.
			held := countHeld(perSlot, holders)
			if res.FirstMovedSeconds == 0 && held[""] < res.Moved {
				res.FirstMovedSeconds = at
			}
			if held[""] == 0 {
				res.RelabelledSeconds = at
			}
		}
		if res.RelabelledSeconds > 0 {
			p, err := passes()
			if err != nil {
				return nil, err
			}
			if p-passesBefore >= float64(res.Moved) {
				res.PassedSeconds = time.Since(start).Seconds()
			}
		}
		if err := e.alive(); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	progress(fmt.Sprintf("failover: first slot taken %.1fs, all %.1fs, passed %.1fs after the kill (lease %.0fs)\n",
		res.FirstMovedSeconds, res.RelabelledSeconds, res.PassedSeconds, res.LeaseSeconds))
	return res, nil
}

// writeShards writes shards.json and shards.md into dir.
func writeShards(dir string, res *shardsResult) error {
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "shards.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "shards.md"), []byte(renderShards(res)), 0o644)
}

// renderShards tables the experiment; ratios are against the run with
// one replica, when there is one.
func renderShards(res *shardsResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "# Shards: `%s`\n\n", res.Command)
	var single *shardRun
	for _, r := range res.Runs {
		if r.Replicas == 1 {
			single = r
		}
	}
	sb.WriteString("| replicas | create | replica | Memcacheds held | RSS after create | RSS / one replica's | RssAnon | Go heap | CPU-s | passes | requests | writes |\n")
	sb.WriteString("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range res.Runs {
		for i, m := range r.Members {
			create, ratio := "", ""
			if i == 0 {
				create = fmt.Sprintf("%.1f s", r.Create.Seconds)
				if single != nil && r != single {
					create += fmt.Sprintf(" (%.2fx)", r.Create.Seconds/single.Create.Seconds)
				}
			}
			if single != nil && r != single {
				ratio = fmt.Sprintf("%.0f%%", 100*float64(m.RSSAfterCreate)/float64(single.Members[0].RSSAfterCreate))
			}
			fmt.Fprintf(&sb, "| %d | %s | %s | %d | %s | %s | %s | %s | %.1f | %.0f | %.0f | %.0f |\n",
				r.Replicas, create, m.Name, m.Held, mb(m.RSSAfterCreate), ratio, mb(m.AnonAfterCreate),
				mb(int64(m.GoHeapInuse)), m.CPUSeconds, m.Requests.Reconciles, m.Requests.Total, m.Requests.Writes)
		}
	}
	for _, r := range res.Runs {
		if x := r.Restart; x != nil {
			m := r.Members[0]
			fmt.Fprintf(&sb, "\n**One replica, N=%d.** RSS growth per Memcached over the create step: %.1f KB. "+
				"Restart with every Memcached Ready: /readyz after %.1f s, last pass after %.1f s (%.1fx one list of the Memcacheds, %.2f s; "+
				"%.1fx listing all the operator caches, %.2f s); "+
				"%.0f passes, %.0f requests, **%.0f writes** (%s). The API server's writes meanwhile, from every client: %s.\n",
				r.N, float64(m.RSSAfterCreate-m.RSSBeforeCreate)/float64(r.N)/1024, x.ReadySeconds, x.LastPassSeconds,
				x.LastPassSeconds/x.ListSeconds, x.ListSeconds, x.LastPassSeconds/max(x.ListAllSeconds, 1e-9), x.ListAllSeconds,
				x.Requests.Reconciles, x.Requests.Total, x.Requests.Writes,
				methods(x.Requests.ByMethod, 6), methods(x.ClusterWrites, 8))
		}
		if x := r.Failover; x != nil {
			fmt.Fprintf(&sb, "\n**%d replicas, N=%d.** %s killed (SIGKILL) holding %d Memcacheds: the first in a slot a survivor holds after %.1f s, "+
				"all after %.1f s, and passed by the survivors after %.1f s (bound: the %.0f s lease + 10 s).\n",
				r.Replicas, r.N, x.Killed, x.Moved, x.FirstMovedSeconds, x.RelabelledSeconds, x.PassedSeconds, x.LeaseSeconds)
		}
	}
	return sb.String()
}

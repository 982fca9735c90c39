package etcdnodes

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/kvhistory"
)

// The node campaign's settings; make chaos sets them.
const (
	envNodeSchedules = "OPKIT_NODE_SCHEDULES"
	envNodeSeed      = "OPKIT_NODE_SEED"
	envNodeSteps     = "OPKIT_NODE_STEPS"
)

// TestNodeCampaign is the etcd operator's fault campaign on the real
// nodes: seeded schedules of operations and faults drawn at random
// (scale, rolling restart, a pod killed, a pod lost with its claim, a
// drain through the disruption budget, the operator killed) under a
// porcupine-checked client load. After each schedule the history must be
// linearizable with every acknowledged write read back, a drain of a
// settled cluster must leave writes going, and the cluster must settle
// once faults stop.
//
// Each schedule takes minutes, so only make chaos runs it
// (OPKIT_NODE_SCHEDULES); TestDrainAndNodeLoss, in make test, is its
// fixed scenario. Node death is not drawn: a killed node does not come
// back.
func TestNodeCampaign(t *testing.T) {
	schedules, seed, steps := envInt(t, envNodeSchedules, 0), envInt(t, envNodeSeed, 1), envInt(t, envNodeSteps, 6)
	if schedules == 0 {
		t.Skipf("make chaos runs it: %s=N schedules on the real nodes", envNodeSchedules)
	}
	var sum nodeTotals
	start := time.Now()
	for i := range schedules {
		s := &nodeSchedule{seed: uint64(seed), i: i, r: rand.New(rand.NewPCG(uint64(seed), uint64(i))), start: time.Now(), sum: &sum}
		f := features.New(fmt.Sprintf("schedule %d", i)).
			Assess("drawn operations and faults", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
				s.run(ctx, t, cfg, steps)
				return ctx
			}).
			Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
				s.teardown(ctx, t, cfg)
				return ctx
			}).Feature()
		testEnv.Test(t, f)
	}
	fmt.Printf("fault campaign (real nodes): seed %d, %d schedules, %d operations, %d faults, %d drains checked and %d client histories (%d client operations) checked, %d violations in %s\n",
		seed, schedules, sum.ops, sum.faults, sum.drains, sum.histories, sum.clientOps, sum.violations, time.Since(start).Round(time.Second))
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a whole number", name, v)
	}
	return n
}

type nodeTotals struct {
	ops, faults, drains, histories, clientOps, violations int
}

// nodeSchedule is one drawn schedule on the real nodes.
type nodeSchedule struct {
	seed  uint64
	i     int
	r     *rand.Rand
	start time.Time
	sum   *nodeTotals
	log   []string

	ns       string
	cli      *clientv3.Client
	probe    *writeProbe
	history  *kvhistory.History
	stopLoad context.CancelFunc
	load     sync.WaitGroup
}

const nodeCluster = "chaos"

func (s *nodeSchedule) logf(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf("%6.1fs: %s", time.Since(s.start).Seconds(), fmt.Sprintf(format, args...)))
}

func (s *nodeSchedule) violate(t *testing.T, format string, args ...any) {
	t.Helper()
	s.sum.violations++
	s.logf("VIOLATION: "+format, args...)
	t.Errorf("seed %d schedule %d: "+format, append([]any{s.seed, s.i}, args...)...)
}

func (s *nodeSchedule) run(ctx context.Context, t *testing.T, cfg *envconf.Config, steps int) {
	r := cfg.Client().Resources()
	s.ns = fmt.Sprintf("chaos-%d-%d", s.seed, s.i)
	if err := r.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}); err != nil {
		t.Fatal(err)
	}
	size := []int32{3, 5}[s.r.IntN(2)]
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: nodeCluster, Namespace: s.ns},
		Spec: v1alpha1.EtcdClusterSpec{Size: size, Version: "3.6.16",
			Storage: v1alpha1.StorageSpec{Size: ptr.To(resource.MustParse("64Mi"))}}}
	if err := r.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	s.logf("create size %d", size)
	harness.WaitEtcdReady(ctx, t, cfg, s.ns, nodeCluster)
	s.cli = harness.EtcdClient(ctx, t, cfg, s.ns, nodeCluster)
	s.probe = startWriteProbe(context.WithoutCancel(ctx), s.cli)
	s.history = kvhistory.New()
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stopLoad = cancel
	for range 2 {
		s.load.Go(func() { s.history.Run(lctx, s.cli, []string{"k0", "k1", "k2", "k3"}) })
	}
	for step := 1; step <= steps; step++ {
		s.act(ctx, t, cfg, step)
		// Faults overlap the recovery from earlier ones, or not.
		time.Sleep(time.Duration(s.r.IntN(8)) * time.Second)
	}
	s.logf("faults stop")
	if s.converge(ctx, t, cfg) {
		s.logf("converged")
	}
	s.checkHistory(ctx, t)
}

// act carries out one drawn operation or fault.
func (s *nodeSchedule) act(ctx context.Context, t *testing.T, cfg *envconf.Config, step int) {
	r := cfg.Client().Resources()
	pods := memberPods(ctx, t, cfg, s.ns, nodeCluster)
	names := slices.Sorted(maps.Keys(pods))
	switch k := s.r.IntN(6); {
	case k == 0:
		s.sum.ops++
		size := []int32{1, 3, 5}[s.r.IntN(3)]
		s.logf("step %d: scale to %d", step, size)
		s.update(ctx, t, cfg, func(c *v1alpha1.EtcdCluster) { c.Spec.Size = size })
	case k == 1:
		s.sum.ops++
		s.logf("step %d: podTemplate change (rolling restart)", step)
		s.update(ctx, t, cfg, func(c *v1alpha1.EtcdCluster) {
			c.Spec.PodTemplate.Annotations = map[string]string{"chaos/roll": strconv.Itoa(step)}
		})
	case k == 2 && len(names) > 0:
		s.sum.faults++
		p := names[s.r.IntN(len(names))]
		s.logf("step %d: pod %s killed (grace period 0)", step, p)
		s.deletePod(ctx, t, cfg, p)
	case k == 3 && len(names) >= 3 && s.isSettled(ctx, cfg):
		// More than one member's data at once is beyond what the operator
		// recovers from by itself: only on a settled cluster.
		s.sum.faults++
		p := names[s.r.IntN(len(names))]
		s.logf("step %d: pod %s and its claim lost", step, p)
		claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: p + "-data", Namespace: s.ns}}
		if err := r.Delete(ctx, claim); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		s.deletePod(ctx, t, cfg, p)
	case k == 4 && len(names) > 0:
		node := pods[names[s.r.IntN(len(names))]].Spec.NodeName
		if node == "" {
			s.logf("step %d: no drain, the pod drawn is not scheduled", step)
			break
		}
		s.sum.faults++
		s.drain(ctx, t, cfg, step, node)
	case k == 5:
		s.sum.faults++
		s.logf("step %d: operator killed and restarted", step)
		if err := operator.Restart(); err != nil {
			t.Fatal(err)
		}
	default:
		s.logf("step %d: client writes only", step)
	}
}

// drain drains node of the cluster's pods through the disruption budget,
// as `kubectl drain` does, then uncordons it. Started on a settled
// cluster, it must leave a quorum: writes go on.
func (s *nodeSchedule) drain(ctx context.Context, t *testing.T, cfg *envconf.Config, step int, node string) {
	ready := s.isSettled(ctx, cfg)
	start := time.Now()
	out, err := harness.Kubectl(ctx, cfg, "drain", node, "--pod-selector="+labelCluster+"="+nodeCluster,
		"--ignore-daemonsets", "--delete-emptydir-data", "--timeout=20s")
	end := time.Now()
	outcome := "drained"
	if err != nil {
		outcome = "stopped (" + lastLine(out) + ")"
	}
	gap, _ := s.probe.longestGap(start, end)
	s.logf("step %d: drain of %s %s; longest write gap %s; cluster settled before: %t", step, node, outcome, gap.Round(time.Millisecond), ready)
	if out, err := harness.Kubectl(ctx, cfg, "uncordon", node); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !ready {
		return
	}
	s.sum.drains++
	if gap > maxWriteGap {
		s.violate(t, "a drain of %s from a settled cluster stopped writes for %s, want at most %s", node, gap.Round(time.Millisecond), maxWriteGap)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func (s *nodeSchedule) deletePod(ctx context.Context, t *testing.T, cfg *envconf.Config, name string) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns}}
	err := cfg.Client().Resources().Delete(ctx, pod, resources.WithGracePeriod(0))
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

func (s *nodeSchedule) update(ctx context.Context, t *testing.T, cfg *envconf.Config, change func(*v1alpha1.EtcdCluster)) {
	r := cfg.Client().Resources()
	for {
		var c v1alpha1.EtcdCluster
		if err := r.Get(ctx, nodeCluster, s.ns, &c); err != nil {
			t.Fatal(err)
		}
		change(&c)
		err := r.Update(ctx, &c)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
}

// converge waits for the cluster to settle once faults stop; failing
// that is a violation.
func (s *nodeSchedule) converge(ctx context.Context, t *testing.T, cfg *envconf.Config) bool {
	var why string
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		var ok bool
		if ok, why = s.settled(ctx, cfg); ok {
			return true
		}
	}
	s.violate(t, "not converged 5m after faults stopped: %s; pods: %s", why, harness.DescribePods(ctx, cfg, s.ns))
	return false
}

// settled reports whether the cluster is Ready at its generation with a
// Ready pod for each member of spec.size: right after a fault, the
// condition may still be the one from before.
func (s *nodeSchedule) settled(ctx context.Context, cfg *envconf.Config) (bool, string) {
	var c v1alpha1.EtcdCluster
	if err := cfg.Client().Resources().Get(ctx, nodeCluster, s.ns, &c); err != nil {
		return false, err.Error()
	}
	cond := meta.FindStatusCondition(c.Status.Conditions, "Ready")
	ready := cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == c.Generation
	var pods corev1.PodList
	if err := cfg.Client().Resources(s.ns).List(ctx, &pods, resources.WithLabelSelector(labelCluster+"="+nodeCluster)); err != nil {
		return false, err.Error()
	}
	ok := ready && len(pods.Items) == int(c.Spec.Size)
	for _, p := range pods.Items {
		ok = ok && p.DeletionTimestamp == nil && harness.PodReady(&p)
	}
	return ok, fmt.Sprintf("Ready %t at generation %d, %d pods for size %d", ready, c.Generation, len(pods.Items), c.Spec.Size)
}

func (s *nodeSchedule) isSettled(ctx context.Context, cfg *envconf.Config) bool {
	ok, _ := s.settled(ctx, cfg)
	return ok
}

// checkHistory stops the load, reads every key once more and checks the
// history with porcupine.
func (s *nodeSchedule) checkHistory(ctx context.Context, t *testing.T) {
	s.stopLoad()
	s.load.Wait()
	if err := s.history.FinalReads(ctx, s.cli, []string{"k0", "k1", "k2", "k3"}); err != nil {
		s.violate(t, "final reads: %v", err)
	}
	sum, _ := s.history.Check(2 * time.Minute)
	s.logf("clients: %s", sum)
	s.sum.histories++
	s.sum.clientOps += sum.Operations
	if sum.Result == porcupine.Illegal {
		s.violate(t, "the clients' history is not linearizable: %s", sum)
	}
}

// teardown deletes the cluster (its final backup included) and the
// namespace, and prints the schedule.
func (s *nodeSchedule) teardown(ctx context.Context, t *testing.T, cfg *envconf.Config) {
	if s.stopLoad != nil {
		s.stopLoad()
		s.load.Wait()
	}
	if s.probe != nil {
		s.probe.close()
	}
	if s.cli != nil {
		_ = s.cli.Close()
	}
	if s.ns != "" {
		r := cfg.Client().Resources()
		c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: nodeCluster, Namespace: s.ns}}
		if err := r.Delete(ctx, c); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		harness.WaitFor(ctx, t, "EtcdCluster "+s.ns+"/"+nodeCluster+" to be deleted", 3*time.Minute, 2*time.Second, func(ctx context.Context) (bool, string) {
			err := r.Get(ctx, nodeCluster, s.ns, c)
			return apierrors.IsNotFound(err), fmt.Sprintf("%v; pods: %s", err, harness.DescribePods(ctx, cfg, s.ns))
		})
		s.logf("deleted")
		if err := r.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}); err != nil {
			t.Error(err)
		}
	}
	t.Logf("seed %d schedule %d:\n%s", s.seed, s.i, strings.Join(s.log, "\n"))
	if t.Failed() {
		t.Logf("operator log (end):\n%s", operator.Log())
	}
}

package controller_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
	"github.com/opkit-dev/opkit/statusutil"
)

var (
	campaignSeed      = flag.Uint64("campaign.seed", 1, "seed of the fault campaign; the same seed runs the same schedules")
	campaignSchedules = flag.Int("campaign.schedules", 40, "how many schedules TestFaultCampaign runs on etcd processes, besides the regressions")
	campaignFake      = flag.Int("campaign.fakeschedules", 30, "how many schedules TestFaultCampaignFake runs on the fake etcd, besides the regressions")
	campaignSteps     = flag.Int("campaign.steps", 8, "operations and faults per schedule")
	campaignParallel  = flag.Int("campaign.parallel", 4*runtime.GOMAXPROCS(0), "how many schedules on etcd processes run at once")
	campaignPause     = flag.Bool("campaign.pause", false, "draw the fault that pauses a member (SIGSTOP) on etcd processes")
	campaignPartition = flag.Bool("campaign.partition", true, "draw the fault that cuts a member off from its peers on etcd processes")
	campaignTLSEvery  = flag.Int("campaign.tls", 10, "one schedule in this many runs with spec.tls and CA rotations (0: none)")
)

// TestFaultCampaign drives the operator through seeded random schedules of
// operations and faults while clients write and read, and checks after
// every step: no backup or cluster lacks an acknowledged write, the
// clients' history is linearizable (porcupine), the members never form
// two clusters, no member restarts under its ID on a claim other than its
// data's, a drain through the disruption budget keeps a quorum of voters,
// and the cluster converges and deletes once faults stop.
//
// etcd runs as real processes, which the campaign's kubelet starts from
// the operator's pods.
//
// A failure names its seed and schedule and prints the schedule; it
// replays the same schedule with -run 'TestFaultCampaign/<n>$'
// -campaign.seed=<seed> (etcd's own timing aside).
func TestFaultCampaign(t *testing.T) {
	t.Parallel()
	campaign(t, "process", *campaignSchedules, *campaignParallel)
}

// regressions are seed 1's schedules that failed with a fixed defect
// reverted (docs/fault-campaign.md): the campaign runs them whatever its
// count, so that make test keeps them at half the schedules.
var regressions = map[string][]int{
	"process": {8, 10, 12, 24, 30, 38, 48, 59, 71, 79},
	"fake":    {8, 12, 82, 153, 168, 175},
}

// TestFaultCampaignFake is TestFaultCampaign on the fake etcd, whose
// members also lag behind the writes for as many passes as a schedule
// says; its schedules use no wall clock and replay exactly.
func TestFaultCampaignFake(t *testing.T) {
	t.Parallel()
	campaign(t, "fake", *campaignFake, runtime.GOMAXPROCS(0))
}

func campaign(t *testing.T, kind string, schedules, parallel int) {
	seed := *campaignSeed
	// The fake campaign runs beside the real controllers that decide
	// where a deleted cluster's data goes, and draws how it is deleted.
	real := kind == "fake"
	if real {
		withGuardPolicy(t)
		env.StartControllerManager(t)
	}
	var ops, faults, backups, restores, passes, histories, clientOps, violations atomic.Int64
	var deletionsMu sync.Mutex
	deletions := map[string]int{}
	indices := make([]int, 0, schedules)
	for i := range schedules {
		indices = append(indices, i)
	}
	if seed == 1 {
		for _, i := range regressions[kind] {
			if i >= schedules {
				indices = append(indices, i)
			}
		}
	}
	start := time.Now()
	t.Cleanup(func() {
		fmt.Printf("fault campaign (%s etcd): seed %d, %d schedules, %d operations, %d faults, %d operator passes, %d backups, %d restored clusters and %d client histories (%d client operations) checked, deletions %v, %d violations in %s\n",
			kind, seed, len(indices), ops.Load(), faults.Load(), passes.Load(), backups.Load(), restores.Load(), histories.Load(), clientOps.Load(), deletions, violations.Load(), time.Since(start).Round(time.Second))
	})
	// Schedules on etcd processes mostly wait for etcd: more run at once
	// than -parallel allows tests.
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for _, i := range indices {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			t.Run(fmt.Sprintf("%03d", i), func(t *testing.T) {
				s := newSchedule(t, kind, seed, i)
				s.real = real
				s.regression = seed == 1 && slices.Contains(regressions[kind], i)
				// The real disruption controller counts the budgets
				// that the operator's restarts and the drains evict
				// through.
				s.g.realControllers.Store(real)
				s.run(*campaignSteps)
				if testing.Verbose() {
					t.Logf("schedule:\n  %s", strings.Join(s.log, "\n  "))
				}
				ops.Add(int64(s.ops))
				faults.Add(int64(s.faults))
				passes.Add(int64(s.passes))
				backups.Add(int64(s.backups))
				restores.Add(int64(s.restores))
				histories.Add(int64(s.histories))
				clientOps.Add(int64(s.clientOps))
				if s.deletion != "" {
					deletionsMu.Lock()
					deletions[s.deletion]++
					deletionsMu.Unlock()
				}
				if len(s.violations) > 0 {
					violations.Add(int64(len(s.violations)))
					t.Errorf("seed %d schedule %d: %d violations:\n  %s\nschedule:\n  %s\nreplay: go test ./internal/controller -run '%s/%03d$' -campaign.seed=%d",
						seed, i, len(s.violations), strings.Join(s.violations, "\n  "), strings.Join(s.log, "\n  "), t.Name()[:strings.LastIndex(t.Name(), "/")], i, seed)
				}
			})
		})
	}
	wg.Wait()
}

// schedule is one run of the campaign on a cluster of its own.
type schedule struct {
	g *rig
	r *rand.Rand
	// rx draws what later versions of the campaign added (scheduled
	// backups, version changes), so that the seeds named for earlier
	// defects draw the same operations and faults from r; rt likewise
	// TLS and CA rotations, rr restores into a new cluster.
	rx, rt, rr *rand.Rand
	// rd draws how the cluster is deleted, when real is set: the real
	// kube-controller-manager runs (garbage collector, namespaces). rk
	// draws the operator's deaths inside a pass or a backup, rp the
	// member stranded for good (stuck: its pod, Pending until the
	// liveness check at the end).
	rd, rk, rp *rand.Rand
	stuck      string
	// regression is set for a schedule named for an earlier defect: it
	// draws no deaths and strands no member, so that it replays as it
	// did when it found the defect.
	regression bool
	real       bool
	name       string
	index      int
	step       int
	etcd       campaignEtcd
	// proc is etcd when it runs as processes, nil with the fake; load
	// is then the clients' history, cli a client of every member.
	// restoring runs the members of a cluster being restored.
	proc, restoring *procEtcd
	load            *load
	cli             *clientv3.Client
	// acked are the writes etcd acknowledged.
	acked map[string]string
	// claimOf is the claim each member ID first started on: its data.
	claimOf map[uint64]types.UID
	// paused is how many more passes a paused member (by pod) stays so;
	// cut likewise for a member cut from its peers.
	paused, cut map[string]int
	// catchUp is how many passes a lagging member (by peer URL) takes to
	// apply every write.
	catchUp map[string]int
	// stale is the claim list the operator's cache still shows while
	// staleFor passes last.
	stale    *corev1.PersistentVolumeClaimList
	staleFor int
	// scheduled is set when spec.backup.schedule is; lastScheduled is
	// the last scheduled backup checked.
	scheduled bool
	// scheduledOp is the last status.backupOperation seen, and
	// scheduledAcked the writes acked before the pass that recorded it.
	scheduledOp    string
	scheduledAcked map[string]string
	lastScheduled  string
	// versions is set when version changes are drawn; version is the
	// last spec.version the operator accepts, refused one it refuses.
	versions         bool
	version, refused string
	// tls is set for a TLS schedule.
	tls *campaignTLS
	// base is the cluster the etcd runner builds members' URLs from.
	base *v1alpha1.EtcdCluster
	// calm is set once faults stop: new learners no longer lag.
	calm    bool
	deleted bool
	// deletion is how the cluster was deleted (deletionModes).
	deletion string
	// cluster is the cluster as created, for its members' URLs.
	cluster *v1alpha1.EtcdCluster

	histories, clientOps int
	started              time.Time
	last, lastLine       string
	repeats              int
	ops, faults, backups int
	restores             int
	passes               int
	log                  []string
	violations           []string
}

func newSchedule(t *testing.T, kind string, seed uint64, i int) *schedule {
	g := newRig(t)
	s := &schedule{g: g, r: rand.New(rand.NewPCG(seed, uint64(i))), rx: rand.New(rand.NewPCG(seed, ^uint64(i))),
		rt: rand.New(rand.NewPCG(^seed, uint64(i))), rr: rand.New(rand.NewPCG(^seed, ^uint64(i))),
		rd: rand.New(rand.NewPCG(seed^0x9e3779b97f4a7c15, uint64(i))), rk: rand.New(rand.NewPCG(seed^0x5851f42d4c957f2d, ^uint64(i))),
		rp: rand.New(rand.NewPCG(seed^0x2545f4914f6cdd1d, uint64(i))), name: "c", index: i, acked: map[string]string{},
		claimOf: map[uint64]types.UID{}, catchUp: map[string]int{}, paused: map[string]int{}, cut: map[string]int{}, started: time.Now()}
	g.cache = interceptor.NewClient(g.c.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if l, ok := list.(*corev1.PersistentVolumeClaimList); ok && s.stale != nil {
				s.stale.DeepCopyInto(l)
				return nil
			}
			return cl.List(ctx, list, opts...)
		},
	})
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: g.ns}}
	s.base = c
	if kind == "fake" {
		s.etcd = fakeEtcd{f: g.fake, c: c}
	} else {
		s.proc = newProcEtcd(t, c, i)
		s.etcd = s.proc
		s.cli = s.proc.raw()
		g.factory = s.proc.factory()
	}
	g.startOperator()
	return s
}

// logf logs one line of the schedule; a line like the last one only
// counts.
func (s *schedule) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if line == s.last && len(s.log) > 0 {
		s.repeats++
		s.log[len(s.log)-1] = fmt.Sprintf("%s (%d times)", s.lastLine, s.repeats+1)
		return
	}
	s.last, s.repeats = line, 0
	s.lastLine = fmt.Sprintf("%d %5.1fs: %s", s.step, time.Since(s.started).Seconds(), line)
	s.log = append(s.log, s.lastLine)
}

func (s *schedule) violate(format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf("step %d: ", s.step)+fmt.Sprintf(format, args...))
}

func (s *schedule) run(steps int) {
	g := s.g
	size := []int32{3, 5}[s.r.IntN(2)]
	g.mountPVCStore("backups")
	c := cluster(s.name, size)
	c.Spec.QuotaBackendBytes = ptr.To(resource.MustParse(campaignQuota))
	c.Spec.Backup = &v1alpha1.BackupSpec{StoreRef: v1alpha1.StoreReference{PVCName: "backups"}}
	if s.scheduled = s.rx.IntN(2) == 0; s.scheduled {
		c.Spec.Backup.Schedule, c.Spec.Backup.Retention = "@every 1h", 2
	}
	s.versions, s.version = s.rx.IntN(2) == 0, c.Spec.Version
	if *campaignTLSEvery > 0 && s.rt.IntN(*campaignTLSEvery) == 0 {
		c.Spec.TLS = s.startTLS()
	}
	g.create(c)
	s.cluster = c
	s.logf("create size %d, version %s, scheduled backups %q, version changes %t, TLS %t", size, c.Spec.Version, c.Spec.Backup.Schedule, s.versions, s.tls != nil)
	s.calm = true
	s.converge()
	s.calm = false
	if s.proc != nil {
		s.load = s.proc.startLoad()
	}
	for s.step = 1; s.step <= steps && !s.deleted; s.step++ {
		s.write()
		s.act()
		for range s.r.IntN(4) {
			s.pass()
		}
	}
	if s.deleted {
		return
	}
	s.step = 0
	s.logf("faults stop")
	if s.refused != "" {
		s.changeVersion()
	}
	if s.tls != nil && s.tls.refused >= 0 {
		s.rotateCA()
	}
	s.calm = true
	g.crash.restart()
	s.stale, s.staleFor = nil, 0
	for peer := range s.catchUp {
		g.fake.CatchUp(peer)
	}
	for name := range s.paused {
		s.proc.pause(name, false)
		delete(s.paused, name)
	}
	for name := range s.cut {
		s.heal(name)
	}
	if s.stuck != "" {
		s.checkLiveness()
	}
	s.converge()
	s.write()
	s.checkClients(true)
	if !s.regression && s.rk.IntN(2) == 0 {
		s.armCrash()
	}
	s.deleteCluster()
}

// armCrash makes the operator die at a write to come, of a pass or of a
// backup's store, before or after sending it (rig.crash).
func (s *schedule) armCrash() {
	kind, n, after := "pass", s.rk.IntN(5), s.rk.IntN(2) == 0
	if s.rk.IntN(3) == 0 {
		kind, n = "backup", s.rk.IntN(3)
	}
	s.logf("the operator dies at the %s write of a %s to come, %s", ordinal(n+1), kind, map[bool]string{true: "after sending it", false: "before sending it"}[after])
	s.g.crash.arm(kind, n, after)
}

func ordinal(n int) string {
	switch n {
	case 1:
		return "1st"
	case 2:
		return "2nd"
	case 3:
		return "3rd"
	}
	return fmt.Sprintf("%dth", n)
}

// checkClients checks the clients' history of a schedule on etcd
// processes and, with final, that the cluster holds every acknowledged
// write.
func (s *schedule) checkClients(final bool) {
	if s.load == nil {
		return
	}
	sum, err := s.load.finish(s.g.t.Context(), s.cli, final)
	s.load = nil
	s.logf("clients: %s", sum)
	s.histories++
	s.clientOps += sum.Operations
	if err != nil {
		s.violate("final reads: %v", err)
	}
	// Unknown is porcupine out of time, not a violation: it is logged.
	if sum.Result == porcupine.Illegal {
		s.violate("the clients' history is not linearizable: %s", sum)
	}
	if !final {
		return
	}
	ctx, cancel := context.WithTimeout(s.g.t.Context(), 10*time.Second)
	defer cancel()
	resp, err := s.cli.Get(ctx, "/campaign/", clientv3.WithPrefix())
	if err != nil {
		s.violate("reading the acknowledged writes: %v", err)
		return
	}
	got := map[string]string{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	s.checkWrites("the cluster", s.acked, got)
}

// act carries out one random operation or fault.
func (s *schedule) act() {
	g := s.g
	pods := g.names(&corev1.PodList{})
	switch k := s.r.IntN(12); {
	case k == 0:
		s.ops++
		c := g.get(s.name)
		c.Spec.Size = []int32{1, 3, 5}[s.r.IntN(3)]
		s.logf("scale to %d", c.Spec.Size)
		s.update(c)
	case k == 1:
		s.ops++
		c := g.get(s.name)
		if c.Spec.PodTemplate.Annotations == nil {
			c.Spec.PodTemplate.Annotations = map[string]string{}
		}
		c.Spec.PodTemplate.Annotations["campaign/roll"] = fmt.Sprint(s.step)
		s.logf("podTemplate change (rolling restart)")
		s.update(c)
	case k == 2:
		s.ops++
		s.backup()
	case k == 3 && s.r.IntN(3) == 0:
		s.ops++
		s.deleteCluster()
	case k == 4 && len(pods) > 0:
		s.faults++
		p := pods[s.r.IntN(len(pods))]
		s.logf("pod %s killed", p)
		s.killPod(p, true)
	case k == 5 && len(pods) > 0 && s.intact() && s.voters() >= 3:
		// Data loss beyond one member at a time is beyond what the
		// operator recovers from by itself: one only once converged.
		s.faults++
		p := pods[s.r.IntN(len(pods))]
		lag := s.r.IntN(3)
		s.logf("pod %s and its claim lost; the operator's cache sees the claim for %d more passes", p, lag)
		s.loseClaim(p, lag)
	case k == 6:
		s.faults++
		s.logf("operator restarted")
		g.startOperator()
	case k == 7 && s.proc == nil && len(s.followers()) > 0:
		s.faults++
		f := s.followers()
		p := f[s.r.IntN(len(f))]
		passes := 1 + s.r.IntN(6)
		s.logf("member %s falls behind the writes for %d passes", p, passes)
		peer := controller.PeerURL(s.cluster, p)
		g.fake.SetApplied(peer, g.fake.Revision())
		s.catchUp[peer] = passes
	case k == 7 && *campaignPartition && s.proc != nil && s.tls == nil && len(pods) > 0:
		s.faults++
		p := pods[s.r.IntN(len(pods))]
		passes := 1 + s.r.IntN(3)
		s.logf("member %s cut from its peers for %d passes", p, passes)
		s.proc.partition(p, true)
		s.cut[p] = max(s.cut[p], passes)
	case k == 8:
		s.faults++
		s.drain()
	case k == 9 && len(s.followers()) > 0:
		s.faults++
		s.moveLeader()
	case k == 10 && s.intact():
		s.faults++
		s.noSpace()
	case k == 11 && *campaignPause && s.proc != nil && len(pods) > 0:
		s.faults++
		p := pods[s.r.IntN(len(pods))]
		passes := 1 + s.r.IntN(6)
		if !s.proc.pause(p, true) {
			s.logf("member %s not paused: it does not run", p)
			break
		}
		s.logf("member %s paused (SIGSTOP) for %d passes", p, passes)
		s.paused[p] = max(s.paused[p], passes)
	default:
		switch {
		case s.scheduled && s.rx.IntN(2) == 0:
			// Pods age too: start timeouts may run out.
			s.ops++
			s.logf("an hour passes: a scheduled backup is due")
			g.clock.advance(time.Hour + time.Minute)
		case s.versions && s.rx.IntN(2) == 0:
			s.ops++
			s.changeVersion()
		case s.tls != nil && s.rt.IntN(2) == 0:
			s.ops++
			s.rotateCA()
		case !s.regression && s.rk.IntN(2) == 0:
			s.faults++
			s.armCrash()
		case !s.regression && s.proc == nil && s.stuck == "" && s.intact() && s.voters() >= 3 && s.rp.IntN(2) == 0:
			s.faults++
			s.strand()
		default:
			s.logf("client writes only")
		}
	}
}

// changeVersion upgrades spec.version by a minor version, or sets one the
// operator refuses (a downgrade, a skipped minor version), under which it
// must still heal the cluster; the next change, or faults stopping, puts
// the accepted one back. Process members run bin/etcd whatever the
// version: an upgrade is a roll in the operator's order and gating.
func (s *schedule) changeVersion() {
	c := s.g.get(s.name)
	switch {
	case s.refused != "":
		c.Spec.Version, s.refused = s.version, ""
		s.logf("spec.version back to %s", s.version)
	case s.version == "3.6.16" && s.rx.IntN(2) == 0:
		c.Spec.Version, s.version = "3.7.0", "3.7.0"
		s.logf("upgrade to %s", s.version)
	default:
		s.refused = []string{"3.5.26", "3.9.0"}[s.rx.IntN(2)]
		c.Spec.Version = s.refused
		s.logf("spec.version %s, which the operator refuses", s.refused)
	}
	s.update(c)
}

// heal ends the cut between pod's member and its peers.
func (s *schedule) heal(pod string) {
	behind := s.proc.partition(pod, false)
	delete(s.cut, pod)
	s.logf("member %s rejoins its peers, %d revisions behind", pod, behind)
}

func (s *schedule) update(c *v1alpha1.EtcdCluster) {
	if err := s.g.c.Update(s.g.t.Context(), c); err != nil {
		s.g.t.Fatal(err)
	}
}

// write puts keys as a client would; those etcd acknowledges are acked.
func (s *schedule) write() {
	ctx, cancel := context.WithTimeout(s.g.t.Context(), 5*time.Second)
	defer cancel()
	var opts []etcdclient.DialOption
	if s.tls != nil {
		opts = append(opts, etcdclient.WithTLS(s.tls.client))
	}
	ec, err := s.etcd.factory().New(ctx, s.etcd.endpoints(), opts...)
	if err != nil {
		return
	}
	defer func() { _ = ec.Close() }()
	for i := range 3 {
		k := fmt.Sprintf("/campaign/%02d-%d", s.step, i)
		// A member cut from its peers refuses at once (no leader).
		pctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), 2*time.Second)
		err := ec.Put(pctx, []etcdclient.KeyValue{{Key: []byte(k), Value: []byte(k)}})
		cancel()
		if err == nil {
			s.acked[k] = k
		}
	}
}

// pass runs one operator pass and then the kubelet.
func (s *schedule) pass() {
	var acked map[string]string
	if s.scheduled {
		acked = maps.Clone(s.acked)
	}
	s.reconcile(s.name)
	if s.scheduled {
		s.checkScheduled(acked)
	}
	if s.staleFor > 0 {
		if s.staleFor--; s.staleFor == 0 {
			s.stale = nil
		}
	}
	for name := range s.paused {
		if s.paused[name]--; s.paused[name] <= 0 {
			s.proc.pause(name, false)
			delete(s.paused, name)
		}
	}
	for name := range s.cut {
		if s.cut[name]--; s.cut[name] <= 0 {
			s.heal(name)
		}
	}
	for peer := range s.catchUp {
		if s.catchUp[peer]--; s.catchUp[peer] <= 0 {
			s.g.fake.CatchUp(peer)
			delete(s.catchUp, peer)
		}
	}
	s.kubelet()
}

// reconcile runs one operator pass of cluster name. Failed passes are
// the operator's to retry.
func (s *schedule) reconcile(name string) {
	g := s.g
	s.passes++
	// A scheduled backup the pass launched ends before anything else
	// happens, so that a schedule replays exactly.
	res, died, err := g.passOrDie(name)
	for _, e := range g.drain() {
		s.logf("  operator: %s", e)
	}
	if died != "" {
		s.logf("  operator died at %s, restarted", died)
	}
	if err != nil {
		s.logf("  pass failed: %v", err)
	}
	if s.proc != nil && (err != nil || res.RequeueAfter > 0) {
		// Real etcd takes time (an election, the 5s etcd wants every
		// voter connected before a member is added): wait a little as
		// the operator's queue would.
		time.Sleep(min(res.RequeueAfter, 250*time.Millisecond))
		if err != nil {
			time.Sleep(250 * time.Millisecond)
		}
	}
}

// kubelet stops the members whose pods are gone, starts the pods not yet
// running (again, after a crash) and reports their readiness. A pod that
// starts a member etcd knows as started must be on the claim that member
// first started on: another is empty, and etcd would take the registered
// ID with an empty log. With the fake, a new learner starts behind the
// writes half of the time and catches up within 6 passes.
func (s *schedule) kubelet() {
	g := s.g
	ctx := g.t.Context()
	var pods corev1.PodList
	if err := g.c.List(ctx, &pods, client.InNamespace(g.ns)); err != nil {
		g.t.Fatal(err)
	}
	// Pods of a restored cluster deleted before stay: envtest runs no
	// garbage collector.
	live := map[string]*corev1.Pod{}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && s.clusterOf(p) != nil {
			live[p.Name] = p
		}
	}
	s.etcd.reap(live)
	s.checkTrust(live)
	for _, e := range []*procEtcd{s.proc, s.restoring} {
		if e == nil {
			continue
		}
		if err := e.oneCluster(); err != nil {
			s.violate("two clusters: %v", err)
		}
	}
	if s.restoring != nil {
		s.restoring.reap(live)
	}
	for _, name := range slices.Sorted(maps.Keys(live)) {
		p := live[name]
		e := s.etcd
		if s.clusterOf(p) != s.cluster {
			e = s.restoring
		}
		if p.Status.Phase == corev1.PodRunning && e.alive(name) {
			if pe, ok := e.(*procEtcd); ok {
				pe.refresh(p)
			}
			s.setReady(p, e.ready(name))
			continue
		}
		if name == s.stuck {
			continue // Pending: its node is gone
		}
		claim := s.claimUID(p)
		s.checkClaim(e, s.clusterOf(p), name, claim)
		s.setReady(p, e.start(p, string(claim)))
	}
}

// clusterOf is the cluster of pod p: nil for a restored cluster
// deleted before.
func (s *schedule) clusterOf(p *corev1.Pod) *v1alpha1.EtcdCluster {
	switch c := p.Labels[controller.LabelCluster]; {
	case c == s.name:
		return s.cluster
	case s.restoring != nil && c == s.restoring.c.Name:
		return s.restoring.c
	}
	return nil
}

// checkClaim checks that member name of cluster c, run by e, starts on
// the claim its data is on.
func (s *schedule) checkClaim(e campaignEtcd, c *v1alpha1.EtcdCluster, name string, claim types.UID) {
	peer := controller.PeerURL(c, name)
	for _, m := range e.members() {
		if m.PeerURLs[0] != peer {
			continue
		}
		switch first, ok := s.claimOf[m.ID]; {
		case !ok:
			s.claimOf[m.ID] = claim
			if s.proc == nil && m.IsLearner && !s.calm && s.r.IntN(2) == 0 {
				s.g.fake.SetApplied(peer, 0)
				s.catchUp[peer] = 1 + s.r.IntN(6)
			}
		case first != claim:
			s.violate("member %s (ID %x) started on claim %s, not on the claim %s holding its data: an empty member under a registered ID", name, m.ID, claim, first)
		}
	}
}

// setReady marks pod p Running, and Ready as ready says.
func (s *schedule) setReady(p *corev1.Pod, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	if p.Status.Phase == corev1.PodRunning && isReady(p) == ready {
		return
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	// Gone or changed meanwhile (the garbage collector deleted it, or took
	// an owner off): the next pass's kubelet looks again, as a kubelet's
	// status update would fail and be made again.
	if err := s.g.c.Status().Update(s.g.t.Context(), p); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		s.g.t.Fatal(err)
	}
}

// claimUID is the UID of the data claim pod mounts, "" if none exists.
func (s *schedule) claimUID(p *corev1.Pod) types.UID {
	for _, v := range p.Spec.Volumes {
		if v.Name == "data" && v.PersistentVolumeClaim != nil {
			var claim corev1.PersistentVolumeClaim
			if err := s.g.c.Get(s.g.t.Context(), client.ObjectKey{Namespace: s.g.ns, Name: v.PersistentVolumeClaim.ClaimName}, &claim); err == nil {
				return claim.UID
			}
		}
	}
	return ""
}

// voters counts etcd's voting members.
func (s *schedule) voters() int {
	n := 0
	for _, m := range s.etcd.members() {
		if !m.IsLearner {
			n++
		}
	}
	return n
}

// followers are the started members other than the leader, by name: a
// leader has applied what it committed.
func (s *schedule) followers() []string {
	var out []string
	lead := s.etcd.leader()
	for _, m := range s.etcd.members() {
		if m.Name != "" && m.ID != lead && s.cut[m.Name] == 0 {
			out = append(out, m.Name)
		}
	}
	slices.Sort(out)
	return out
}

// intact reports whether the cluster is converged and every etcd member
// runs on its claim: status alone may predate the last fault.
func (s *schedule) intact() bool {
	if !s.converged() {
		return false
	}
	for _, m := range s.etcd.members() {
		var p corev1.Pod
		err := s.g.c.Get(s.g.t.Context(), client.ObjectKey{Namespace: s.g.ns, Name: m.Name}, &p)
		if err != nil || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || s.claimUID(&p) == "" {
			return false
		}
	}
	return true
}

// converged reports whether the cluster is Ready at its generation.
func (s *schedule) converged() bool { return s.ready(s.name) }

// ready reports whether cluster name is Ready at its generation.
func (s *schedule) ready(name string) bool {
	c := s.g.get(name)
	return statusutil.IsFalse(c, v1alpha1.ConditionProgressing) && c.Status.ObservedGeneration == c.Generation &&
		statusutil.IsTrue(c, v1alpha1.ConditionAvailable) && statusutil.IsTrue(c, statusutil.ConditionReady)
}

// killPod deletes pod name, of the schedule's cluster or the one being
// restored, and stops its member: killed when crash is set (SIGKILL),
// else as a kubelet stops a deleted pod. With the fake, a leader's
// followers elect another.
func (s *schedule) killPod(name string, crash bool) {
	if err := s.g.c.Delete(s.g.t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.g.ns}}); client.IgnoreNotFound(err) != nil {
		s.g.t.Fatal(err)
	}
	if s.restoring != nil && strings.HasPrefix(name, s.restoring.c.Name+"-") {
		s.restoring.stop(name, crash)
		return
	}
	lead := s.etcd.leader()
	s.etcd.stop(name, crash)
	if s.proc != nil {
		return
	}
	for _, m := range s.etcd.members() {
		if m.Name == name && m.ID == lead {
			s.moveLeader()
		}
	}
}

// moveLeader makes another running, caught-up voting member the leader,
// as an election does.
func (s *schedule) moveLeader() {
	var voters []string
	lead := s.etcd.leader()
	for _, m := range s.etcd.members() {
		_, lagging := s.catchUp[m.PeerURLs[0]]
		if !m.IsLearner && m.Name != "" && m.ID != lead && !lagging && s.running(m.Name) {
			voters = append(voters, m.Name)
		}
	}
	if len(voters) == 0 {
		return
	}
	slices.Sort(voters)
	name := voters[s.r.IntN(len(voters))]
	s.logf("leadership moves to %s", name)
	if err := s.etcd.moveLeader(name); err != nil {
		s.logf("  moving leadership: %v", err)
	}
}

// running reports whether pod name exists and runs.
func (s *schedule) running(name string) bool {
	var p corev1.Pod
	err := s.g.c.Get(s.g.t.Context(), client.ObjectKey{Namespace: s.g.ns, Name: name}, &p)
	return err == nil && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning
}

// loseClaim deletes pod name and its claim for good; the operator's cache
// lists the claim for lag more passes.
func (s *schedule) loseClaim(name string, lag int) {
	g := s.g
	if lag > 0 {
		var claims corev1.PersistentVolumeClaimList
		if err := g.c.List(g.t.Context(), &claims, client.InNamespace(g.ns)); err != nil {
			g.t.Fatal(err)
		}
		s.stale, s.staleFor = &claims, lag
	}
	err := g.c.Delete(g.t.Context(), &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name + "-data", Namespace: g.ns}})
	if client.IgnoreNotFound(err) != nil {
		g.t.Fatal(err)
	}
	g.claimGone(name)
	s.killPod(name, true)
}

// drain checks that no eviction the disruption budget allows takes the
// healthy voting members below their quorum, then evicts one pod it
// allows, as draining that pod's node does.
func (s *schedule) drain() {
	evictable, healthy, voters := s.g.drainNode(s.name, s.etcd.members())
	if s.real {
		s.evict(evictable, healthy, voters)
		return
	}
	s.logf("drain: the budget lets %d of %d healthy voting members (of %d) go", evictable, healthy, voters)
	if evictable > 0 && healthy-evictable < membership.Quorum(voters) {
		s.violate("a drain through the disruption budget may evict %d of %d healthy voting members, leaving fewer than the quorum %d of %d",
			evictable, healthy, membership.Quorum(voters), voters)
	}
	if evictable > 0 {
		if f := s.followers(); len(f) > 0 {
			p := f[s.r.IntN(len(f))]
			s.logf("pod %s evicted", p)
			s.killPod(p, false)
		}
	}
}

// evict checks, as drain does, what the budget lets go in the worst
// case, then asks the Eviction API to evict a pod rd draws, as kubectl
// drain does: the real disruption controller's status of the budget
// decides, and an evicted pod's member stops as a deleted pod's does.
func (s *schedule) evict(evictable, healthy, voters int) {
	g := s.g
	if evictable > 0 && healthy-evictable < membership.Quorum(voters) {
		s.violate("a drain through the disruption budget may evict %d of %d healthy voting members, leaving fewer than the quorum %d of %d",
			evictable, healthy, membership.Quorum(voters), voters)
	}
	pods := g.names(&corev1.PodList{})
	if len(pods) == 0 {
		return
	}
	p := pods[s.rd.IntN(len(pods))]
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p, Namespace: g.ns}}
	err := g.c.SubResource("eviction").Create(g.t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p, Namespace: g.ns}}, ev)
	switch {
	case err == nil:
		s.logf("drain: pod %s evicted through the Eviction API (the budget's worst case lets %d of %d healthy voting members go)", p, evictable, healthy)
		s.killPod(p, false)
	case apierrors.IsTooManyRequests(err):
		s.logf("drain: the budget refused to evict pod %s", p)
	case apierrors.IsNotFound(err):
		s.logf("drain: pod %s already gone", p)
	default:
		g.t.Fatalf("evicting pod %s: %v", p, err)
	}
}

// backup takes an on-demand backup; one that succeeds must hold every
// write acknowledged before it.
func (s *schedule) backup() {
	g := s.g
	want := maps.Clone(s.acked)
	name := fmt.Sprintf("b%d", s.step)
	g.createBackup(name, v1alpha1.EtcdBackupSpec{ClusterName: s.name, StoreRef: v1alpha1.StoreReference{PVCName: "backups"}})
	if err := g.backupPass(name); err != nil {
		s.logf("on-demand backup %s: %v", name, err)
		return
	}
	b := g.getBackup(name)
	s.logf("on-demand backup %s: %s", name, b.Status.Phase)
	if b.Status.Phase != v1alpha1.BackupSucceeded {
		return
	}
	for _, m := range g.storedBackups(s.name) {
		if m.ID != b.Status.BackupID {
			continue
		}
		keys := g.backupKeys(s.name, m)
		s.checkBackup("on-demand backup "+name, want, keys)
		// The fake has one keyspace: a restored cluster would share it.
		if s.proc != nil && s.tls == nil && s.rr.IntN(2) == 0 {
			s.ops++
			s.restore(name, keys)
		}
	}
}

// checkScheduled checks a scheduled backup that a pass recorded in
// status.backup against the writes acked before the pass that recorded
// its operation.
func (s *schedule) checkScheduled(acked map[string]string) {
	var c v1alpha1.EtcdCluster
	if err := s.g.c.Get(s.g.t.Context(), client.ObjectKey{Namespace: s.g.ns, Name: s.name}, &c); err != nil {
		return
	}
	// The backup runs after the pass that records its operation: it
	// must hold every write acked before that pass.
	if op := c.Status.BackupOperation; op != nil && op.ID != s.scheduledOp {
		s.scheduledOp, s.scheduledAcked = op.ID, acked
	}
	id := c.Status.Backup.LastBackupID
	if id == "" || id == s.lastScheduled {
		return
	}
	if s.scheduledAcked != nil {
		acked = s.scheduledAcked
	}
	s.lastScheduled = id
	for _, m := range s.g.storedBackups(s.name) {
		if m.ID == id {
			s.logf("  scheduled backup %s at revision %s", id, m.Snapshot.ConsistencyPoint)
			s.checkBackup("scheduled backup "+id, acked, s.g.backupKeys(s.name, m))
			return
		}
	}
	s.violate("status.backup.lastBackupID %s is not in the store", id)
}

func (s *schedule) checkBackup(what string, want, got map[string]string) {
	s.backups++
	s.checkWrites(what, want, got)
}

// checkWrites checks that got holds every write in want.
func (s *schedule) checkWrites(what string, want, got map[string]string) {
	var missing []string
	for k := range want {
		if _, ok := got[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		s.violate("%s lacks %d of %d acknowledged writes, first %s", what, len(missing), len(want), missing[0])
	}
}

// deleteCluster deletes the cluster, runs passes until it is gone, and checks
// its final backup.
// deletionModes are how a cluster is deleted: kubectl delete
// --cascade=background|foreground|orphan (Argo CD prunes in the
// foreground), or its namespace.
var deletionModes = []string{string(metav1.DeletePropagationBackground), string(metav1.DeletePropagationForeground),
	string(metav1.DeletePropagationOrphan), "Namespace"}

// deleteCluster deletes the cluster, in the background or, with the real
// controllers, as rd draws, and checks that it goes with a final backup
// holding every acknowledged write and, with the real controllers, that
// nothing of it is left.
func (s *schedule) deleteCluster() {
	g := s.g
	s.checkClients(false)
	want := maps.Clone(s.acked)
	c := g.get(s.name)
	s.deletion = deletionModes[0]
	if s.real {
		s.deletion = deletionModes[s.rd.IntN(len(deletionModes))]
	}
	s.logf("deleted: %s", s.deletion)
	claims := g.claimsOf(s.name)
	var err error
	if s.deletion == "Namespace" {
		err = g.c.Delete(g.t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: g.ns}})
	} else {
		err = g.c.Delete(g.t.Context(), c, client.PropagationPolicy(metav1.DeletionPropagation(s.deletion)))
	}
	if err != nil {
		g.t.Fatal(err)
	}
	s.deleted = true
	deadline := time.Now().Add(s.wallBudget())
	passes := s.budget(20)
	if s.real {
		// The controllers act on their own time: the namespace
		// controller comes back after a refused pod deletion with a
		// growing delay.
		deadline, passes = time.Now().Add(2*time.Minute), math.MaxInt
	}
	for i := 0; i < passes && g.exists(c) && time.Now().Before(deadline); i++ {
		s.pass()
		if s.real {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if g.exists(c) {
		s.violate("the cluster is not deleted (%s) within its passes and time: %+v", s.deletion, g.get(s.name).Status.Conditions)
		return
	}
	final := false
	for _, m := range g.storedBackups(s.name) {
		if m.Snapshot.Extra[controller.ExtraTrigger] == controller.TriggerFinal {
			s.checkBackup("the final backup", want, g.backupKeys(s.name, m))
			final = true
			break
		}
	}
	if !final {
		s.violate("the cluster was deleted (%s) without a final backup", s.deletion)
	}
	if s.real {
		s.checkNothingLeft(claims)
	}
}

// checkNothingLeft checks that the real controllers finish the deleted
// cluster's deletion within a minute (rig.residue: every object and the
// guard gone, or under Orphan the guard gone and the rest left ownerless),
// and its namespace goes when that was deleted.
func (s *schedule) checkNothingLeft(claims []string) {
	g := s.g
	var left []string
	policy := metav1.DeletionPropagation(s.deletion)
	err := wait.PollUntilContextTimeout(g.t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		left = g.residue(s.name, policy, claims)
		if s.deletion == "Namespace" {
			if err := g.c.Get(ctx, client.ObjectKey{Name: g.ns}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
				left = append(left, "Namespace "+g.ns)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		s.violate("the deleted cluster (%s) left %s after a minute", s.deletion, strings.Join(left, ", "))
	}
}

// budget is how many passes a wait of n passes on the fake gets: real
// etcd members take seconds to start, elect and connect.
func (s *schedule) budget(n int) int {
	if s.proc != nil {
		return 8 * n
	}
	return n
}

// converge runs passes until the cluster is Ready at its generation.
func (s *schedule) converge() {
	deadline := time.Now().Add(s.wallBudget())
	for range s.budget(60) {
		s.pass()
		if s.converged() {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	c := s.g.get(s.name)
	var pods corev1.PodList
	_ = s.g.c.List(s.g.t.Context(), &pods, client.InNamespace(s.g.ns))
	var ps []string
	for _, p := range pods.Items {
		ps = append(ps, fmt.Sprintf("%s %s ready=%v deleting=%v", p.Name, p.Status.Phase, isReady(&p), p.DeletionTimestamp != nil))
	}
	detail := fmt.Sprint(lastN(s.g.fake.Calls(), 30))
	if s.proc != nil {
		detail = s.proc.logs()
	}
	s.violate("not converged after %d passes or %s: %+v; etcd members %v; pods %v; etcd: %s", s.budget(60), s.wallBudget(), c.Status.Conditions, s.etcd.members(), ps, detail)
}

// wallBudget bounds a wait on etcd processes whose every call times out
// (members that no longer trust each other): it would take its passes
// for half an hour. Schedules that converge take seconds.
func (s *schedule) wallBudget() time.Duration {
	if s.proc != nil {
		return 4 * time.Minute
	}
	return time.Hour
}

func lastN(s []string, n int) []string { return s[max(len(s)-n, 0):] }

package controller_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	campaignSchedules = flag.Int("campaign.schedules", 200, "how many schedules the fault campaign runs")
	campaignSteps     = flag.Int("campaign.steps", 8, "operations and faults per schedule")
)

// TestFaultCampaign drives the operator through seeded random schedules of
// operations and faults while a client writes, and checks invariants after
// every step: no backup lacks an acknowledged write, no member restarts
// under its ID on a claim other than its data's, a drain through the
// disruption budget keeps a quorum of voters, and the cluster converges
// and deletes once faults stop. The etcd cluster is the fake, which models
// members that lag behind the writes; the kubelet is the campaign's.
//
// A failure names its seed and schedule and prints the schedule; it
// replays exactly with -run 'TestFaultCampaign/<n>$' -campaign.seed=<seed>.
func TestFaultCampaign(t *testing.T) {
	seed := *campaignSeed
	var ops, faults, backups, violations atomic.Int64
	start := time.Now()
	t.Cleanup(func() {
		fmt.Printf("fault campaign: seed %d, %d schedules, %d operations, %d faults, %d backups checked, %d violations in %s\n",
			seed, *campaignSchedules, ops.Load(), faults.Load(), backups.Load(), violations.Load(), time.Since(start).Round(time.Second))
	})
	for i := range *campaignSchedules {
		t.Run(fmt.Sprintf("%03d", i), func(t *testing.T) {
			t.Parallel()
			s := newSchedule(t, seed, i)
			s.run(*campaignSteps)
			ops.Add(int64(s.ops))
			faults.Add(int64(s.faults))
			backups.Add(int64(s.backups))
			if len(s.violations) > 0 {
				violations.Add(int64(len(s.violations)))
				t.Errorf("seed %d schedule %d: %d violations:\n  %s\nschedule:\n  %s\nreplay: go test ./internal/controller -run 'TestFaultCampaign/%03d$' -campaign.seed=%d",
					seed, i, len(s.violations), strings.Join(s.violations, "\n  "), strings.Join(s.log, "\n  "), i, seed)
			}
		})
	}
}

// schedule is one run of the campaign on a cluster of its own.
type schedule struct {
	g    *rig
	r    *rand.Rand
	name string
	step int
	// acked are the writes etcd acknowledged.
	acked map[string]string
	// claimOf is the claim each member ID first started on: its data.
	claimOf map[uint64]types.UID
	// catchUp is how many passes a lagging member (by peer URL) takes to
	// apply every write.
	catchUp map[string]int
	// stale is the claim list the operator's cache still shows while
	// staleFor passes last.
	stale    *corev1.PersistentVolumeClaimList
	staleFor int
	// calm is set once faults stop: new learners no longer lag.
	calm    bool
	deleted bool
	// cluster is the cluster as created, for its members' URLs.
	cluster *v1alpha1.EtcdCluster

	ops, faults, backups int
	log                  []string
	violations           []string
}

func newSchedule(t *testing.T, seed uint64, i int) *schedule {
	g := newRig(t)
	s := &schedule{g: g, r: rand.New(rand.NewPCG(seed, uint64(i))), name: "c", acked: map[string]string{},
		claimOf: map[uint64]types.UID{}, catchUp: map[string]int{}}
	g.cache = interceptor.NewClient(g.c.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if l, ok := list.(*corev1.PersistentVolumeClaimList); ok && s.stale != nil {
				s.stale.DeepCopyInto(l)
				return nil
			}
			return cl.List(ctx, list, opts...)
		},
	})
	g.startOperator()
	return s
}

func (s *schedule) logf(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf("%d: ", s.step)+fmt.Sprintf(format, args...))
}

func (s *schedule) violate(format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf("step %d: ", s.step)+fmt.Sprintf(format, args...))
}

func (s *schedule) run(steps int) {
	g := s.g
	size := []int32{3, 5}[s.r.IntN(2)]
	g.mountPVCStore("backups")
	c := cluster(s.name, size)
	c.Spec.Backup = &v1alpha1.BackupSpec{StoreRef: v1alpha1.StoreReference{PVCName: "backups"}}
	g.create(c)
	s.cluster = c
	s.logf("create size %d", size)
	s.calm = true
	s.converge()
	s.calm = false
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
	s.calm = true
	s.stale, s.staleFor = nil, 0
	for peer := range s.catchUp {
		g.fake.CatchUp(peer)
	}
	s.converge()
	s.write()
	s.deleteCluster()
}

// act carries out one random operation or fault.
func (s *schedule) act() {
	g := s.g
	pods := g.names(&corev1.PodList{})
	switch k := s.r.IntN(11); {
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
		s.logf("delete")
		s.deleteCluster()
	case k == 4 && len(pods) > 0:
		s.faults++
		p := pods[s.r.IntN(len(pods))]
		s.logf("pod %s killed", p)
		s.killPod(p)
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
	case k == 7 && len(s.followers()) > 0:
		s.faults++
		f := s.followers()
		p := f[s.r.IntN(len(f))]
		passes := 1 + s.r.IntN(6)
		s.logf("member %s falls behind the writes for %d passes", p, passes)
		peer := controller.PeerURL(s.cluster, p)
		g.fake.SetApplied(peer, g.fake.Revision())
		s.catchUp[peer] = passes
	case k == 8:
		s.faults++
		s.drain()
	case k == 9 && len(s.followers()) > 0:
		s.faults++
		s.moveLeader()
	default:
		s.logf("client writes only")
	}
}

func (s *schedule) update(c *v1alpha1.EtcdCluster) {
	if err := s.g.c.Update(s.g.t.Context(), c); err != nil {
		s.g.t.Fatal(err)
	}
}

// write puts keys as a client would; those etcd acknowledges are acked.
func (s *schedule) write() {
	ec, err := s.g.fake.Factory().New(s.g.t.Context(), nil)
	if err != nil {
		return
	}
	for i := range 3 {
		k := fmt.Sprintf("/campaign/%02d-%d", s.step, i)
		if err := ec.Put(s.g.t.Context(), []etcdclient.KeyValue{{Key: []byte(k), Value: []byte(k)}}); err == nil {
			s.acked[k] = k
		}
	}
}

// pass runs one operator pass and then the kubelet.
func (s *schedule) pass() {
	err := s.g.pass(s.name) // failed passes are the operator's to retry
	for _, e := range s.g.drain() {
		s.logf("  operator: %s", e)
	}
	if err != nil {
		s.logf("  pass failed: %v", err)
	}
	if s.staleFor > 0 {
		if s.staleFor--; s.staleFor == 0 {
			s.stale = nil
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

// kubelet stops the members whose pods are gone and starts the pods not
// yet running. A pod that starts a member etcd knows as started must be on
// the claim that member first started on: another is empty, and etcd
// would take the registered ID with an empty log. A new learner starts
// behind the writes half of the time and catches up within 6 passes.
func (s *schedule) kubelet() {
	g := s.g
	ctx := g.t.Context()
	c := s.cluster
	var pods corev1.PodList
	if err := g.c.List(ctx, &pods, client.InNamespace(g.ns)); err != nil {
		g.t.Fatal(err)
	}
	live := map[string]*corev1.Pod{}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil {
			live[p.Name] = p
		}
	}
	for _, m := range g.fake.Members() {
		if _, ok := live[m.Name]; !ok && m.Name != "" {
			g.fake.SetHealthy(m.PeerURLs[0], false)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(live)) {
		p := live[name]
		if p.Status.Phase == corev1.PodRunning {
			continue
		}
		peer := controller.PeerURL(c, name)
		claim := s.claimUID(p)
		for _, m := range g.fake.Members() {
			if m.PeerURLs[0] != peer {
				continue
			}
			switch first, ok := s.claimOf[m.ID]; {
			case !ok:
				s.claimOf[m.ID] = claim
				if m.IsLearner && !s.calm && s.r.IntN(2) == 0 {
					g.fake.SetApplied(peer, 0)
					s.catchUp[peer] = 1 + s.r.IntN(6)
				}
			case first != claim:
				s.violate("member %s (ID %x) started on claim %s, not on the claim %s holding its data: an empty member under a registered ID", name, m.ID, claim, first)
			}
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if err := g.c.Status().Update(ctx, p); err != nil {
			g.t.Fatal(err)
		}
		g.fake.Start(name, peer, controller.InClusterClientURL(c, name))
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
	for _, m := range s.g.fake.Members() {
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
	for _, m := range s.g.fake.Members() {
		if m.Name != "" && m.ID != s.g.fake.Leader() {
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
	for _, m := range s.g.fake.Members() {
		var p corev1.Pod
		err := s.g.c.Get(s.g.t.Context(), client.ObjectKey{Namespace: s.g.ns, Name: m.Name}, &p)
		if err != nil || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || s.claimUID(&p) == "" {
			return false
		}
	}
	return true
}

// converged reports whether the cluster is Ready at its generation.
func (s *schedule) converged() bool {
	c := s.g.get(s.name)
	return statusutil.IsFalse(c, v1alpha1.ConditionProgressing) && c.Status.ObservedGeneration == c.Generation &&
		statusutil.IsTrue(c, v1alpha1.ConditionAvailable)
}

// killPod deletes pod name and stops its member; a leader's followers
// elect another.
func (s *schedule) killPod(name string) {
	if err := s.g.c.Delete(s.g.t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.g.ns}}); client.IgnoreNotFound(err) != nil {
		s.g.t.Fatal(err)
	}
	peer := controller.PeerURL(s.cluster, name)
	s.g.fake.SetHealthy(peer, false)
	for _, m := range s.g.fake.Members() {
		if m.PeerURLs[0] == peer && m.ID == s.g.fake.Leader() {
			s.moveLeader()
		}
	}
}

// moveLeader makes another running, caught-up voting member the leader,
// as an election does.
func (s *schedule) moveLeader() {
	var voters []string
	for _, m := range s.g.fake.Members() {
		_, lagging := s.catchUp[m.PeerURLs[0]]
		if !m.IsLearner && m.Name != "" && m.ID != s.g.fake.Leader() && !lagging && s.running(m.Name) {
			voters = append(voters, m.Name)
		}
	}
	if len(voters) == 0 {
		return
	}
	slices.Sort(voters)
	name := voters[s.r.IntN(len(voters))]
	s.logf("leadership moves to %s", name)
	s.g.fake.SetLeader(controller.PeerURL(s.cluster, name))
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
	s.killPod(name)
}

// drain checks that no eviction the disruption budget allows takes the
// healthy voting members below their quorum, then evicts one pod it
// allows, as draining that pod's node does.
func (s *schedule) drain() {
	evictable, healthy, voters := s.g.drainNode(s.name)
	s.logf("drain: the budget lets %d of %d healthy voting members (of %d) go", evictable, healthy, voters)
	if evictable > 0 && healthy-evictable < membership.Quorum(voters) {
		s.violate("a drain through the disruption budget may evict %d of %d healthy voting members, leaving fewer than the quorum %d of %d",
			evictable, healthy, membership.Quorum(voters), voters)
	}
	if evictable > 0 {
		if f := s.followers(); len(f) > 0 {
			p := f[s.r.IntN(len(f))]
			s.logf("pod %s evicted", p)
			s.killPod(p)
		}
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
		if m.ID == b.Status.BackupID {
			s.checkBackup("on-demand backup "+name, want, g.backupKeys(s.name, m))
		}
	}
}

func (s *schedule) checkBackup(what string, want, got map[string]string) {
	s.backups++
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
func (s *schedule) deleteCluster() {
	g := s.g
	want := maps.Clone(s.acked)
	c := g.get(s.name)
	if err := g.c.Delete(g.t.Context(), c); err != nil {
		g.t.Fatal(err)
	}
	s.deleted = true
	for i := 0; i < 20 && g.exists(c); i++ {
		s.pass()
	}
	if g.exists(c) {
		s.violate("the cluster is not deleted after 20 passes: %+v", g.get(s.name).Status.Conditions)
		return
	}
	for _, m := range g.storedBackups(s.name) {
		if m.Snapshot.Extra[controller.ExtraTrigger] == controller.TriggerFinal {
			s.checkBackup("the final backup", want, g.backupKeys(s.name, m))
			return
		}
	}
	s.violate("the cluster was deleted without a final backup")
}

// converge runs passes until the cluster is Ready at its generation.
func (s *schedule) converge() {
	for range 60 {
		s.pass()
		if s.converged() {
			return
		}
	}
	c := s.g.get(s.name)
	var pods corev1.PodList
	_ = s.g.c.List(s.g.t.Context(), &pods, client.InNamespace(s.g.ns))
	var ps []string
	for _, p := range pods.Items {
		ps = append(ps, fmt.Sprintf("%s %s ready=%v deleting=%v", p.Name, p.Status.Phase, isReady(&p), p.DeletionTimestamp != nil))
	}
	s.violate("not converged after 60 passes: %+v; etcd members %v; pods %v; calls %v", c.Status.Conditions, s.g.etcdMembers(), ps, lastN(s.g.fake.Calls(), 30))
}

func lastN(s []string, n int) []string { return s[max(len(s)-n, 0):] }

package controller_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/statusutil"
)

// TestCorruptAlarmStopsTheOperator: while etcd reports CORRUPT the
// operator changes nothing, not even a lost member's pod, and says so
// once (an event) and for as long as it lasts (Degraded); once a person
// disarms it the operator goes on.
func TestCorruptAlarmStopsTheOperator(t *testing.T) {
	g := newRig(t)
	g.create(cluster("co", 3))
	g.converge("co", 30)
	g.drain()
	c := g.get("co")
	g.fake.RaiseAlarm(controller.PeerURL(c, "co-1"), etcdclient.AlarmCorrupt)
	g.deletePodAndStop("co", "co-2")
	for range 3 {
		if err := g.pass("co"); err != nil {
			t.Fatal(err)
		}
	}
	var pod corev1.Pod
	if err := g.c.Get(t.Context(), types.NamespacedName{Namespace: g.ns, Name: "co-2"}, &pod); err == nil {
		t.Error("pod co-2 recreated while etcd reports CORRUPT")
	}
	events := g.drain()
	if len(events) != 1 || !strings.Contains(events[0], controller.EventCorrupt) {
		t.Errorf("events %q, want one %s", events, controller.EventCorrupt)
	}
	if d := statusutil.Get(g.get("co"), v1alpha1.ConditionDegraded); d == nil || d.Status != "True" || d.Reason != controller.ReasonCorrupt {
		t.Errorf("Degraded = %+v, want True, %s", d, controller.ReasonCorrupt)
	}

	ec, err := g.fake.Factory().New(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	alarms, _ := ec.Alarms(t.Context())
	for _, a := range alarms {
		if err := ec.Disarm(t.Context(), a); err != nil {
			t.Fatal(err)
		}
	}
	if _, errs := g.converge("co", 30); len(errs) > 0 {
		t.Fatalf("after the disarm: %v", errs)
	}
	if got := g.get("co").Status.Alarms; len(got) > 0 {
		t.Errorf("status.alarms = %v after the disarm", got)
	}
}

// fillQuota makes every member of c report a database of size bytes, all
// in use, raises NOSPACE on its first member after a write, and runs the
// recovery's passes: compaction and defragmentation leave it raised.
func (g *rig) fillQuota(c *v1alpha1.EtcdCluster, size int64) {
	g.t.Helper()
	g.fragmentAll(c.Name, size, size)
	g.putKeys(map[string]string{"k": "v"})
	g.fake.RaiseAlarm(controller.PeerURL(c, c.Name+"-0"), etcdclient.AlarmNoSpace)
	for range 8 {
		if err := g.pass(c.Name); err != nil {
			g.t.Fatal(err)
		}
	}
}

// TestNoSpaceWithDataOverTheQuota: when compaction and defragmentation
// leave the databases at the quota, the alarm stays (disarming would only
// see it raised again), Degraded says what to do, and scheduled backups go
// on.
func TestNoSpaceWithDataOverTheQuota(t *testing.T) {
	g := newRig(t)
	g.createBackedUp("ns", 3, 0, 30)
	c := g.get("ns")
	c.Spec.QuotaBackendBytes = ptr.To(resource.MustParse("16Mi"))
	c.Spec.Backup.Schedule = "@every 1h"
	if err := g.c.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	g.converge("ns", 60)
	g.drain()
	g.fillQuota(c, 16*mib)
	c = g.get("ns")
	d := statusutil.Get(c, v1alpha1.ConditionDegraded)
	if d == nil || d.Reason != controller.ReasonNoSpace || !strings.Contains(d.Message, "Raise spec.quotaBackendBytes") {
		t.Errorf("Degraded = %+v, want NoSpace naming spec.quotaBackendBytes", d)
	}
	if c.Status.NoSpace == nil || c.Status.NoSpace.CompactedRevision == 0 || g.fake.Compacted() != c.Status.NoSpace.CompactedRevision {
		t.Errorf("status.noSpace = %+v, fake compacted at %d", c.Status.NoSpace, g.fake.Compacted())
	}
	if got := g.maintenanceCalls("ns"); len(got) != 4 { // three defragmentations and a leader move
		t.Errorf("maintenance calls %q, want every member defragmented once", got)
	}
	for _, call := range g.fake.Calls() {
		if strings.HasPrefix(call, "Disarm") {
			t.Errorf("%s while the data fills the quota", call)
		}
	}
	before := len(g.storedBackups("ns"))
	g.clock.advance(time.Hour + time.Minute)
	if err := g.operationPass("ns"); err != nil {
		t.Fatal(err)
	}
	if got := len(g.storedBackups("ns")); got != before+1 {
		t.Errorf("%d backups stored after the schedule came due, want %d: scheduled backups stopped under NOSPACE", got, before+1)
	}
}

// TestNoSpaceQuotaRaiseRollsOut: when the data fills the quota, raising
// spec.quotaBackendBytes restarts the members with it and then disarms.
// A member still on the old quota raises NOSPACE again at the next write,
// as etcd does: the alarm is disarmed only once no member runs a quota
// its database fills. Before, the operator disarmed against the new
// quota at once, and the next write raised it again.
func TestNoSpaceQuotaRaiseRollsOut(t *testing.T) {
	g := newRig(t)
	g.createBackedUp("nq", 3, 0, 30)
	c := g.get("nq")
	c.Spec.QuotaBackendBytes = ptr.To(resource.MustParse("16Mi"))
	if err := g.c.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	g.converge("nq", 60)
	g.fillQuota(c, 16*mib)
	c = g.get("nq")
	c.Spec.QuotaBackendBytes = ptr.To(resource.MustParse("64Mi"))
	if err := g.c.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	var disarmedEarly []string
	for range 60 {
		calls := len(g.fake.Calls())
		if err := g.pass("nq"); err != nil {
			t.Fatal(err)
		}
		g.kubelet("nq")
		old := map[string]bool{}
		for _, p := range g.pods("nq") {
			if controller.PodQuota(&p) != 64*mib {
				old[p.Name] = true
			}
		}
		for _, call := range g.fake.Calls()[calls:] {
			if strings.HasPrefix(call, "Disarm") && len(old) > 0 {
				disarmedEarly = append(disarmedEarly, call)
			}
		}
		for name := range old {
			// The next write on a member whose database fills its quota.
			g.fake.RaiseAlarm(controller.PeerURL(c, name), etcdclient.AlarmNoSpace)
		}
		if c := g.get("nq"); len(old) == 0 && len(c.Status.Alarms) == 0 && statusutil.IsFalse(c, v1alpha1.ConditionProgressing) {
			break
		}
	}
	c = g.get("nq")
	var quotas []string
	for _, p := range g.pods("nq") {
		quotas = append(quotas, fmt.Sprintf("%s %d", p.Name, controller.PodQuota(&p)))
	}
	if want := []string{"nq-0 67108864", "nq-1 67108864", "nq-2 67108864"}; !slices.Equal(quotas, want) {
		t.Errorf("pod quotas %v, want %v", quotas, want)
	}
	if len(c.Status.Alarms) > 0 || c.Status.NoSpace != nil {
		t.Errorf("status.alarms %v, noSpace %+v: want disarmed", c.Status.Alarms, c.Status.NoSpace)
	}
	if len(disarmedEarly) > 0 {
		t.Errorf("disarmed while a member ran the old quota: %v", disarmedEarly)
	}
	if t.Failed() {
		t.Logf("conditions %+v\nevents %v\netcd calls %v", c.Status.Conditions, g.drain(), lastN(g.fake.Calls(), 40))
	}
}

// TestNoSpaceStuckRecoveryLetsRolloutsThrough: while a NOSPACE recovery
// cannot go on (every defragmentation fails, as when the member runs out
// of memory), a new pod template still rolls out: it may be the fix.
func TestNoSpaceStuckRecoveryLetsRolloutsThrough(t *testing.T) {
	g := newRig(t)
	g.create(cluster("ns", 3))
	g.converge("ns", 30)
	g.putKeys(map[string]string{"k": "v"})
	c := g.get("ns")
	g.fragmentAll("ns", 64*mib, 8*mib)
	g.fake.RaiseAlarm(controller.PeerURL(c, "ns-0"), etcdclient.AlarmNoSpace)
	c.Spec.PodTemplate.Annotations = map[string]string{"fix": "more memory"}
	if err := g.c.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	g.drain()
	var events []string
	for range 30 {
		g.fake.FailNext("Defragment", errors.New("defragmenting: connection reset: the member was OOM-killed"), false)
		_ = g.pass("ns")
		g.kubelet("ns")
		events = append(events, g.drain()...)
	}
	if !slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, "RollingOut") }) {
		t.Errorf("no rollout while the recovery was stuck; events %v", events)
	}
}

func TestPodQuota(t *testing.T) {
	t.Parallel()
	etcd := func(args ...string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "etcd", Args: args}}}}
	}
	def := controller.DefaultQuotaBackendBytes.Value()
	tests := []struct {
		name string
		pod  *corev1.Pod
		want int64
	}{
		{"no pod", nil, def},
		{"no flag", etcd("--name=c-0"), def},
		{"set", etcd("--name=c-0", "--quota-backend-bytes=8388608"), 8 * mib},
		{"0 is etcd's default", etcd("--quota-backend-bytes=0"), def},
		{"negative is none", etcd("--quota-backend-bytes=-1"), controller.NoQuota},
		{"another container's flag", &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sidecar", Args: []string{"--quota-backend-bytes=1"}}}}}, def},
	}
	for _, tt := range tests {
		if got := controller.PodQuota(tt.pod); got != tt.want {
			t.Errorf("%s: PodQuota = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestNoSpaceRecoversThroughTheQuorum: with one member's pod Pending (its
// node gone, no room elsewhere), NOSPACE is recovered through the two
// members that answer: compacted, both defragmented, disarmed; the
// Pending member is left alone. Before, every pass waited for it (the
// membership step waited, and the recovery wanted every member healthy):
// the whole cluster refused writes until that pod ran.
func TestNoSpaceRecoversThroughTheQuorum(t *testing.T) {
	g := newRig(t)
	g.create(cluster("nq", 3))
	g.converge("nq", 30)
	g.putKeys(map[string]string{"k": "v"})
	c := g.get("nq")
	g.fragmentAll("nq", 64*mib, 8*mib)
	g.fake.SetHealthy(controller.PeerURL(c, "nq-2"), false)
	if err := g.c.Delete(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: g.ns, Name: "nq-2"}}); err != nil {
		t.Fatal(err)
	}
	g.fake.RaiseAlarm(controller.PeerURL(c, "nq-0"), etcdclient.AlarmNoSpace)
	g.drain()
	passes := 0
	for passes < 20 && !slices.ContainsFunc(g.fake.Calls(), func(call string) bool { return strings.HasPrefix(call, "Disarm") }) {
		_ = g.pass("nq") // no kubelet: nq-2's new pod stays Pending
		passes++
	}
	c = g.get("nq")
	if len(c.Status.Alarms) > 0 || c.Status.NoSpace != nil {
		t.Errorf("after %d passes with nq-2 Pending: status.alarms %v, noSpace %+v; want disarmed", passes, c.Status.Alarms, c.Status.NoSpace)
	}
	if got, want := g.maintenanceCalls("nq"), []string{"Defragment nq-1", "MoveLeader nq-1", "Defragment nq-0"}; !slices.Equal(got, want) {
		t.Errorf("maintenance calls %q, want %q", got, want)
	}
	var p corev1.Pod
	if err := g.c.Get(t.Context(), types.NamespacedName{Namespace: g.ns, Name: "nq-2"}, &p); err != nil || p.Status.Phase == corev1.PodRunning {
		t.Errorf("nq-2's pod: %v, phase %q; want it recreated and Pending throughout", err, p.Status.Phase)
	}
	if t.Failed() {
		t.Logf("conditions %+v\nevents %v\netcd calls %v", c.Status.Conditions, g.drain(), lastN(g.fake.Calls(), 40))
	}
}

// TestNoSpaceCompactionKeepsAMargin: the recovery's first compaction keeps
// the last 1000 revisions, so that a watcher a little behind resumes
// without relisting; when the databases still fill the quota after it,
// the next round compacts at the current revision, and only then does the
// operator say the data fills the quota. Before, it compacted at the
// current revision at once: every watcher behind had to relist.
func TestNoSpaceCompactionKeepsAMargin(t *testing.T) {
	g := newRig(t)
	c := cluster("nm", 3)
	c.Spec.QuotaBackendBytes = ptr.To(resource.MustParse("64Mi"))
	g.create(c)
	g.converge("nm", 30)
	keys := map[string]string{}
	for i := range 12000 {
		keys[fmt.Sprintf("k%05d", i)] = "v"
	}
	g.putKeys(keys)
	rev := g.fake.Revision()
	c = g.get("nm")
	g.fragmentAll("nm", 64*mib, 8*mib)
	g.fake.RaiseAlarm(controller.PeerURL(c, "nm-0"), etcdclient.AlarmNoSpace)
	var compacted []string
	for range 20 {
		_ = g.pass("nm")
		g.kubelet("nm")
		if c := g.get("nm"); len(c.Status.Alarms) == 0 {
			break
		}
	}
	for _, call := range g.fake.Calls() {
		if strings.HasPrefix(call, "Compact ") {
			compacted = append(compacted, call)
		}
	}
	if want := []string{fmt.Sprintf("Compact %d", rev-1000)}; !slices.Equal(compacted, want) {
		t.Errorf("compactions %q, want %q", compacted, want)
	}
	if c := g.get("nm"); len(c.Status.Alarms) > 0 {
		t.Errorf("status.alarms %v after the recovery", c.Status.Alarms)
	}

	// History inside the margin fills the quota: a second round without it.
	g.fragmentAll("nm", 64*mib, 63*mib)
	g.fake.RaiseAlarm(controller.PeerURL(c, "nm-0"), etcdclient.AlarmNoSpace)
	calls := len(g.fake.Calls())
	for range 30 {
		_ = g.pass("nm")
		g.kubelet("nm")
	}
	compacted = nil
	for _, call := range g.fake.Calls()[calls:] {
		if strings.HasPrefix(call, "Compact ") {
			compacted = append(compacted, call)
		}
	}
	rev = g.fake.Revision()
	if want := []string{fmt.Sprintf("Compact %d", rev-1000), fmt.Sprintf("Compact %d", rev)}; !slices.Equal(compacted, want) {
		t.Errorf("compactions %q, want %q: a margin round, then one at the current revision", compacted, want)
	}
	d := statusutil.Get(g.get("nm"), v1alpha1.ConditionDegraded)
	if d == nil || d.Reason != controller.ReasonNoSpace || !strings.Contains(d.Message, "Raise spec.quotaBackendBytes") {
		t.Errorf("Degraded = %+v, want NoSpace naming spec.quotaBackendBytes", d)
	}
}

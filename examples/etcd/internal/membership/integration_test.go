package membership_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdtest"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
	"github.com/opkit-dev/opkit/internal/testkit"
)

const version = "3.6.16"

// localCluster carries out membership.Plan's steps on local etcd processes,
// the way the controller does on pods: a process is a pod, its data
// directory is its volume.
type localCluster struct {
	t          *testing.T
	name       string
	size       int
	persistent bool
	procs      map[string]*etcdtest.Member
	// hung marks processes stopped with SIGSTOP: their "pod" still runs.
	hung map[string]bool
	// failAfterAdd makes the next AddLearner stop after the etcd call,
	// before the process ("pod") is started.
	failAfterAdd bool
	// revision is the desired pod revision; revisions that of each
	// process, given when it was started.
	revision  string
	revisions map[string]string
	// pending are processes never started whose "pod" exists, Pending.
	pending map[string]bool
	// names maps every peer URL ever used to its member name, as the
	// controller derives names from peer URLs (pod DNS names).
	names map[string]string
	// steps are the steps that succeeded; errors those that failed.
	steps  []string
	errors []string
	// certs, when set, make every member speak TLS, and the planner's
	// client dial with the client certificate, as spec.tls does.
	certs *etcdtest.Certs
	// rebuild opts into rule 7 (spec.recovery.quorumLoss Rebuild);
	// rebuildingFrom is the member a rebuild began from, as
	// status.recovery records it; forced the processes started with
	// --force-new-cluster; recorded the members of the last pass that
	// reached the cluster (status.members).
	rebuild        bool
	rebuildingFrom string
	forced         map[string]bool
	recorded       []membership.Member
}

func newLocalCluster(t *testing.T, name string, initial int) *localCluster {
	t.Helper()
	return newTLSLocalCluster(t, name, initial, nil)
}

// newTLSLocalCluster is newLocalCluster with members speaking TLS with
// certs (plain if nil).
func newTLSLocalCluster(t *testing.T, name string, initial int, certs *etcdtest.Certs) *localCluster {
	t.Helper()
	lc := &localCluster{t: t, name: name, size: initial, procs: map[string]*etcdtest.Member{}, hung: map[string]bool{}, names: map[string]string{},
		revision: "r1", revisions: map[string]string{}, pending: map[string]bool{}, certs: certs, forced: map[string]bool{}}
	for _, m := range etcdtest.StartTLSCluster(t, name, initial, certs) {
		lc.procs[m.Name] = m
		lc.names[m.PeerURL] = m.Name
		lc.revisions[m.Name] = lc.revision
	}
	return lc
}

func (lc *localCluster) running() []*etcdtest.Member {
	var out []*etcdtest.Member
	for _, m := range lc.procs {
		if m.Running() && !lc.hung[m.Name] {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b *etcdtest.Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (lc *localCluster) client(ctx context.Context, ms []*etcdtest.Member) (etcdclient.Client, error) {
	eps := make([]string, 0, len(ms))
	for _, m := range ms {
		eps = append(eps, m.ClientURL)
	}
	var opts []etcdclient.DialOption
	if lc.certs != nil {
		opts = append(opts, etcdclient.WithTLS(lc.certs.ClientTLS(lc.t)))
	}
	return etcdclient.NewFactory(time.Second).New(ctx, eps, opts...)
}

func (lc *localCluster) byPeerURL(u string) *etcdtest.Member {
	for _, m := range lc.procs {
		if m.PeerURL == u {
			return m
		}
	}
	return nil
}

// observe builds the planner's input from the processes and etcd.
func (lc *localCluster) observe(ctx context.Context) membership.Observed {
	o := membership.Observed{Cluster: lc.name, Size: lc.size, Version: version, Revision: lc.revision, Bootstrapped: true, Persistent: lc.persistent,
		Claims: map[string]bool{}, Rebuild: lc.rebuild, RebuildingFrom: lc.rebuildingFrom, Recorded: lc.recorded}
	for _, m := range lc.procs {
		if lc.pending[m.Name] {
			o.Pods = append(o.Pods, membership.Pod{Name: m.Name, Phase: membership.PodPending, Version: version, Revision: lc.revisions[m.Name]})
		}
		if m.Running() {
			// Ready as the kubelet's readiness probe says it.
			o.Pods = append(o.Pods, membership.Pod{Name: m.Name, Phase: membership.PodRunning, Ready: readyz(ctx, m.ReadyURL()), Version: version,
				Revision: lc.revisions[m.Name], ForceNewCluster: lc.forced[m.Name]})
		}
		// A data directory is a member's claim.
		if _, err := os.Stat(m.DataDir); err == nil {
			o.Claims[m.Name] = true
		}
	}
	run := lc.running()
	if len(run) == 0 {
		return o
	}
	c, err := lc.client(ctx, run)
	if err != nil {
		return o
	}
	defer func() { _ = c.Close() }()
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	list, err := c.MemberList(lctx)
	cancel()
	if err != nil {
		if lc.rebuild {
			// A member answers a status request without a quorum, as the
			// controller asks the running pods.
			o.RaftIndexes = map[string]uint64{}
			for _, m := range run {
				sctx, cancel := context.WithTimeout(ctx, time.Second)
				s, err := c.Status(sctx, m.ClientURL)
				cancel()
				if err == nil {
					o.RaftIndexes[m.Name] = s.RaftIndex
				}
			}
		}
		return o
	}
	o.Reached = true
	// The cluster answers: a rebuild is over, as the controller clears
	// status.recovery.
	lc.rebuildingFrom = ""
	for _, em := range list {
		m := membership.Member{ID: em.ID, Started: em.Started(), Learner: em.IsLearner}
		m.Name = lc.names[em.PeerURLs[0]]
		if m.Name == "" {
			m.Name = "unknown-" + em.IDString()
		}
		p := lc.procs[m.Name]
		if p != nil && p.Running() && len(em.ClientURLs) > 0 {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			s, err := c.Status(sctx, p.ClientURL)
			cancel()
			m.Healthy = err == nil && s.Healthy()
			m.Leader = err == nil && s.Leader == em.ID
		}
		o.Members = append(o.Members, m)
	}
	lc.recorded = o.Members
	return o
}

// execute carries out one step.
func (lc *localCluster) execute(ctx context.Context, s membership.Step) error {
	err := lc.do(ctx, s)
	step := fmt.Sprintf("%s %s", s.Action, s.Name)
	if err != nil {
		lc.errors = append(lc.errors, step+": "+err.Error())
		return err
	}
	lc.steps = append(lc.steps, step)
	return nil
}

func (lc *localCluster) do(ctx context.Context, s membership.Step) error {
	switch s.Action {
	case membership.ActionAddLearner:
		m := etcdtest.NewTLSMember(lc.t, s.Name, lc.certs)
		c, err := lc.client(ctx, lc.running())
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }()
		_, list, err := c.MemberAddAsLearner(ctx, m.PeerURL)
		if err != nil {
			return err
		}
		lc.procs[m.Name] = m
		lc.names[m.PeerURL] = m.Name
		lc.revisions[m.Name] = lc.revision
		if lc.failAfterAdd {
			lc.failAfterAdd = false
			return fmt.Errorf("injected failure after MemberAddAsLearner(%s)", m.Name)
		}
		return lc.start(m, list)
	case membership.ActionCreatePod:
		m := lc.procs[s.Name]
		if len(lc.running()) == 0 {
			// No member answers: the member's data directory holds its
			// cluster, the initial cluster is not read.
			m.Start(lc.t, etcdtest.InitialCluster(m), "existing")
			return nil
		}
		c, err := lc.client(ctx, lc.running())
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }()
		list, err := c.MemberList(ctx)
		if err != nil {
			return err
		}
		return lc.start(m, list)
	case membership.ActionPromote:
		c, err := lc.client(ctx, lc.running())
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }()
		return c.MemberPromote(ctx, s.ID)
	case membership.ActionRemove:
		var others []*etcdtest.Member
		for _, m := range lc.running() {
			if m.Name != s.Name {
				others = append(others, m)
			}
		}
		c, err := lc.client(ctx, others)
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }()
		if err := c.MemberRemove(ctx, s.ID); err != nil {
			return err
		}
		lc.deletePod(s.Name)
		return nil
	case membership.ActionDeletePod:
		lc.deletePod(s.Name)
		return nil
	case membership.ActionUpgrade:
		// Delete the pod, keeping its data: CreatePod starts it again,
		// without --force-new-cluster.
		m := lc.procs[s.Name]
		m.Stop()
		m.ExtraArgs = nil
		delete(lc.forced, s.Name)
		return nil
	case membership.ActionForceNewCluster:
		if lc.rebuildingFrom == "" {
			lc.rebuildingFrom = s.Name
		}
		m := lc.procs[s.Name]
		if m.Running() && !lc.forced[s.Name] {
			m.Stop() // the pod is deleted first, its data kept
			return nil
		}
		if !m.Running() {
			m.ExtraArgs = []string{"--force-new-cluster"}
			lc.forced[s.Name] = true
			m.Start(lc.t, etcdtest.InitialCluster(m), "existing")
		}
		return nil
	}
	return nil
}

func (lc *localCluster) start(m *etcdtest.Member, list []etcdclient.Member) error {
	var parts []string
	for _, em := range list {
		p := lc.byPeerURL(em.PeerURLs[0])
		if p == nil {
			return fmt.Errorf("member %s has an unknown peer URL %s", em.IDString(), em.PeerURLs[0])
		}
		parts = append(parts, p.Name+"="+p.PeerURL)
	}
	m.Start(lc.t, strings.Join(parts, ","), "existing")
	return nil
}

func (lc *localCluster) deletePod(name string) {
	m := lc.procs[name]
	if m == nil {
		return
	}
	m.Stop()
	_ = os.RemoveAll(m.DataDir)
	delete(lc.procs, name)
}

// converge plans and executes until the planner has nothing to do.
func (lc *localCluster) converge(ctx context.Context, timeout time.Duration) membership.Observed {
	lc.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last membership.Step
	var lastErr error
	for {
		o := lc.observe(ctx)
		s := membership.Plan(o)
		if s.Action == membership.ActionNone {
			return o
		}
		if s.Action != membership.ActionWait {
			sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
			lastErr = lc.execute(sctx, s)
			scancel()
		}
		last = s
		select {
		case <-ctx.Done():
			lc.t.Fatalf("not converged within %s; last step %+v (error %v); steps %v; errors %v", timeout, last, lastErr, lc.steps, lc.errors)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func voting(o membership.Observed) []string {
	var out []string
	for _, m := range o.Members {
		if !m.Learner && m.Started && m.Healthy {
			out = append(out, m.Name)
		}
	}
	slices.Sort(out)
	return out
}

func TestIntegrationLearnerAddAndPromote(t *testing.T) {
	lc := newLocalCluster(t, "grow", 1)
	seed := lc.procs["grow-0"]
	if _, err := etcdtest.RawClient(t, seed).Put(t.Context(), "before", "grow"); err != nil {
		t.Fatal(err)
	}
	lc.size = 3
	o := lc.converge(t.Context(), 60*time.Second)
	if diff := cmpNames([]string{"grow-0", "grow-1", "grow-2"}, voting(o)); diff != "" {
		t.Fatalf("voting members: %s", diff)
	}
	wantSteps := []string{"AddLearner grow-1", "Promote grow-1", "AddLearner grow-2", "Promote grow-2"}
	if diff := cmpNames(wantSteps, lc.steps); diff != "" {
		t.Errorf("steps: %s", diff)
	}
	// The newest member serves the data written before it joined.
	resp, err := etcdtest.RawClient(t, lc.procs["grow-2"]).Get(t.Context(), "before", clientv3.WithSerializable())
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "grow" {
		t.Fatalf("reading from grow-2: %v %v", resp, err)
	}
}

func TestIntegrationInterruptedAddIsFinished(t *testing.T) {
	lc := newLocalCluster(t, "intr", 1)
	lc.size = 2
	lc.failAfterAdd = true
	o := lc.converge(t.Context(), 60*time.Second)
	if diff := cmpNames([]string{"intr-0", "intr-1"}, voting(o)); diff != "" {
		t.Fatalf("voting members: %s", diff)
	}
	// The add failed after etcd accepted it; the next pass creates the
	// pod of the member etcd already knows instead of adding another.
	if len(lc.errors) != 1 || !strings.Contains(lc.errors[0], "injected failure") {
		t.Errorf("errors %v, want only the injected one", lc.errors)
	}
	wantSteps := []string{"CreatePod intr-1", "Promote intr-1"}
	if diff := cmpNames(wantSteps, lc.steps); diff != "" {
		t.Errorf("steps: %s", diff)
	}
}

func TestIntegrationQuorumSafeRemoval(t *testing.T) {
	lc := newLocalCluster(t, "shrink", 3)
	lc.size = 1

	// A hung member (its pod runs, it does not answer) blocks removals.
	victim := lc.procs["shrink-1"]
	if err := syscall.Kill(victim.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	deadline := time.Now().Add(10 * time.Second)
	var s membership.Step
	for time.Now().Before(deadline) {
		s = membership.Plan(lc.observe(ctx))
		if s.Action == membership.ActionWait && s.Reason == "MemberUnhealthy" {
			break
		}
		if s.Action == membership.ActionRemove {
			t.Fatalf("planned %+v while shrink-1 is hung", s)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if s.Reason != "MemberUnhealthy" {
		t.Fatalf("with a hung member: step %+v, want Wait MemberUnhealthy", s)
	}
	if err := syscall.Kill(victim.PID(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	o := lc.converge(ctx, 60*time.Second)
	if len(voting(o)) != 1 {
		t.Fatalf("voting members %v, want 1", voting(o))
	}
	for _, step := range lc.steps {
		if !strings.HasPrefix(step, "Remove ") {
			t.Errorf("unexpected step %q scaling down", step)
		}
	}
	if len(lc.steps) != 2 {
		t.Errorf("steps %v, want two removals", lc.steps)
	}
}

func TestIntegrationMemberReplacement(t *testing.T) {
	t.Run("lost data: removed and replaced", func(t *testing.T) {
		replacesLostMember(t, newLocalCluster(t, "repl", 3), "repl-2")
	})
	t.Run("persistent data: recreated with its identity", func(t *testing.T) {
		lc := newLocalCluster(t, "keep", 3)
		lc.persistent = true
		before := lc.observe(t.Context())
		lc.procs["keep-1"].Kill()
		o := lc.converge(t.Context(), 60*time.Second)
		if diff := cmpNames([]string{"keep-0", "keep-1", "keep-2"}, voting(o)); diff != "" {
			t.Fatalf("voting members: %s", diff)
		}
		if id(before, "keep-1") != id(o, "keep-1") {
			t.Errorf("keep-1 changed ID, want it to rejoin with its data")
		}
		if diff := cmpNames([]string{"CreatePod keep-1"}, lc.steps); diff != "" {
			t.Errorf("steps: %s", diff)
		}
	})
	// The pod and its claim are gone: started again under its old
	// identity on an empty data directory, etcd would take it back (it
	// does not refuse), with a raft log that lacks acknowledged writes.
	t.Run("persistent storage, claim gone: replaced with a new identity", func(t *testing.T) {
		lc := newLocalCluster(t, "gone", 3)
		lc.persistent = true
		before := lc.observe(t.Context())
		lc.procs["gone-1"].Kill()
		if err := os.RemoveAll(lc.procs["gone-1"].DataDir); err != nil {
			t.Fatal(err)
		}
		o := lc.converge(t.Context(), 60*time.Second)
		if diff := cmpNames([]string{"gone-0", "gone-1", "gone-2"}, voting(o)); diff != "" {
			t.Fatalf("voting members: %s", diff)
		}
		if id(before, "gone-1") == id(o, "gone-1") {
			t.Errorf("gone-1 rejoined under its old ID %x with no data, want a new member", id(o, "gone-1"))
		}
		if diff := cmpNames([]string{"Remove gone-1", "AddLearner gone-1", "Promote gone-1"}, lc.steps); diff != "" {
			t.Errorf("steps: %s", diff)
		}
	})
}

// replacesLostMember kills member name of the 3-member lc and deletes its
// data, and fails t unless the planner removes it and adds a new member
// of the same name in its place.
func replacesLostMember(t *testing.T, lc *localCluster, name string) {
	t.Helper()
	before := lc.observe(t.Context())
	lc.procs[name].Kill()
	lc.deletePod(name)
	o := lc.converge(t.Context(), 60*time.Second)
	if diff := cmpNames([]string{lc.name + "-0", lc.name + "-1", lc.name + "-2"}, voting(o)); diff != "" {
		t.Fatalf("voting members: %s", diff)
	}
	if id(before, name) == id(o, name) {
		t.Errorf("%s kept ID %x, want a new member", name, id(o, name))
	}
	if diff := cmpNames([]string{"Remove " + name, "AddLearner " + name, "Promote " + name}, lc.steps); diff != "" {
		t.Errorf("steps: %s", diff)
	}
}

// TestIntegrationEphemeralSingleMemberRollout: a one-member cluster
// without persistent data moves to a new pod revision by adding its
// replacement, promoting it and only then removing the old member, on real
// etcd: the keys written before are all in the new member. (Removing the
// only member first, as before, fails: there is no other member to remove
// it through, and it would take every key with it.)
func TestIntegrationEphemeralSingleMemberRollout(t *testing.T) {
	lc := newLocalCluster(t, "single", 1)
	cli := etcdtest.RawClient(t, lc.running()...)
	want := map[string]string{}
	for i := range 50 {
		k, v := fmt.Sprintf("k%02d", i), fmt.Sprintf("v%d", i)
		if _, err := cli.Put(t.Context(), k, v); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	lc.revision = "r2"
	o := lc.converge(t.Context(), 60*time.Second)
	if diff := cmpNames([]string{"AddLearner single-1", "Promote single-1", "Remove single-0"}, lc.steps); diff != "" {
		t.Errorf("steps: %s", diff)
	}
	if diff := cmpNames([]string{"single-1"}, voting(o)); diff != "" {
		t.Fatalf("voting members: %s", diff)
	}
	got := etcdtest.Keys(t, etcdtest.RawClient(t, lc.running()...), "k")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("keys in the replacement member (-before +after):\n%s", diff)
	}
}

// TestIntegrationStuckLearnerRemovedOnScaleDown: a learner whose process
// never starts (its pod never runs) is removed from real etcd once the
// size no longer needs it, and the cluster converges.
func TestIntegrationStuckLearnerRemovedOnScaleDown(t *testing.T) {
	lc := newLocalCluster(t, "stuck", 3)
	lc.size = 4
	// etcd refuses reconfiguration ("unhealthy cluster") until its members
	// have been connected for a few seconds: retry until the add is done.
	deadline := time.Now().Add(30 * time.Second)
	for {
		lc.failAfterAdd = true
		s := membership.Plan(lc.observe(t.Context()))
		if s.Action != membership.ActionAddLearner {
			t.Fatalf("step %+v, want AddLearner", s)
		}
		err := lc.execute(t.Context(), s)
		if err != nil && strings.Contains(err.Error(), "injected") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("AddLearner: %v, want the injected failure after MemberAddAsLearner", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Its pod exists and never runs: the process is left unstarted.
	lc.pending["stuck-3"] = true
	if s := membership.Plan(lc.observe(t.Context())); s.Action != membership.ActionWait {
		t.Fatalf("while the size wants the learner: step %+v, want Wait", s)
	}
	lc.size = 3
	lc.steps = nil
	o := lc.converge(t.Context(), 60*time.Second)
	if diff := cmpNames([]string{"stuck-0", "stuck-1", "stuck-2"}, voting(o)); diff != "" {
		t.Fatalf("voting members: %s", diff)
	}
	if len(o.Members) != 3 {
		t.Errorf("members %+v, want the three voters only", o.Members)
	}
	if diff := cmpNames([]string{"Remove stuck-3"}, lc.steps); diff != "" {
		t.Errorf("steps: %s", diff)
	}
}

func id(o membership.Observed, name string) uint64 {
	for _, m := range o.Members {
		if m.Name == name {
			return m.ID
		}
	}
	return 0
}

// TestIntegrationScaleWithoutFailedWrites scales 3 -> 5 -> 3 while a writer
// writes continuously through the three original members, and requires every
// write to succeed and be readable afterwards.
func TestIntegrationScaleWithoutFailedWrites(t *testing.T) {
	scaleWithoutFailedWrites(t, newLocalCluster(t, "rw", 3))
}

// scaleWithoutFailedWrites scales lc from 3 to 5 members and back while a
// client writes, and fails t if a write fails or is lost.
func scaleWithoutFailedWrites(t *testing.T, lc *localCluster) {
	t.Helper()
	writer := etcdtest.RawClient(t, lc.running()...)

	var attempted, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := writer.Put(ctx, fmt.Sprintf("w/%08d", i), "v")
			cancel()
			attempted.Add(1)
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	lc.size = 5
	o := lc.converge(t.Context(), 90*time.Second)
	if len(voting(o)) != 5 {
		t.Errorf("after scale-up: voting %v", voting(o))
	}
	lc.size = 3
	o = lc.converge(t.Context(), 90*time.Second)
	if len(voting(o)) != 3 {
		t.Errorf("after scale-down: voting %v", voting(o))
	}
	close(stop)
	wg.Wait()

	n := attempted.Load()
	t.Logf("writes during 3 -> 5 -> 3: %d attempted, %d failed; steps %v", n, failed.Load(), lc.steps)
	if failed.Load() != 0 {
		t.Errorf("%d of %d writes failed; first: %v", failed.Load(), n, firstErr.Load())
	}
	resp, err := writer.Get(t.Context(), "w/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != n-failed.Load() {
		t.Errorf("%d keys stored, want %d", resp.Count, n-failed.Load())
	}
	if n < 100 {
		t.Errorf("only %d writes attempted; the writer did not overlap the scaling", n)
	}
}

func cmpNames(want, got []string) string {
	if slices.Equal(want, got) {
		return ""
	}
	return fmt.Sprintf("got %v, want %v", got, want)
}

// readyz asks a member's /readyz (etcdtest.Member.ReadyURL), as the
// readiness probe of its pod does.
func readyz(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return testkit.HTTPOK(ctx, url)
}

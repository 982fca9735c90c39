package defrag_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/opkit-dev/opkit/examples/etcd/internal/defrag"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdtest"
)

// cluster is a real etcd cluster and the steps carried out on it.
type cluster struct {
	t       *testing.T
	members []*etcdtest.Member
	client  etcdclient.Client
	raw     *clientv3.Client
	steps   []string
}

// observe reads every member's Status, as the controller does.
func (c *cluster) observe() []defrag.Member {
	c.t.Helper()
	var out []defrag.Member
	for _, m := range c.members {
		st, err := c.client.Status(c.t.Context(), m.ClientURL)
		if err != nil {
			c.t.Fatalf("status of %s: %v", m.Name, err)
		}
		out = append(out, defrag.Member{Name: m.Name, ID: st.ID, Healthy: st.Healthy(), Leader: st.Leader == st.ID,
			Learner: st.IsLearner, DBSize: st.DBSize, DBSizeInUse: st.DBSizeInUse})
	}
	return out
}

func (c *cluster) member(name string) *etcdtest.Member {
	i := slices.IndexFunc(c.members, func(m *etcdtest.Member) bool { return m.Name == name })
	return c.members[i]
}

// run plans and carries out steps until Plan has nothing to do, and
// returns the members as observed before the first step.
func (c *cluster) run(p defrag.Policy, pending []string) []defrag.Member {
	c.t.Helper()
	ctx := c.t.Context()
	first := c.observe()
	for range 10 {
		ms := c.observe()
		step := defrag.Plan(p, ms, pending)
		switch step.Action {
		case defrag.ActionNone:
			return first
		case defrag.ActionDefragment:
			if i := slices.IndexFunc(ms, func(m defrag.Member) bool { return m.Name == step.Member }); ms[i].Leader && len(ms) > 1 {
				c.t.Fatalf("Plan defragments the leader %s of a %d-member cluster", step.Member, len(ms))
			}
			if err := c.client.Defragment(ctx, c.member(step.Member).ClientURL); err != nil {
				c.t.Fatal(err)
			}
			pending = slices.DeleteFunc(pending, func(n string) bool { return n == step.Member })
			c.steps = append(c.steps, "defragment "+step.Member)
		case defrag.ActionMoveLeader:
			onLeader := etcdtest.Client(c.t, c.member(step.Member))
			if err := onLeader.MoveLeader(ctx, step.ToID); err != nil {
				c.t.Fatal(err)
			}
			c.waitLeader(step.ToID)
			c.steps = append(c.steps, fmt.Sprintf("move leader %s -> %s", step.Member, step.To))
		}
	}
	c.t.Fatalf("Plan still has steps after 10: %v", c.steps)
	return nil
}

// waitLeader waits until every member reports id as the leader.
func (c *cluster) waitLeader(id uint64) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		agreed := true
		for _, m := range c.observe() {
			agreed = agreed && m.Healthy && (m.ID == id) == m.Leader
		}
		if agreed {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("leadership did not move to %s", etcdclient.FormatID(id))
}

// checkShrunk checks that every member's file shrank by at least half of
// what was free before.
func (c *cluster) checkShrunk(before []defrag.Member) {
	c.t.Helper()
	after := c.observe()
	for i, b := range before {
		if limit := b.DBSize - b.Reclaimable()/2; after[i].DBSize > limit {
			c.t.Errorf("%s: dbSize %d -> %d, want at most %d (%d were free)", b.Name, b.DBSize, after[i].DBSize, limit, b.Reclaimable())
		}
	}
}

// TestRoundAndThresholdOnARealCluster fragments the database of a real
// three-member cluster, runs a scheduled round (every member, followers
// first, leadership moved away before the leader's turn), then fragments
// it again and lets the threshold pick the members. Every file must
// shrink, no member may be defragmented while it leads, and every key kept
// must be there afterwards, value for value.
func TestRoundAndThresholdOnARealCluster(t *testing.T) {
	ms := etcdtest.StartCluster(t, "dfr", 3)
	c := &cluster{t: t, members: ms, client: etcdtest.Client(t, ms...), raw: etcdtest.RawClient(t, ms...)}
	ctx := t.Context()
	want := map[string]string{}
	for i := range 100 {
		k, v := fmt.Sprintf("/app/keep/%03d", i), fmt.Sprintf("value-%d", i)
		if _, err := c.raw.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}

	etcdtest.Fragment(t, c.raw, "/app/", 3072, 1024)
	start := c.observe()
	order := defrag.Order(start)
	leader := order[len(order)-1]
	before := c.run(defrag.Policy{}, slices.Clone(order))
	wantSteps := []string{"defragment " + order[0], "defragment " + order[1],
		fmt.Sprintf("move leader %s -> %s", leader, order[0]), "defragment " + leader}
	if diff := cmp.Diff(wantSteps, c.steps); diff != "" {
		t.Errorf("round steps (-want +got):\n%s", diff)
	}
	c.checkShrunk(before)

	etcdtest.Fragment(t, c.raw, "/app/", 3072, 1024)
	c.steps = nil
	before = c.run(defrag.Policy{ThresholdPercent: 30, MinReclaimable: 1 << 20}, nil)
	if len(c.steps) < 3 {
		t.Errorf("threshold steps = %v, want every member defragmented", c.steps)
	}
	c.checkShrunk(before)
	if diff := cmp.Diff(want, etcdtest.Keys(t, c.raw, "/app/")); diff != "" {
		t.Errorf("keys after defragmenting (-want +got):\n%s", diff)
	}
}

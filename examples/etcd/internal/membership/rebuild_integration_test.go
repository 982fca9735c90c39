package membership_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdtest"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
)

// TestIntegrationQuorumLossRebuild: a 3-member cluster on real etcd loses
// two members with their data. Without opting in the planner only
// reports it; with Rebuild the survivor is restarted with
// --force-new-cluster, then without it, and the cluster grows back to 3
// voting members, every key written before the loss read back key by key
// from each member.
func TestIntegrationQuorumLossRebuild(t *testing.T) {
	lc := newLocalCluster(t, "qr", 3)
	lc.persistent = true
	lc.converge(t.Context(), 30*time.Second) // records the members
	w := etcdtest.RawClient(t, lc.running()...)
	want := map[string]string{}
	for i := range 200 {
		k, v := fmt.Sprintf("k/%04d", i), strings.Repeat(fmt.Sprint(i), 8)
		if _, err := w.Put(t.Context(), k, v); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	_ = w.Close()

	for _, name := range []string{"qr-0", "qr-2"} {
		lc.procs[name].Kill()
		lc.deletePod(name) // pod and claim gone for good
	}
	if s := membership.Plan(lc.observe(t.Context())); s.Action != membership.ActionWait || s.Reason != membership.ReasonQuorumLost {
		t.Fatalf("without opting in: %+v, want a wait with reason %s", s, membership.ReasonQuorumLost)
	}

	lc.rebuild = true
	start := time.Now()
	o := lc.converge(t.Context(), 120*time.Second)
	t.Logf("rebuilt in %s; steps %v", time.Since(start).Round(time.Millisecond), lc.steps)
	if diff := cmpNames([]string{"qr-0", "qr-1", "qr-2"}, voting(o)); diff != "" {
		t.Fatalf("voting members: %s", diff)
	}
	for _, want := range []string{"ForceNewCluster qr-1", "Upgrade qr-1", "AddLearner qr-0", "AddLearner qr-2"} {
		if !slices.Contains(lc.steps, want) {
			t.Errorf("steps %v lack %q", lc.steps, want)
		}
	}
	if lc.forced["qr-1"] {
		t.Error("qr-1 still runs with --force-new-cluster")
	}
	for _, m := range lc.running() {
		got := etcdtest.Keys(t, etcdtest.RawClient(t, m), "k/")
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("keys read from %s (-want +got):\n%s", m.Name, diff)
		}
	}
}

package controller_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
)

// TestFrozenMembersHoldAPassOnce: a member that stops answering (a stopped
// process, a stalled disk) holds its Status call until the call's timeout.
// Two of them must not hold a pass twice as long: with the members asked
// one after the other, every pass waited 10 s per frozen member.
func TestFrozenMembersHoldAPassOnce(t *testing.T) {
	g := newRig(t)
	g.create(cluster("a", 5))
	g.converge("a", 40)
	c := g.get("a")
	for _, name := range []string{"a-1", "a-3"} {
		g.fake.SetFrozen(controller.PeerURL(c, name), true)
	}
	start := time.Now()
	if err := g.pass("a"); err != nil {
		t.Logf("pass: %v", err)
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("a pass with 2 frozen members took %s, want under 8s (one status timeout, 5s)", took.Round(time.Millisecond))
	}
	healthy := map[string]bool{}
	for _, m := range g.get("a").Status.Members {
		healthy[m.Name] = m.Healthy
	}
	want := map[string]bool{"a-0": true, "a-1": false, "a-2": true, "a-3": false, "a-4": true}
	if diff := cmp.Diff(want, healthy); diff != "" {
		t.Errorf("members' health (-want +got):\n%s", diff)
	}
}

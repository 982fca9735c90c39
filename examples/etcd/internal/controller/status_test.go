package controller_test

import (
	"testing"

	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
)

// TestStatusMembersFollowTheStep: status.members, written at the end of a
// pass, holds what etcd has after the pass's step, not before it. A quorum
// loss rebuild trusts it when no member answers: a member promoted in the
// pass but recorded as a learner would not be a candidate to rebuild from,
// and a removed one would count as a voter lost.
func TestStatusMembersFollowTheStep(t *testing.T) {
	g := newRig(t)
	g.create(cluster("s", 3))
	check := func(pass int) {
		t.Helper()
		inEtcd := map[string]etcdclient.Member{}
		for _, m := range g.fake.Members() {
			inEtcd[etcdclient.FormatID(m.ID)] = m
		}
		for _, ms := range g.get("s").Status.Members {
			m, ok := inEtcd[ms.ID]
			switch {
			case !ok:
				t.Fatalf("after pass %d, status.members lists %s (%s), which etcd no longer has", pass, ms.Name, ms.ID)
			case m.IsLearner != ms.Learner:
				t.Fatalf("after pass %d, status.members has %s learner=%t, etcd learner=%t", pass, ms.Name, ms.Learner, m.IsLearner)
			}
		}
	}
	for i := 1; i <= 30; i++ {
		_ = g.pass("s")
		check(i)
		g.kubelet("s")
	}
	c := g.get("s")
	c.Spec.Size = 1
	if err := g.c.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	for i := 31; i <= 60; i++ {
		_ = g.pass("s")
		check(i)
		g.kubelet("s")
	}
	if n := len(g.fake.Members()); n != 1 {
		t.Errorf("%d members after scaling to 1, want 1", n)
	}
}

package membership

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

const v = "3.6.16"

func running(names ...string) []Pod {
	var out []Pod
	for _, n := range names {
		out = append(out, Pod{Name: n, Phase: PodRunning, Ready: true, Version: v})
	}
	return out
}

// healthy returns started, healthy voting members with IDs 1..n; the first is
// the leader.
func healthy(names ...string) []Member {
	var out []Member
	for i, n := range names {
		out = append(out, Member{ID: uint64(i + 1), Name: n, Started: true, Healthy: true, Leader: i == 0})
	}
	return out
}

// revised sets the pods' revision.
func revised(revision string, pods []Pod) []Pod {
	for i := range pods {
		pods[i].Revision = revision
	}
	return pods
}

func with(ms []Member, name string, f func(*Member)) []Member {
	for i := range ms {
		if ms[i].Name == name {
			f(&ms[i])
		}
	}
	return ms
}

func TestPlan(t *testing.T) {
	t.Parallel()
	three := func() []Member { return healthy("c-0", "c-1", "c-2") }
	tests := []struct {
		name string
		o    Observed
		want Step
	}{{
		name: "bootstrap creates the seed",
		o:    Observed{Cluster: "c", Size: 3, Version: v},
		want: Step{Action: ActionBootstrap, Name: "c-0", Version: v},
	}, {
		name: "seed pod exists but cluster not yet recorded as bootstrapped",
		o:    Observed{Cluster: "c", Size: 3, Version: v, Pods: running("c-0")},
		want: Step{Action: ActionWait, Reason: "Bootstrapping"},
	}, {
		name: "no member reachable",
		o:    Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Pods: running("c-0")},
		want: Step{Action: ActionWait, Reason: "Unreachable"},
	}, {
		name: "all pods and members lost",
		o:    Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true},
		want: Step{Action: ActionWait, Reason: "ClusterLost"},
	}, {
		name: "scale up adds a learner with the lowest free name",
		o: Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true,
			Pods: running("c-0", "c-2"), Members: healthy("c-0", "c-2")},
		want: Step{Action: ActionAddLearner, Name: "c-1", Version: v, Grows: true},
	}, {
		name: "learner added but pod creation failed: create the pod",
		o: Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true,
			Pods:    running("c-0"),
			Members: append(healthy("c-0"), Member{ID: 9, Name: "c-1", Learner: true})},
		want: Step{Action: ActionCreatePod, Name: "c-1", ID: 9, Version: v},
	}, {
		name: "learner pod starting: wait",
		o: Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true,
			Pods:    append(running("c-0"), Pod{Name: "c-1", Phase: PodPending, Version: v}),
			Members: append(healthy("c-0"), Member{ID: 9, Name: "c-1", Learner: true})},
		want: Step{Action: ActionWait, Reason: "MemberUnhealthy"},
	}, {
		name: "started healthy learner is promoted",
		o: Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true,
			Pods:    running("c-0", "c-1"),
			Members: append(healthy("c-0"), Member{ID: 9, Name: "c-1", Learner: true, Started: true, Healthy: true})},
		want: Step{Action: ActionPromote, Name: "c-1", ID: 9},
	}, {
		name: "steady state",
		o: Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true,
			Pods: running("c-0", "c-1", "c-2"), Members: three()},
		want: Step{Action: ActionNone, Reason: "Ready"},
	}, {
		name: "scale down removes the highest non-leader",
		o: Observed{Cluster: "c", Size: 1, Version: v, Bootstrapped: true, Reached: true,
			Pods: running("c-0", "c-1", "c-2"), Members: three()},
		want: Step{Action: ActionRemove, Name: "c-2", ID: 3},
	}, {
		name: "scale down skips the leader",
		o: Observed{Cluster: "c", Size: 2, Version: v, Bootstrapped: true, Reached: true,
			Pods: running("c-0", "c-1", "c-2"),
			Members: with(with(three(), "c-0", func(m *Member) { m.Leader = false }),
				"c-2", func(m *Member) { m.Leader = true })},
		want: Step{Action: ActionRemove, Name: "c-1", ID: 2},
	}, {
		name: "scale down waits while a member is unhealthy",
		o: Observed{Cluster: "c", Size: 1, Version: v, Bootstrapped: true, Reached: true,
			Pods:    running("c-0", "c-1", "c-2"),
			Members: with(three(), "c-1", func(m *Member) { m.Healthy = false })},
		want: Step{Action: ActionWait, Reason: "MemberUnhealthy"},
	}, {
		name: "scale up waits while a member is unhealthy",
		o: Observed{Cluster: "c", Size: 5, Version: v, Bootstrapped: true, Reached: true,
			Pods:    running("c-0", "c-1", "c-2"),
			Members: with(three(), "c-2", func(m *Member) { m.Healthy = false })},
		want: Step{Action: ActionWait, Reason: "MemberUnhealthy"},
	}, {
		name: "member removed but pod deletion failed: delete the pod",
		o: Observed{Cluster: "c", Size: 2, Version: v, Bootstrapped: true, Reached: true,
			Pods: running("c-0", "c-1", "c-2"), Members: healthy("c-0", "c-1")},
		want: Step{Action: ActionDeletePod, Name: "c-2"},
	}, {
		name: "deleted pod with persistent data is recreated",
		o: Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true, Persistent: true,
			Pods:    running("c-0", "c-2"),
			Members: with(three(), "c-1", func(m *Member) { m.Healthy = false }),
			Claims:  map[string]bool{"c-0": true, "c-1": true, "c-2": true}},
		want: Step{Action: ActionCreatePod, Name: "c-1", ID: 2, Version: v, OnData: true},
	}, {
		// Its data is gone: recreated under its old identity it would
		// rejoin with an empty raft log and could help elect a leader
		// missing acknowledged writes.
		name: "deleted pod whose persistent claim is gone too is removed for replacement",
		o: Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true, Persistent: true,
			Pods:    running("c-0", "c-2"),
			Members: with(three(), "c-1", func(m *Member) { m.Healthy = false }),
			Claims:  map[string]bool{"c-0": true, "c-2": true}},
		want: Step{Action: ActionRemove, Name: "c-1", ID: 2},
	}, {
		name: "deleted pod whose claim is gone is not removed when the rest is no healthy quorum",
		o: Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true, Persistent: true,
			Pods: running("c-0", "c-2"),
			Members: with(with(three(), "c-1", func(m *Member) { m.Healthy = false }),
				"c-2", func(m *Member) { m.Healthy = false }),
			Claims: map[string]bool{"c-0": true, "c-2": true}},
		want: Step{Action: ActionWait, Reason: "QuorumAtRisk"},
	}, {
		// Found by the fault campaign (seed 1, schedule 175): waiting on
		// c-1 left c-2 without a pod for good, though recreating it
		// restores the quorum that removing c-1 needs.
		name: "a member with its data is recreated before one without waits for a quorum",
		o: Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true, Persistent: true,
			Pods: running("c-0"),
			Members: with(with(three(), "c-1", func(m *Member) { m.Healthy = false }),
				"c-2", func(m *Member) { m.Healthy = false }),
			Claims: map[string]bool{"c-0": true, "c-2": true}},
		want: Step{Action: ActionCreatePod, Name: "c-2", ID: 3, Version: v, OnData: true, Reason: "MemberRecreated"},
	}, {
		// Found by e2e/etcdnodes: the pod of a member on a dead node,
		// evicted, stays Terminating until the node is declared gone; a
		// pod created under its name was an update the API server refused.
		name: "a member whose pod is Terminating is not recreated while the pod exists",
		o: Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true, Persistent: true,
			Pods:        running("c-0", "c-2"),
			Members:     with(three(), "c-1", func(m *Member) { m.Healthy = false }),
			Claims:      map[string]bool{"c-0": true, "c-1": true, "c-2": true},
			Terminating: map[string]bool{"c-1": true}},
		want: Step{Action: ActionWait, Reason: "MemberPodTerminating"},
	}, {
		name: "an added member whose pod is Terminating gets no pod while that one exists",
		o: Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true, Persistent: true,
			Pods:        running("c-0", "c-2"),
			Members:     with(three(), "c-1", func(m *Member) { m.Healthy, m.Started = false, false }),
			Claims:      map[string]bool{"c-0": true, "c-1": true, "c-2": true},
			Terminating: map[string]bool{"c-1": true}},
		want: Step{Action: ActionWait, Reason: "MemberPodTerminating"},
	}, {
		name: "deleted pod without data is removed for replacement",
		o: Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true,
			Pods:    running("c-0", "c-2"),
			Members: with(three(), "c-1", func(m *Member) { m.Healthy = false })},
		want: Step{Action: ActionRemove, Name: "c-1", ID: 2},
	}, {
		name: "replacement added after removal",
		o: Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true,
			Pods: running("c-0", "c-2"), Members: healthy("c-0", "c-2")},
		want: Step{Action: ActionAddLearner, Name: "c-1", Version: v, Grows: true},
	}, {
		name: "replacement does not take the name of a claim being deleted",
		o: Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true, Persistent: true,
			Pods: running("c-0", "c-2"), Members: healthy("c-0", "c-2"),
			Claims: map[string]bool{"c-0": true, "c-2": true}, ClaimsDeleting: map[string]bool{"c-1": true}},
		want: Step{Action: ActionAddLearner, Name: "c-3", Version: v, Grows: true},
	}, {
		name: "lost member not removed when the rest is no healthy quorum",
		o: Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true,
			Pods: running("c-0", "c-2"),
			Members: with(with(three(), "c-1", func(m *Member) { m.Healthy = false }),
				"c-2", func(m *Member) { m.Healthy = false })},
		want: Step{Action: ActionWait, Reason: "QuorumAtRisk"},
	}, {
		name: "failed pod is deleted",
		o: Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true, Persistent: true,
			Pods:    append(running("c-0", "c-2"), Pod{Name: "c-1", Phase: PodFailed, Version: v}),
			Members: three()},
		want: Step{Action: ActionDeletePod, Name: "c-1", ID: 2},
	}, {
		name: "upgrade goes to followers first",
		o: Observed{Cluster: "c", Size: 3, Version: "3.7.0", Bootstrapped: true, Reached: true, Persistent: true,
			Pods: running("c-0", "c-1", "c-2"), Members: three()},
		want: Step{Action: ActionUpgrade, Name: "c-1", ID: 2, Version: "3.7.0"},
	}, {
		name: "upgrade does the leader last",
		o: Observed{Cluster: "c", Size: 3, Version: "3.7.0", Bootstrapped: true, Reached: true, Persistent: true,
			Pods: []Pod{{Name: "c-0", Phase: PodRunning, Ready: true, Version: v},
				{Name: "c-1", Phase: PodRunning, Ready: true, Version: "3.7.0"}, {Name: "c-2", Phase: PodRunning, Ready: true, Version: "3.7.0"}},
			Members: three()},
		want: Step{Action: ActionUpgrade, Name: "c-0", ID: 1, Version: "3.7.0"},
	}, {
		// Without persistent data a member cannot be restarted: its
		// replacement joins first, so the cluster never has fewer voting
		// members than its size.
		name: "upgrade without persistent data adds the replacement first",
		o: Observed{Cluster: "c", Size: 3, Version: "3.7.0", Bootstrapped: true, Reached: true,
			Pods: running("c-0", "c-1", "c-2"), Members: three()},
		want: Step{Action: ActionAddLearner, Name: "c-3", Version: "3.7.0"},
	}, {
		name: "upgrade without persistent data: the replacement learner is waited for",
		o: Observed{Cluster: "c", Size: 3, Version: "3.7.0", Bootstrapped: true, Reached: true,
			Pods:    append(running("c-0", "c-1", "c-2"), Pod{Name: "c-3", Phase: PodPending, Version: "3.7.0"}),
			Members: append(three(), Member{ID: 4, Name: "c-3", Learner: true})},
		want: Step{Action: ActionWait, Reason: "MemberUnhealthy"},
	}, {
		name: "upgrade without persistent data: the caught-up replacement is promoted",
		o: Observed{Cluster: "c", Size: 3, Version: "3.7.0", Bootstrapped: true, Reached: true,
			Pods:    append(running("c-0", "c-1", "c-2"), Pod{Name: "c-3", Phase: PodRunning, Version: "3.7.0"}),
			Members: append(three(), Member{ID: 4, Name: "c-3", Learner: true, Started: true, Healthy: true})},
		want: Step{Action: ActionPromote, Name: "c-3", ID: 4},
	}, {
		name: "upgrade without persistent data: once the replacement votes, an outdated follower goes",
		o: Observed{Cluster: "c", Size: 3, Version: "3.7.0", Bootstrapped: true, Reached: true,
			Pods:    append(running("c-0", "c-1", "c-2"), Pod{Name: "c-3", Phase: PodRunning, Ready: true, Version: "3.7.0"}),
			Members: append(three(), Member{ID: 4, Name: "c-3", Started: true, Healthy: true})},
		want: Step{Action: ActionRemove, Name: "c-2", ID: 3},
	}, {
		name: "size 1 without persistent data: the upgrade adds the replacement first",
		o: Observed{Cluster: "c", Size: 1, Version: "3.7.0", Bootstrapped: true, Reached: true,
			Pods: running("c-0"), Members: healthy("c-0")},
		want: Step{Action: ActionAddLearner, Name: "c-1", Version: "3.7.0"},
	}, {
		name: "size 1 without persistent data: once the replacement votes, the outdated leader goes",
		o: Observed{Cluster: "c", Size: 1, Version: "3.7.0", Bootstrapped: true, Reached: true,
			Pods:    append(running("c-0"), Pod{Name: "c-1", Phase: PodRunning, Ready: true, Version: "3.7.0"}),
			Members: append(healthy("c-0"), Member{ID: 2, Name: "c-1", Started: true, Healthy: true})},
		want: Step{Action: ActionRemove, Name: "c-0", ID: 1},
	}, {
		name: "size 1 without persistent data: upgraded",
		o: Observed{Cluster: "c", Size: 1, Version: "3.7.0", Bootstrapped: true, Reached: true,
			Pods:    []Pod{{Name: "c-1", Phase: PodRunning, Ready: true, Version: "3.7.0"}},
			Members: healthy("c-1")},
		want: Step{Action: ActionNone, Reason: "Ready"},
	}, {
		// The scale-up to 4 added c-3, which never caught up; the size
		// went back to 3. Waiting for c-3 would block everything.
		name: "a learner that never caught up is removed once the size no longer needs it",
		o: Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true, Persistent: true,
			Pods:    append(running("c-0", "c-1", "c-2"), Pod{Name: "c-3", Phase: PodPending, Version: v}),
			Members: append(three(), Member{ID: 4, Name: "c-3", Learner: true})},
		want: Step{Action: ActionRemove, Name: "c-3", ID: 4},
	}, {
		name: "a stuck learner is removed before a scale-down below the voters",
		o: Observed{Cluster: "c", Size: 1, Version: v, Bootstrapped: true, Reached: true, Persistent: true,
			Pods:    append(running("c-0", "c-1", "c-2"), Pod{Name: "c-3", Phase: PodRunning, Version: v}),
			Members: append(three(), Member{ID: 4, Name: "c-3", Learner: true, Started: true})},
		want: Step{Action: ActionRemove, Name: "c-3", ID: 4},
	}, {
		name: "scale down removes an outdated follower before a current one",
		o: Observed{Cluster: "c", Size: 2, Version: "3.7.0", Bootstrapped: true, Reached: true, Persistent: true,
			Pods: []Pod{{Name: "c-0", Phase: PodRunning, Ready: true, Version: "3.7.0"},
				{Name: "c-1", Phase: PodRunning, Ready: true, Version: v}, {Name: "c-2", Phase: PodRunning, Ready: true, Version: "3.7.0"}},
			Members: three()},
		want: Step{Action: ActionRemove, Name: "c-1", ID: 2},
	}, {
		// Before, the upgrade waited for c-0 to become healthy on the
		// version it could not run: for good (issue #80, M5).
		name: "upgrade restarts the unhealthy member first, on its data",
		o: Observed{Cluster: "c", Size: 3, Version: "3.7.0", Bootstrapped: true, Reached: true, Persistent: true,
			Pods:    running("c-0", "c-1", "c-2"),
			Members: with(three(), "c-0", func(m *Member) { m.Healthy = false })},
		want: Step{Action: ActionUpgrade, Name: "c-0", ID: 1, Version: "3.7.0"},
	}, {
		name: "upgrade waits while a member on the new version is unhealthy",
		o: Observed{Cluster: "c", Size: 3, Version: "3.7.0", Bootstrapped: true, Reached: true, Persistent: true,
			Pods:    append(running("c-0", "c-1"), Pod{Name: "c-2", Phase: PodRunning, Ready: true, Version: "3.7.0"}),
			Members: with(three(), "c-2", func(m *Member) { m.Healthy = false })},
		want: Step{Action: ActionWait, Reason: "MemberUnhealthy"},
	}, {
		// etcd answering is not enough: a pod that has not passed its
		// readiness probe receives no client traffic, and taking a second
		// member down before it does leaves one serving member of three.
		// (One not Ready on the old version is itself restarted on the
		// new one: see "a member not Ready on the old version".)
		name: "upgrade waits while a healthy member's pod is not Ready",
		o: Observed{Cluster: "c", Size: 3, Version: "3.7.0", Bootstrapped: true, Reached: true, Persistent: true,
			Pods:    append(running("c-0", "c-2"), Pod{Name: "c-1", Phase: PodRunning, Version: "3.7.0"}),
			Members: three()},
		want: Step{Action: ActionWait, Reason: "MemberNotReady"},
	}, {
		name: "scale-up waits while a healthy member's pod is not Ready",
		o: Observed{Cluster: "c", Size: 5, Version: v, Bootstrapped: true, Reached: true, Persistent: true,
			Pods:    append(running("c-0", "c-1"), Pod{Name: "c-2", Phase: PodRunning, Version: v}),
			Members: three()},
		want: Step{Action: ActionWait, Reason: "MemberNotReady"},
	}, {
		name: "a caught-up learner is promoted before its pod is Ready",
		o: Observed{Cluster: "c", Size: 4, Version: v, Bootstrapped: true, Reached: true, Persistent: true,
			Pods:    append(running("c-0", "c-1", "c-2"), Pod{Name: "c-3", Phase: PodRunning, Version: v}),
			Members: append(three(), Member{ID: 4, Name: "c-3", Started: true, Learner: true, Healthy: true})},
		want: Step{Action: ActionPromote, Name: "c-3", ID: 4},
	}, {
		name: "a cluster whose pods are not all Ready is not Ready",
		o: Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true, Persistent: true,
			Pods:    append(running("c-0", "c-1"), Pod{Name: "c-2", Phase: PodRunning, Version: v}),
			Members: three()},
		want: Step{Action: ActionWait, Reason: "MemberNotReady"},
	}, {
		// spec.podTemplate and spec.repository change the pods, not the
		// version: they roll out like an upgrade, one member at a time.
		name: "a changed pod revision rolls followers first",
		o: Observed{Cluster: "c", Size: 3, Version: v, Revision: "new", Bootstrapped: true, Reached: true, Persistent: true,
			Pods: revised("old", running("c-0", "c-1", "c-2")), Members: three()},
		want: Step{Action: ActionUpgrade, Name: "c-1", ID: 2, Version: v},
	}, {
		name: "a changed pod revision rolls the leader last",
		o: Observed{Cluster: "c", Size: 3, Version: v, Revision: "new", Bootstrapped: true, Reached: true, Persistent: true,
			Pods: append(revised("old", running("c-0")), revised("new", running("c-1", "c-2"))...), Members: three()},
		want: Step{Action: ActionUpgrade, Name: "c-0", ID: 1, Version: v},
	}, {
		name: "a changed pod revision without persistent data adds the replacement first",
		o: Observed{Cluster: "c", Size: 3, Version: v, Revision: "new", Bootstrapped: true, Reached: true,
			Pods: revised("old", running("c-0", "c-1", "c-2")), Members: three()},
		want: Step{Action: ActionAddLearner, Name: "c-3", Version: v},
	}, {
		// A member that crash-loops or never gets Ready on what it runs
		// (too little memory, a bad version) is repaired by the rollout:
		// restarting it on its data takes nothing from the healthy ones.
		name: "an unhealthy member on the old revision is rolled first",
		o: Observed{Cluster: "c", Size: 3, Version: v, Revision: "new", Bootstrapped: true, Reached: true, Persistent: true,
			Pods: revised("old", running("c-0", "c-1", "c-2")), Members: with(three(), "c-2", func(m *Member) { m.Healthy = false })},
		want: Step{Action: ActionUpgrade, Name: "c-2", ID: 3, Version: v},
	}, {
		name: "a member not Ready on the old version is upgraded",
		o: Observed{Cluster: "c", Size: 3, Version: "3.7.0", Bootstrapped: true, Reached: true, Persistent: true,
			Pods:    append(running("c-0", "c-1"), Pod{Name: "c-2", Phase: PodRunning, Version: v}),
			Members: three()},
		want: Step{Action: ActionUpgrade, Name: "c-2", ID: 3, Version: "3.7.0"},
	}, {
		name: "an unhealthy member on the new revision waits; the healthy old ones are not rolled",
		o: Observed{Cluster: "c", Size: 3, Version: v, Revision: "new", Bootstrapped: true, Reached: true, Persistent: true,
			Pods:    append(revised("old", running("c-0", "c-1")), revised("new", running("c-2"))...),
			Members: with(three(), "c-2", func(m *Member) { m.Healthy = false })},
		want: Step{Action: ActionWait, Reason: "MemberUnhealthy"},
	}, {
		name: "an unhealthy member without persistent data waits",
		o: Observed{Cluster: "c", Size: 3, Version: v, Revision: "new", Bootstrapped: true, Reached: true,
			Pods: revised("old", running("c-0", "c-1", "c-2")), Members: with(three(), "c-2", func(m *Member) { m.Healthy = false })},
		want: Step{Action: ActionWait, Reason: "MemberUnhealthy"},
	}, {
		name: "a cluster whose pods all have the revision is Ready",
		o: Observed{Cluster: "c", Size: 3, Version: v, Revision: "new", Bootstrapped: true, Reached: true, Persistent: true,
			Pods: revised("new", running("c-0", "c-1", "c-2")), Members: three()},
		want: Step{Action: ActionNone, Reason: "Ready"},
	}, {
		// Pods made before the operator recorded revisions are not
		// restarted by an operator upgrade.
		name: "a pod without a revision is not rolled",
		o: Observed{Cluster: "c", Size: 3, Version: v, Revision: "new", Bootstrapped: true, Reached: true, Persistent: true,
			Pods: running("c-0", "c-1", "c-2"), Members: three()},
		want: Step{Action: ActionNone, Reason: "Ready"},
	}, {
		name: "upgraded pod still pending: wait",
		o: Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true, Persistent: true,
			Pods:    append(running("c-0", "c-2"), Pod{Name: "c-1", Phase: PodPending, Version: v}),
			Members: three()},
		want: Step{Action: ActionWait, Reason: "MemberStarting"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Plan(tt.o)
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(Step{}, "Message"), ignoreReasonUnlessWait(tt.want)); diff != "" {
				t.Errorf("Plan() mismatch (-want +got):\n%s\nmessage: %s", diff, got.Message)
			}
			if got.Message == "" {
				t.Errorf("Plan() returned no message")
			}
		})
	}
}

// ignoreReasonUnlessWait compares reasons only for Wait and None steps,
// whose reason is the point of the test.
func ignoreReasonUnlessWait(want Step) cmp.Option {
	if want.Action == ActionWait || want.Action == ActionNone {
		return cmp.Options{}
	}
	return cmpopts.IgnoreFields(Step{}, "Reason")
}

// TestPlanNeverLosesQuorum checks, over every combination of up to 7
// members' health and leadership, that a Remove step never leaves fewer
// healthy voting members than a quorum of those that remain, and that no
// membership change happens while a member is unhealthy except removing a
// lost one.
func TestPlanNeverLosesQuorum(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 7; n++ {
		for mask := 0; mask < 1<<n; mask++ {
			for size := 1; size <= 9; size++ {
				names := make([]string, n)
				for i := range names {
					names[i] = "c-" + string(rune('0'+i))
				}
				ms := healthy(names...)
				healthyCount := 0
				for i := range ms {
					ms[i].Healthy = mask&(1<<i) != 0
					if ms[i].Healthy {
						healthyCount++
					}
				}
				o := Observed{Cluster: "c", Size: size, Version: v, Bootstrapped: true, Reached: true,
					Pods: running(names...), Members: ms}
				got := Plan(o)
				switch got.Action {
				case ActionRemove:
					h := healthyCount
					for _, m := range ms {
						if m.ID == got.ID && m.Healthy {
							h--
						}
					}
					if h < Quorum(n-1) {
						t.Fatalf("n=%d healthy=%b size=%d: %+v leaves %d healthy of %d", n, mask, size, got, h, n-1)
					}
					if healthyCount != n {
						t.Fatalf("n=%d healthy=%b size=%d: removal while unhealthy: %+v", n, mask, size, got)
					}
				case ActionAddLearner, ActionUpgrade, ActionPromote:
					if healthyCount != n {
						t.Fatalf("n=%d healthy=%b size=%d: %s while a member is unhealthy", n, mask, size, got.Action)
					}
				}
			}
		}
	}
}

// TestPlanBootstrap covers a new cluster whose seed pod exists but which
// has never answered: Plan waits for the seed, and reports the wait as stuck
// once the seed pod is older than the bootstrap timeout, whatever the pod's
// phase, and never deletes or adds anything meanwhile.
func TestPlanBootstrap(t *testing.T) {
	t.Parallel()
	const timeout = 5 * time.Minute
	seed := func(phase PodPhase, age time.Duration) []Pod {
		return []Pod{{Name: "c-0", Phase: phase, Version: v, Age: age}}
	}
	tests := []struct {
		name string
		o    Observed
		// timeout is Timeouts.Bootstrap.
		timeout  time.Duration
		want     Step
		wantText []string
	}{{
		name:     "seed pod pending, within the timeout",
		o:        Observed{Pods: seed(PodPending, time.Minute)},
		timeout:  timeout,
		want:     Step{Action: ActionWait, Reason: ReasonBootstrapping},
		wantText: []string{"c-0", "Pending"},
	}, {
		name:     "seed pod running but not answering, within the timeout",
		o:        Observed{Pods: seed(PodRunning, timeout-time.Second)},
		timeout:  timeout,
		want:     Step{Action: ActionWait, Reason: ReasonBootstrapping},
		wantText: []string{"c-0", "Running"},
	}, {
		name:     "seed pod running but not answering, at the timeout",
		o:        Observed{Pods: seed(PodRunning, timeout)},
		timeout:  timeout,
		want:     Step{Action: ActionWait, Reason: ReasonBootstrapTimeout, Stuck: true},
		wantText: []string{"c-0", "5m0s", "Running"},
	}, {
		name:     "seed pod still pending after the timeout",
		o:        Observed{Pods: seed(PodPending, time.Hour)},
		timeout:  timeout,
		want:     Step{Action: ActionWait, Reason: ReasonBootstrapTimeout, Stuck: true},
		wantText: []string{"c-0", "5m0s", "Pending"},
	}, {
		name:     "seed pod failed after the timeout",
		o:        Observed{Pods: seed(PodFailed, time.Hour)},
		timeout:  timeout,
		want:     Step{Action: ActionWait, Reason: ReasonBootstrapTimeout, Stuck: true},
		wantText: []string{"c-0", "Failed"},
	}, {
		name: "the lowest-named pod is the seed",
		o: Observed{Pods: []Pod{{Name: "c-1", Phase: PodPending, Version: v, Age: time.Hour},
			{Name: "c-0", Phase: PodRunning, Version: v, Age: time.Minute}}},
		timeout:  timeout,
		want:     Step{Action: ActionWait, Reason: ReasonBootstrapping},
		wantText: []string{"c-0"},
	}, {
		name:     "a zero timeout never expires",
		o:        Observed{Pods: seed(PodRunning, 1000*time.Hour)},
		want:     Step{Action: ActionWait, Reason: ReasonBootstrapping},
		wantText: []string{"c-0"},
	}, {
		name:     "no seed pod yet: create it",
		o:        Observed{},
		timeout:  timeout,
		want:     Step{Action: ActionBootstrap, Name: "c-0", Version: v, Reason: ReasonBootstrapping},
		wantText: []string{"c-0"},
	}, {
		name:     "bootstrapped, then unreachable: the bootstrap timeout no longer applies",
		o:        Observed{Bootstrapped: true, Pods: seed(PodRunning, time.Hour)},
		timeout:  timeout,
		want:     Step{Action: ActionWait, Reason: "Unreachable"},
		wantText: []string{"no member answers"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := tt.o
			o.Cluster, o.Size, o.Version = "c", 3, v
			o.Timeouts.Bootstrap = tt.timeout
			got := Plan(o)
			checkStep(t, tt.want, tt.wantText, got)
		})
	}
}

// TestPlanStuckMembers covers members that take longer than
// Timeouts.MemberStart: a pod still Pending and a learner that has not
// started, become healthy or been promoted are reported as Stuck with a
// reason and a message naming the member and what it waits on; nothing is
// removed or deleted because of it, and the same states within the timeout
// are ordinary waits.
func TestPlanStuckMembers(t *testing.T) {
	t.Parallel()
	const timeout = 10 * time.Minute
	pod := func(name string, phase PodPhase, age time.Duration) Pod {
		return Pod{Name: name, Phase: phase, Ready: phase == PodRunning, Version: v, Age: age}
	}
	learner := func(started, healthy bool) Member {
		return Member{ID: 9, Name: "c-1", Learner: true, Started: started, Healthy: healthy}
	}
	tests := []struct {
		name     string
		pods     []Pod
		members  []Member
		timeout  time.Duration
		want     Step
		wantText []string
	}{{
		name:     "learner pod pending within the timeout",
		pods:     append(running("c-0"), pod("c-1", PodPending, timeout-time.Second)),
		members:  append(healthy("c-0"), learner(false, false)),
		timeout:  timeout,
		want:     Step{Action: ActionWait, Reason: "MemberUnhealthy"},
		wantText: []string{"c-1"},
	}, {
		name:     "learner pod pending past the timeout",
		pods:     append(running("c-0"), pod("c-1", PodPending, timeout)),
		members:  append(healthy("c-0"), learner(false, false)),
		timeout:  timeout,
		want:     Step{Action: ActionWait, Reason: ReasonMemberPodPending, Stuck: true},
		wantText: []string{"c-1", "Pending", "10m0s", "scheduled"},
	}, {
		name:     "learner pod running, member never joined",
		pods:     append(running("c-0"), pod("c-1", PodRunning, time.Hour)),
		members:  append(healthy("c-0"), learner(false, false)),
		timeout:  timeout,
		want:     Step{Action: ActionWait, Reason: ReasonLearnerNotCaughtUp, Stuck: true},
		wantText: []string{"learner c-1", "not joined", "10m0s"},
	}, {
		name:     "learner joined but never healthy",
		pods:     append(running("c-0"), pod("c-1", PodRunning, time.Hour)),
		members:  append(healthy("c-0"), learner(true, false)),
		timeout:  timeout,
		want:     Step{Action: ActionWait, Reason: ReasonLearnerNotCaughtUp, Stuck: true},
		wantText: []string{"learner c-1", "not become healthy", "10m0s"},
	}, {
		name:     "healthy learner within the timeout is promoted",
		pods:     append(running("c-0"), pod("c-1", PodRunning, time.Minute)),
		members:  append(healthy("c-0"), learner(true, true)),
		timeout:  timeout,
		want:     Step{Action: ActionPromote, Name: "c-1", ID: 9, Reason: "PromotingLearner"},
		wantText: []string{"c-1"},
	}, {
		name:     "healthy learner past the timeout: promotion still tried, reported as stuck",
		pods:     append(running("c-0"), pod("c-1", PodRunning, time.Hour)),
		members:  append(healthy("c-0"), learner(true, true)),
		timeout:  timeout,
		want:     Step{Action: ActionPromote, Name: "c-1", ID: 9, Reason: ReasonLearnerNotCaughtUp, Stuck: true},
		wantText: []string{"learner c-1", "caught up with the leader", "10m0s"},
	}, {
		name:     "recreated voting member's pod pending past the timeout",
		pods:     append(running("c-0", "c-2"), pod("c-1", PodPending, time.Hour)),
		members:  with(healthy("c-0", "c-1", "c-2"), "c-1", func(m *Member) { m.Healthy = false }),
		timeout:  timeout,
		want:     Step{Action: ActionWait, Reason: ReasonMemberPodPending, Stuck: true},
		wantText: []string{"member c-1", "Pending"},
	}, {
		name:     "old voting member unhealthy with a running pod: not stuck",
		pods:     []Pod{pod("c-0", PodRunning, time.Hour), pod("c-1", PodRunning, time.Hour), pod("c-2", PodRunning, time.Hour)},
		members:  with(healthy("c-0", "c-1", "c-2"), "c-1", func(m *Member) { m.Healthy = false }),
		timeout:  timeout,
		want:     Step{Action: ActionWait, Reason: "MemberUnhealthy"},
		wantText: []string{"c-1"},
	}, {
		name:     "a zero timeout never expires",
		pods:     append(running("c-0"), pod("c-1", PodPending, 1000*time.Hour)),
		members:  append(healthy("c-0"), learner(false, false)),
		want:     Step{Action: ActionWait, Reason: "MemberUnhealthy"},
		wantText: []string{"c-1"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Reached: true, Persistent: true,
				Pods: tt.pods, Members: tt.members, Timeouts: Timeouts{MemberStart: tt.timeout}}
			got := Plan(o)
			checkStep(t, tt.want, tt.wantText, got)
		})
	}
}

// checkStep compares got with want, ignoring the message, and checks that
// the message mentions every string of wantText.
func checkStep(t *testing.T, want Step, wantText []string, got Step) {
	t.Helper()
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(Step{}, "Message")); diff != "" {
		t.Errorf("Plan() mismatch (-want +got):\n%s\nmessage: %s", diff, got.Message)
	}
	for _, w := range wantText {
		if !strings.Contains(got.Message, w) {
			t.Errorf("message %q does not mention %q", got.Message, w)
		}
	}
}

func TestCheckUpgrade(t *testing.T) {
	t.Parallel()
	tests := []struct {
		from, to string
		ok       bool
	}{
		{"", "3.6.16", true},
		{"3.6.16", "3.6.16", true},
		{"3.6.15", "3.6.16", true},
		{"3.6.16", "3.6.15", true},
		{"3.5.21", "3.6.16", false}, // below the 3.5.26 etcd requires before 3.6
		{"3.5.25", "3.6.0", false},
		{"3.5.26", "3.6.16", true},
		{"3.5.35", "3.6.16", true},
		{"3.5.21", "3.5.26", true},
		{"3.6.16", "3.5.21", false},
		{"3.4.30", "3.6.16", false},
		{"3.6.16", "4.0.0", false},
		{"3.6.16", "3.6", false},
	}
	for _, tt := range tests {
		err := CheckUpgrade(tt.from, tt.to)
		if (err == nil) != tt.ok {
			t.Errorf("CheckUpgrade(%q, %q) = %v, want ok=%v", tt.from, tt.to, err, tt.ok)
		}
	}
}

func TestCheckRestore(t *testing.T) {
	t.Parallel()
	tests := []struct {
		backup, cluster string
		ok              bool
	}{
		{"3.6.16", "3.6.16", true},
		{"3.6.16", "3.6.2", true},
		{"3.5.35", "3.6.16", true},
		{"", "3.6.16", true},
		{"3.7.0", "3.6.16", false},
		{"4.0.0", "3.6.16", false},
		{"3.6.16", "3.5.35", false},
	}
	for _, tt := range tests {
		if err := CheckRestore(tt.backup, tt.cluster); (err == nil) != tt.ok {
			t.Errorf("CheckRestore(%q, %q) = %v, want ok=%v", tt.backup, tt.cluster, err, tt.ok)
		}
	}
}

// recorded returns members as status.members records them: IDs 1..n.
func recorded(names ...string) []Member {
	var out []Member
	for i, n := range names {
		out = append(out, Member{ID: uint64(i + 1), Name: n})
	}
	return out
}

func claims(names ...string) map[string]bool {
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// TestPlanRecreatesRecordedMembers: when no member answers, a member
// recorded in status whose pod is gone is recreated on its claim with
// persistent storage, one pod per pass; without its claim, or without
// persistent storage, the cluster waits.
func TestPlanRecreatesRecordedMembers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		o        Observed
		want     Step
		wantText []string
	}{{
		name: "size 1, pod gone, persistent: recreate it on its claim",
		o: Observed{Size: 1, Persistent: true,
			Recorded: recorded("c-0"), Claims: claims("c-0")},
		want:     Step{Action: ActionCreatePod, Name: "c-0", ID: 1, Version: v, OnData: true, Reason: "MemberRecreated"},
		wantText: []string{"c-0"},
	}, {
		name: "size 3, all pods gone: the lowest first",
		o: Observed{Size: 3, Persistent: true,
			Recorded: recorded("c-2", "c-0", "c-1"), Claims: claims("c-0", "c-1", "c-2")},
		want: Step{Action: ActionCreatePod, Name: "c-0", ID: 2, Version: v, OnData: true, Reason: "MemberRecreated"},
	}, {
		name: "size 3, one pod recreated and starting: the next",
		o: Observed{Size: 3, Persistent: true, Pods: []Pod{{Name: "c-0", Phase: PodPending, Version: v}},
			Recorded: recorded("c-0", "c-1", "c-2"), Claims: claims("c-0", "c-1", "c-2")},
		want: Step{Action: ActionCreatePod, Name: "c-1", ID: 2, Version: v, OnData: true, Reason: "MemberRecreated"},
	}, {
		name: "a missing pod is recreated while the others run but do not answer",
		o: Observed{Size: 3, Persistent: true, Pods: running("c-0", "c-2"),
			Recorded: recorded("c-0", "c-1", "c-2"), Claims: claims("c-0", "c-1", "c-2")},
		want: Step{Action: ActionCreatePod, Name: "c-1", ID: 2, Version: v, OnData: true, Reason: "MemberRecreated"},
	}, {
		name: "a failed pod is deleted first, keeping its data",
		o: Observed{Size: 1, Persistent: true, Pods: []Pod{{Name: "c-0", Phase: PodFailed, Version: v}},
			Recorded: recorded("c-0"), Claims: claims("c-0")},
		want: Step{Action: ActionDeletePod, Name: "c-0", ID: 1, Reason: "MemberFailed"},
	}, {
		name: "every recorded pod exists: unreachable, as before",
		o: Observed{Size: 3, Persistent: true, Pods: running("c-0", "c-1", "c-2"),
			Recorded: recorded("c-0", "c-1", "c-2"), Claims: claims("c-0", "c-1", "c-2")},
		want: Step{Action: ActionWait, Reason: "Unreachable"},
	}, {
		name: "a recorded member whose pod is Terminating is not recreated while the pod exists",
		o: Observed{Size: 3, Persistent: true, Pods: running("c-0", "c-2"), Terminating: claims("c-1"),
			Recorded: recorded("c-0", "c-1", "c-2"), Claims: claims("c-0", "c-1", "c-2")},
		want: Step{Action: ActionWait, Reason: "Unreachable"},
	}, {
		name: "ephemeral storage: no recreation, the cluster is lost",
		o: Observed{Size: 1,
			Recorded: recorded("c-0"), Claims: claims("c-0")},
		want: Step{Action: ActionWait, Reason: "ClusterLost"},
	}, {
		name: "ephemeral storage, others running: unreachable",
		o: Observed{Size: 3, Pods: running("c-0", "c-2"),
			Recorded: recorded("c-0", "c-1", "c-2")},
		want: Step{Action: ActionWait, Reason: "Unreachable"},
	}, {
		name: "claim missing: wait, naming the member",
		o: Observed{Size: 1, Persistent: true,
			Recorded: recorded("c-0")},
		want:     Step{Action: ActionWait, Reason: ReasonMemberDataLost},
		wantText: []string{"c-0", "restore from a backup"},
	}, {
		name: "claim missing for one member: the others are recreated first",
		o: Observed{Size: 3, Persistent: true,
			Recorded: recorded("c-0", "c-1", "c-2"), Claims: claims("c-1", "c-2")},
		want: Step{Action: ActionCreatePod, Name: "c-1", ID: 2, Version: v, OnData: true, Reason: "MemberRecreated"},
	}, {
		name: "claim missing, the others running but not answering: wait, naming it",
		o: Observed{Size: 3, Persistent: true, Pods: running("c-1", "c-2"),
			Recorded: recorded("c-0", "c-1", "c-2"), Claims: claims("c-1", "c-2")},
		want:     Step{Action: ActionWait, Reason: ReasonMemberDataLost},
		wantText: []string{"c-0"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := tt.o
			o.Cluster, o.Version, o.Bootstrapped = "c", v, true
			got := Plan(o)
			checkStep(t, tt.want, tt.wantText, got)
		})
	}
}

// TestPlanRecreatesAllPodsOnePerPass: a size-3 cluster whose pods are all
// gone gets them back one per pass while no member answers.
func TestPlanRecreatesAllPodsOnePerPass(t *testing.T) {
	t.Parallel()
	o := Observed{Cluster: "c", Size: 3, Version: v, Bootstrapped: true, Persistent: true,
		Recorded: recorded("c-0", "c-1", "c-2"), Claims: claims("c-0", "c-1", "c-2")}
	var created []string
	for range 5 {
		s := Plan(o)
		if s.Action != ActionCreatePod {
			if s.Action != ActionWait || s.Reason != "Unreachable" {
				t.Fatalf("after creating %v: %+v, want Wait Unreachable", created, s)
			}
			break
		}
		created = append(created, s.Name)
		o.Pods = append(o.Pods, Pod{Name: s.Name, Phase: PodPending, Version: v})
	}
	if diff := cmp.Diff([]string{"c-0", "c-1", "c-2"}, created); diff != "" {
		t.Errorf("pods created (-want +got):\n%s", diff)
	}
}

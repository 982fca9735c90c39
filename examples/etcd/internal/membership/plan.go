package membership

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

func wait(reason, format string, args ...any) Step {
	return Step{Action: ActionWait, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// stuck returns a Wait step that exceeded its timeout.
func stuck(reason, format string, args ...any) Step {
	s := wait(reason, format, args...)
	s.Stuck = true
	return s
}

// expired reports whether a wait that began age ago exceeded timeout.
func expired(timeout, age time.Duration) bool { return timeout > 0 && age >= timeout }

// Plan returns the next step for the cluster described by o: the step of
// the first rule (see the package documentation) that has one.
func Plan(o Observed) Step {
	if !o.Bootstrapped {
		return bootstrap(o)
	}
	if !o.Reached {
		return unreached(o)
	}
	v := newView(o)
	for _, rule := range []func(view) (Step, bool){finishHalfDone, finishRebuild, replaceLost, settle, scale, rollOut} {
		if s, ok := rule(v); ok {
			return s
		}
	}
	return Step{Action: ActionNone, Reason: "Ready", Message: fmt.Sprintf("%d members running %s", v.voters, o.Version)}
}

// view is a reached cluster as the rules read it.
type view struct {
	o Observed
	// pods by name; members sorted by name, and by name in known.
	pods    map[string]Pod
	members []Member
	known   map[string]Member
	// voters counts the voting members, healthyVoters the healthy ones.
	voters, healthyVoters int
}

func newView(o Observed) view {
	v := view{o: o, pods: make(map[string]Pod, len(o.Pods)), members: slices.Clone(o.Members), known: make(map[string]Member, len(o.Members))}
	for _, p := range o.Pods {
		v.pods[p.Name] = p
	}
	slices.SortFunc(v.members, func(a, b Member) int { return compareNames(a.Name, b.Name) })
	for _, m := range v.members {
		v.known[m.Name] = m
		if !m.Learner {
			v.voters++
			if m.Healthy {
				v.healthyVoters++
			}
		}
	}
	return v
}

// bootstrap is rule 1: a cluster that has never answered gets its seed,
// and then waits for it.
func bootstrap(o Observed) Step {
	if len(o.Pods) > 0 {
		return bootstrapping(o)
	}
	name := o.Cluster + "-0"
	return Step{Action: ActionBootstrap, Name: name, Version: o.Version, Reason: ReasonBootstrapping,
		Message: fmt.Sprintf("creating seed member %s", name)}
}

// unreached is rule 3 for a cluster no member answers: members with their
// data get their pods back; a quorum lost for good is rebuilt (rule 7) or
// reported; otherwise the cluster waits.
func unreached(o Observed) Step {
	pods := make(map[string]Pod, len(o.Pods))
	for _, p := range o.Pods {
		pods[p.Name] = p
	}
	if o.RebuildingFrom != "" {
		return rebuilding(o, pods)
	}
	if s, ok := recreateRecorded(o, pods); ok {
		if s.Action == ActionWait && s.Reason == ReasonMemberDataLost {
			if r, ok := rebuild(o); ok {
				return r
			}
			if r, ok := rebuildFromBackup(o); ok {
				return r
			}
		}
		return s
	}
	if len(o.Pods) == 0 {
		if r, ok := rebuildFromBackup(o); ok {
			return r
		}
		return wait(ReasonClusterLost, "no member pod exists and no member answers; restore from a backup (with spec.recovery.quorumLoss Rebuild and spec.backup.storeRef the cluster rebuilds itself from its newest backup)")
	}
	return wait("Unreachable", "no member answers")
}

// finishHalfDone is rule 2: a member etcd knows without a pod gets one (an
// add interrupted after MemberAddAsLearner); a pod etcd does not know is
// deleted (a removal interrupted after MemberRemove).
func finishHalfDone(v view) (Step, bool) {
	for _, m := range v.members {
		if _, ok := v.pods[m.Name]; !ok && !m.Started && !v.o.Terminating[m.Name] {
			return Step{Action: ActionCreatePod, Name: m.Name, ID: m.ID, Version: v.o.Version, Reason: "MemberAdded",
				Message: fmt.Sprintf("creating pod for added member %s", m.Name)}, true
		}
	}
	for _, p := range sortedPods(v.o.Pods) {
		if _, ok := v.known[p.Name]; !ok {
			return Step{Action: ActionDeletePod, Name: p.Name, Reason: "MemberRemoved",
				Message: fmt.Sprintf("deleting pod %s of a removed member", p.Name)}, true
		}
	}
	return Step{}, false
}

// replaceLost is rule 3 for a reached cluster: a member whose pod failed
// has it deleted; one whose pod is gone is recreated on its data, or,
// without its data, removed (a replacement is added by scale). Members
// that can come back on their data go first: they may restore the quorum
// that a removal needs.
func replaceLost(v view) (Step, bool) {
	var dataLost *Member
	terminating := ""
	for i, m := range v.members {
		p, ok := v.pods[m.Name]
		switch {
		case ok && p.Phase != PodFailed:
		case ok:
			// Deleting the failed pod makes it "gone" on the next pass.
			return Step{Action: ActionDeletePod, Name: m.Name, ID: m.ID, Reason: "MemberFailed",
				Message: fmt.Sprintf("deleting failed pod %s", m.Name)}, true
		case v.o.Terminating[m.Name]:
			// A pod of that name cannot be created until this one is gone.
			if terminating == "" {
				terminating = m.Name
			}
		case hasData(v.o, m.Name):
			return Step{Action: ActionCreatePod, Name: m.Name, ID: m.ID, Version: v.o.Version, OnData: true, Reason: "MemberRecreated",
				Message: fmt.Sprintf("recreating pod %s on its data", m.Name)}, true
		case dataLost == nil:
			dataLost = &v.members[i]
		}
	}
	if m := dataLost; m != nil {
		// Without its data (ephemeral storage, or its claim is gone) the
		// member can never come back: recreated under its old identity it
		// would rejoin with an empty raft log and could help elect a
		// leader that lacks acknowledged writes. Remove it; a replacement
		// with a new identity is added afterwards. The others must be a
		// healthy quorum of what remains.
		remaining, healthyRemaining := v.voters, v.healthyVoters
		if !m.Learner {
			remaining--
			if m.Healthy {
				healthyRemaining--
			}
		}
		if remaining == 0 || healthyRemaining < Quorum(remaining) {
			return wait("QuorumAtRisk", "member %s lost its pod and data, but removing it would leave %d of %d healthy voting members", m.Name, healthyRemaining, remaining), true
		}
		return Step{Action: ActionRemove, Name: m.Name, ID: m.ID, Reason: "MemberLost",
			Message: fmt.Sprintf("removing member %s, which lost its pod and data, to replace it", m.Name)}, true
	}
	if terminating != "" {
		return wait(ReasonMemberPodTerminating, "the pod of member %s is being deleted; it is recreated once the pod is gone. "+
			"On a node that does not answer the pod stays until the Node is deleted or tainted node.kubernetes.io/out-of-service=nodeshutdown:NoExecute", terminating), true
	}
	return Step{}, false
}

// settle is rule 4: a learner the cluster does not need is removed, a
// caught-up learner promoted, an unwell member with persistent data not on
// the desired version and revision moved to them; otherwise the cluster
// waits for every member to be healthy and Ready. Waits past
// Timeouts.MemberStart are reported as stuck.
func settle(v view) (Step, bool) {
	if s, ok := unneededLearner(v.o, v.members, v.pods, v.voters); ok {
		return s, true
	}
	for _, m := range v.members {
		if m.Learner && m.Started && m.Healthy {
			s := Step{Action: ActionPromote, Name: m.Name, ID: m.ID, Reason: "PromotingLearner",
				Message: fmt.Sprintf("promoting learner %s", m.Name)}
			if expired(v.o.Timeouts.MemberStart, v.pods[m.Name].Age) {
				// etcd refuses to promote a learner that lags behind
				// the leader; it has had its time.
				s.Reason, s.Stuck = ReasonLearnerNotCaughtUp, true
				s.Message = fmt.Sprintf("promoting learner %s, still a learner %s after its pod was created (member start timeout); etcd refuses the promotion until it has caught up with the leader",
					m.Name, v.o.Timeouts.MemberStart)
			}
			return s, true
		}
	}
	for _, m := range v.members {
		p, hasPod := v.pods[m.Name]
		// A member unwell on what it runs (too little memory, a bad
		// version) is repaired by the rollout: restarted on its data, it
		// takes nothing from the healthy members. Waiting for it first
		// would wait for good.
		unwell := !m.Started || !m.Healthy || p.Phase != PodRunning || !p.Ready
		if unwell && hasPod && v.o.Persistent && !current(v.o, p) {
			return upgrade(v.o, m, p, v.pods, v.known), true
		}
		if s, ok := stuckMember(v.o, m, p); ok {
			return s, true
		}
		if !m.Started || !m.Healthy {
			return wait("MemberUnhealthy", "waiting for member %s to become healthy", m.Name), true
		}
		if p.Phase != PodRunning {
			return wait("MemberStarting", "waiting for pod %s to run", m.Name), true
		}
		// A member etcd calls healthy may not receive client traffic
		// yet: changing another member before this one's pod is Ready
		// would leave fewer members serving than the change assumes.
		if !p.Ready {
			return wait(ReasonMemberNotReady, "waiting for pod %s to pass its readiness probe (etcd's /readyz)", m.Name), true
		}
	}
	return Step{}, false
}

// scale is rule 5: one learner added below the size, one voting member
// removed above it.
func scale(v view) (Step, bool) {
	o := v.o
	if v.voters < o.Size {
		name := nextName(o, v.pods, v.known)
		return Step{Action: ActionAddLearner, Name: name, Version: o.Version, Reason: "ScalingUp", Grows: true,
			Message: fmt.Sprintf("adding member %s (%d of %d)", name, v.voters+1, o.Size)}, true
	}
	if v.voters == o.Size {
		return Step{}, false
	}
	m, ok := removable(o, v.members, v.pods)
	if !ok {
		return wait("NoLeader", "no non-leader member to remove"), true
	}
	if v.healthyVoters-1 < Quorum(v.voters-1) {
		return wait("QuorumAtRisk", "removing %s would leave no healthy quorum", m.Name), true
	}
	reason, msg := "ScalingDown", fmt.Sprintf("removing member %s (%d to %d)", m.Name, v.voters, v.voters-1)
	if v.voters-1 == o.Size && !current(o, v.pods[m.Name]) {
		reason, msg = rollout(o, v.pods[m.Name]), fmt.Sprintf("removing member %s (%s), replaced by a member running %s", m.Name, v.pods[m.Name].Version, o.Version)
	}
	return Step{Action: ActionRemove, Name: m.Name, ID: m.ID, Reason: reason, Message: msg}, true
}

// rollOut is rule 6: the first member not on the desired version and
// revision is moved to them, followers first, the leader last.
func rollOut(v view) (Step, bool) {
	var leader *Member
	for i := range v.members {
		m := v.members[i]
		if current(v.o, v.pods[m.Name]) {
			continue
		}
		if m.Leader {
			leader = &v.members[i]
			continue
		}
		return upgrade(v.o, m, v.pods[m.Name], v.pods, v.known), true
	}
	if leader != nil {
		return upgrade(v.o, *leader, v.pods[leader.Name], v.pods, v.known), true
	}
	return Step{}, false
}

// wantedVoters is how many voting members the cluster needs now: the
// desired size, plus one while an ephemeral member is being replaced by a
// member on the new version or revision (the replacement joins before the
// outdated member leaves; see upgrade).
func wantedVoters(o Observed, members []Member, pods map[string]Pod) int {
	if o.Persistent {
		return o.Size
	}
	for _, m := range members {
		if !m.Learner && !current(o, pods[m.Name]) {
			return o.Size + 1
		}
	}
	return o.Size
}

// unneededLearner returns the removal of a learner beyond those the
// cluster is waiting for (wantedVoters minus the voters), the
// highest-named first: a learner that never caught up and whose place is
// no longer wanted (the size was lowered meanwhile) would otherwise block
// every change behind the wait for it.
func unneededLearner(o Observed, members []Member, pods map[string]Pod, voters int) (Step, bool) {
	needed := max(wantedVoters(o, members, pods)-voters, 0)
	var learners []Member
	for _, m := range members {
		if m.Learner {
			learners = append(learners, m)
		}
	}
	if len(learners) <= needed {
		return Step{}, false
	}
	m := learners[len(learners)-1]
	return Step{Action: ActionRemove, Name: m.Name, ID: m.ID, Reason: "ScalingDown",
		Message: fmt.Sprintf("removing learner %s: the cluster has the %d voting members it needs", m.Name, voters)}, true
}

// removable returns the voting member a scale-down removes: a member not
// current (an outdated follower, then the outdated leader: it would be
// replaced anyway), else the highest-named follower. A current leader is
// never removed.
func removable(o Observed, members []Member, pods map[string]Pod) (Member, bool) {
	var outdatedLeader *Member
	for i := len(members) - 1; i >= 0; i-- {
		m := members[i]
		if m.Learner || current(o, pods[m.Name]) {
			continue
		}
		if !m.Leader {
			return m, true
		}
		outdatedLeader = &members[i]
	}
	if outdatedLeader != nil {
		return *outdatedLeader, true
	}
	for i := len(members) - 1; i >= 0; i-- {
		if m := members[i]; !m.Learner && !m.Leader {
			return m, true
		}
	}
	return Member{}, false
}

// recreateRecorded is the step for a bootstrapped cluster that no member
// answers, when members recorded in Observed.Recorded have lost their pod:
// with persistent storage, a member's identity (member ID, cluster ID, its
// data) is in the data directory on its claim, so its pod is recreated on
// the claim and restarts as the same member, whatever its initial-cluster
// flags say. One pod per pass, lowest name first; a failed pod is deleted
// first, keeping its claim. A member whose claim is gone has lost its data:
// it cannot come back this way, which is waited on (naming it) only when no
// other member can be recreated. Without persistent storage, a recreated
// pod would start an empty member with an existing identity: nothing is
// done (ok false), the cluster waits as unreachable or lost.
func recreateRecorded(o Observed, pods map[string]Pod) (Step, bool) {
	if !o.Persistent {
		return Step{}, false
	}
	recorded := slices.Clone(o.Recorded)
	slices.SortFunc(recorded, func(a, b Member) int { return compareNames(a.Name, b.Name) })
	var noClaim []string
	for _, m := range recorded {
		p, ok := pods[m.Name]
		switch {
		case ok && p.Phase == PodFailed && m.ID != 0:
			return Step{Action: ActionDeletePod, Name: m.Name, ID: m.ID, Reason: "MemberFailed",
				Message: fmt.Sprintf("deleting failed pod %s, keeping its data, to recreate it", m.Name)}, true
		case ok, o.Terminating[m.Name]:
		case hasData(o, m.Name):
			return Step{Action: ActionCreatePod, Name: m.Name, ID: m.ID, Version: o.Version, OnData: true, Reason: "MemberRecreated",
				Message: fmt.Sprintf("recreating pod %s on its data; no member answers", m.Name)}, true
		default:
			noClaim = append(noClaim, m.Name)
		}
	}
	switch {
	case len(noClaim) == 0:
		return Step{}, false
	case len(o.Pods) == 0:
		return wait(ReasonMemberDataLost, "no member pod exists and no member answers; the data claims of members %s are gone, so they cannot be recreated; restore from a backup (with spec.recovery.quorumLoss Rebuild and spec.backup.storeRef the cluster rebuilds itself from its newest backup)",
			strings.Join(noClaim, ", ")), true
	default:
		return wait(ReasonMemberDataLost, "no member answers; members %s have no pod and their data claims are gone, so they cannot be recreated",
			strings.Join(noClaim, ", ")), true
	}
}

// hasData reports whether member name still has its data: storage is
// persistent and its claim exists (and is not being deleted). Only such a
// member may be recreated under its identity; both the reachable and the
// unreachable paths of Plan ask this one question.
func hasData(o Observed, name string) bool { return o.Persistent && o.Claims[name] }

// bootstrapping waits for the seed member of a cluster that has not
// answered yet, and reports it as stuck after Timeouts.Bootstrap.
func bootstrapping(o Observed) Step {
	seed := sortedPods(o.Pods)[0]
	if expired(o.Timeouts.Bootstrap, seed.Age) {
		return stuck(ReasonBootstrapTimeout, "seed member %s has not answered %s after its pod was created (bootstrap timeout); its pod is %s",
			seed.Name, o.Timeouts.Bootstrap, seed.Phase)
	}
	return wait(ReasonBootstrapping, "waiting for seed member %s to answer; its pod is %s", seed.Name, seed.Phase)
}

// stuckMember reports a member that has been starting for longer than
// Timeouts.MemberStart: its pod is still Pending, or it is a learner that
// has not started or become healthy. A voting member whose running pod is
// unhealthy is not reported: the pod's age does not tell since when.
func stuckMember(o Observed, m Member, p Pod) (Step, bool) {
	timeout := o.Timeouts.MemberStart
	if !expired(timeout, p.Age) {
		return Step{}, false
	}
	switch {
	case p.Phase == PodPending:
		return stuck(ReasonMemberPodPending, "member %s: its pod has been Pending for more than %s (member start timeout); it waits to be scheduled and started",
			m.Name, timeout), true
	case m.Learner && !m.Started:
		return stuck(ReasonLearnerNotCaughtUp, "learner %s has not joined the cluster %s after its pod was created (member start timeout)",
			m.Name, timeout), true
	case m.Learner && !m.Healthy:
		return stuck(ReasonLearnerNotCaughtUp, "learner %s has joined but not become healthy %s after its pod was created (member start timeout)",
			m.Name, timeout), true
	}
	return Step{}, false
}

// current reports whether pod p runs what o asks for: its version, and its
// revision unless the pod predates revisions (an operator upgrade does not
// restart every member).
func current(o Observed, p Pod) bool {
	return p.Version == o.Version && (p.Revision == "" || p.Revision == o.Revision)
}

// upgrade moves member m to the new version or pod revision. With
// persistent data its pod is restarted on its data. Without, its data
// cannot survive a restart: a new member on the new version or revision is
// added first (a learner, promoted once caught up) and only then is m
// removed (rule 5 removes outdated members first), so that the cluster
// never has fewer voting members than its size; a single-member cluster
// keeps its data through the replacement.
func upgrade(o Observed, m Member, p Pod, pods map[string]Pod, known map[string]Member) Step {
	reason := rollout(o, p)
	change := fmt.Sprintf("from %s to %s", p.Version, o.Version)
	if reason == "RollingOut" {
		change = "for the new pod template"
	}
	if !o.Persistent {
		name := nextName(o, pods, known)
		return Step{Action: ActionAddLearner, Name: name, Version: o.Version, Reason: reason,
			Message: fmt.Sprintf("adding member %s to replace member %s %s", name, m.Name, change)}
	}
	return Step{Action: ActionUpgrade, Name: m.Name, ID: m.ID, Version: o.Version, Reason: reason,
		Message: fmt.Sprintf("restarting member %s on its data %s", m.Name, change)}
}

// rollout is the reason of a step moving pod p to what o asks for:
// Upgrading for a new version, RollingOut for a new pod revision.
func rollout(o Observed, p Pod) string {
	if p.Version == o.Version {
		return "RollingOut"
	}
	return "Upgrading"
}

// rebuild is rule 7: a quorum lost for good (see Observed.Rebuild) is
// reported and, with Rebuild, rebuilt from the surviving member with the
// highest raft index once every survivor has reported one. ok is false
// when the quorum is not lost for good: no recorded voting member has its
// data, or a quorum of them has.
func rebuild(o Observed) (Step, bool) {
	if !o.Persistent {
		return Step{}, false
	}
	var voters, survivors, lost []string
	for _, m := range o.Recorded {
		if m.Learner {
			continue
		}
		voters = append(voters, m.Name)
		if hasData(o, m.Name) {
			survivors = append(survivors, m.Name)
		} else {
			lost = append(lost, m.Name)
		}
	}
	if len(survivors) == 0 || len(survivors) >= Quorum(len(voters)) {
		return Step{}, false
	}
	slices.SortFunc(survivors, compareNames)
	slices.SortFunc(lost, compareNames)
	what := fmt.Sprintf("quorum lost for good: %d of %d voting members (%s) lost their pods and data claims", len(lost), len(voters), strings.Join(lost, ", "))
	if o.Rebuild {
		if alive := unfenced(o, lost); len(alive) > 0 {
			return wait(ReasonQuorumLost, "%s; %s", what, fenceMessage(alive)), true
		}
	}
	if !o.Rebuild {
		return wait(ReasonQuorumLost, "%s; set spec.recovery.quorumLoss to Rebuild to rebuild the cluster from the most up-to-date of %s (writes only the lost members had are lost), or restore a backup into a new cluster",
			what, strings.Join(survivors, ", ")), true
	}
	var best string
	var bestIndex uint64
	var silent []string
	for _, name := range survivors {
		index, ok := o.RaftIndexes[name]
		switch {
		case !ok:
			silent = append(silent, name)
		case best == "" || index > bestIndex:
			best, bestIndex = name, index
		}
	}
	if len(silent) > 0 {
		return wait(ReasonQuorumLost, "%s; waiting for the surviving members %s to report their raft index, to rebuild from the most up-to-date",
			what, strings.Join(silent, ", ")), true
	}
	return Step{Action: ActionForceNewCluster, Name: best, Version: o.Version, OnData: true, Reason: ReasonRebuilding,
		Message: fmt.Sprintf("%s; rebuilding the cluster from %s (raft index %d), the most up-to-date of %s", what, best, bestIndex, strings.Join(survivors, ", "))}, true
}

// rebuildFromBackup is rule 7 when no member survives: no member pod
// exists and no recorded member has its data (with ephemeral storage a
// member's data went with its pod). With Rebuild and a backup store the
// cluster is rebuilt from its newest verified backup; ok is false without
// Rebuild, when some member still has a pod or its data, and for a cluster
// that records no member.
func rebuildFromBackup(o Observed) (Step, bool) {
	if !o.Rebuild || len(o.Pods) > 0 || len(o.Recorded) == 0 {
		return Step{}, false
	}
	names := make([]string, 0, len(o.Recorded))
	for _, m := range o.Recorded {
		if hasData(o, m.Name) {
			return Step{}, false
		}
		names = append(names, m.Name)
	}
	slices.SortFunc(names, compareNames)
	what := fmt.Sprintf("no member survives: %s lost their pods and data", strings.Join(names, ", "))
	if alive := unfenced(o, names); len(alive) > 0 {
		return wait(ReasonMemberDataLost, "%s; %s", what, fenceMessage(alive)), true
	}
	if !o.BackupStore {
		return wait(ReasonMemberDataLost, "%s, and spec.backup names no store to rebuild from; restore a backup into a new cluster", what), true
	}
	return Step{Action: ActionRebuildFromBackup, Version: o.Version, Reason: ReasonRebuildingFromBackup,
		Message: what + "; rebuilding the cluster from its newest verified backup"}, true
}

// unfenced returns those of members whose pod still exists, not failed:
// Terminating, or left running on a node the operator cannot reach.
// Kubernetes removes such a pod only once its kubelet confirms it stopped,
// or the node is deleted or tainted out-of-service: until then its etcd
// may serve a majority that a rebuild would split from.
func unfenced(o Observed, members []string) []string {
	var out []string
	for _, name := range members {
		running := slices.ContainsFunc(o.Pods, func(p Pod) bool { return p.Name == name && p.Phase != PodFailed })
		if running || o.Terminating[name] {
			out = append(out, name)
		}
	}
	return out
}

func fenceMessage(alive []string) string {
	return fmt.Sprintf("no rebuild while the pods of %s still exist (Terminating or not yet stopped): on a node the operator cannot reach "+
		"their etcd may still run and serve a majority. The rebuild starts once they are gone; if their node is lost for good, delete "+
		"the Node or taint it node.kubernetes.io/out-of-service=nodeshutdown:NoExecute", strings.Join(alive, ", "))
}

// rebuilding is rule 7 while a rebuild from o.RebuildingFrom is under way
// and the member does not answer yet: its pod is restarted with
// --force-new-cluster (ActionForceNewCluster deletes a pod without the
// flag, then creates one with it), and waited for.
func rebuilding(o Observed, pods map[string]Pod) Step {
	name := o.RebuildingFrom
	if !hasData(o, name) {
		return wait(ReasonQuorumLost, "member %s, which the cluster was being rebuilt from, lost its data claim too; restore a backup into a new cluster", name)
	}
	if p, ok := pods[name]; ok && p.ForceNewCluster && p.Phase != PodFailed {
		return wait(ReasonRebuilding, "waiting for %s to start as a one-member cluster on its data", name)
	}
	return Step{Action: ActionForceNewCluster, Name: name, Version: o.Version, OnData: true, Reason: ReasonRebuilding,
		Message: fmt.Sprintf("restarting %s with --force-new-cluster", name)}
}

// finishRebuild is rule 7 once the member a rebuild began from answers as
// a one-member cluster: it is restarted without --force-new-cluster before
// any member joins (a restart with the flag would remove them again). The
// other survivors' pods, unknown to the new cluster, go by rule 2; the
// cluster grows back by rule 5.
func finishRebuild(v view) (Step, bool) {
	for _, p := range sortedPods(v.o.Pods) {
		if !p.ForceNewCluster {
			continue
		}
		if m, ok := v.known[p.Name]; ok && m.Healthy {
			return Step{Action: ActionUpgrade, Name: p.Name, ID: m.ID, Version: p.Version, Reason: ReasonRebuilt,
				Message: fmt.Sprintf("%s answers as a one-member cluster with its data; restarting it without --force-new-cluster before the cluster grows back", p.Name)}, true
		}
		return wait(ReasonRebuilding, "waiting for %s to answer as a one-member cluster", p.Name), true
	}
	return Step{}, false
}

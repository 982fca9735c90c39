package membership

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Action is the kind of a Step.
type Action string

// The actions Plan can return.
const (
	// ActionWait: nothing safe to do now; look again later.
	ActionWait Action = "Wait"
	// ActionNone: the cluster is as desired.
	ActionNone Action = "None"
	// ActionBootstrap: create the seed pod Step.Name as a new one-member
	// cluster.
	ActionBootstrap Action = "Bootstrap"
	// ActionAddLearner: add Step.Name as a learner (MemberAddAsLearner),
	// then create its pod.
	ActionAddLearner Action = "AddLearner"
	// ActionCreatePod: create the pod of member Step.Name, which etcd
	// already knows (it joins as an existing member).
	ActionCreatePod Action = "CreatePod"
	// ActionPromote: promote learner Step.ID (MemberPromote).
	ActionPromote Action = "Promote"
	// ActionRemove: remove member Step.ID (MemberRemove through the other
	// members), then delete pod Step.Name and its data.
	ActionRemove Action = "Remove"
	// ActionDeletePod: delete pod Step.Name and its data; etcd no longer
	// knows the member.
	ActionDeletePod Action = "DeletePod"
	// ActionUpgrade: restart member Step.Name on Step.Version, keeping its
	// data.
	ActionUpgrade Action = "Upgrade"
)

// PodPhase is what the controller saw of a member pod.
type PodPhase string

// Pod phases as the planner needs them.
const (
	PodPending PodPhase = "Pending"
	PodRunning PodPhase = "Running"
	PodFailed  PodPhase = "Failed"
)

// Pod is an observed member pod.
type Pod struct {
	// Name is the pod's name, which is also the member's etcd name.
	Name string
	// Phase is the pod's phase; a pod being deleted is not observed.
	Phase PodPhase
	// Ready is the pod's Ready condition: its readiness probe (etcd's
	// /readyz) passes, so the client Service sends it traffic.
	Ready bool
	// Version is the etcd version the pod runs (from its image).
	Version string
	// Revision identifies the rest of the pod's spec the user chose
	// (image repository, pod template overrides) when the pod was made;
	// empty for pods made before revisions were recorded.
	Revision string
	// Age is how long ago the pod was created. Plan compares it with
	// Observed.Timeouts to tell a member that is still starting from one
	// that is stuck.
	Age time.Duration
}

// Member is an observed etcd member.
type Member struct {
	// ID is etcd's member ID.
	ID uint64
	// Name is the pod name the member belongs to (from its peer URL).
	Name string
	// Started is true once the member has joined and published its name.
	Started bool
	// Learner is true for a non-voting learner.
	Learner bool
	// Healthy is true when the member answered a status request with a
	// leader and no alarms.
	Healthy bool
	// Leader is true for the raft leader.
	Leader bool
}

// Observed is the input of Plan.
type Observed struct {
	// Cluster is the EtcdCluster's name; new members are named
	// "<Cluster>-<n>".
	Cluster string
	// Size is the desired number of voting members.
	Size int
	// Version is the desired etcd version.
	Version string
	// Revision is the desired Pod.Revision: a member whose pod has
	// another (non-empty) one is restarted like an upgrade, one at a time.
	Revision string
	// Bootstrapped is true once the cluster has answered at least once
	// (its member list was read). Until then the seed pod may exist but its
	// member is still starting: Plan waits for it with reason Bootstrapping
	// rather than reporting the cluster as unreachable.
	Bootstrapped bool
	// Persistent is true when members keep their data in volumes that
	// survive their pods; a member whose pod is gone is then recreated
	// instead of replaced.
	Persistent bool
	// Pods are the member pods that exist and are not being deleted.
	Pods []Pod
	// Members is etcd's member list, nil when no member could be reached.
	Members []Member
	// Reached is true when Members was read from the cluster.
	Reached bool
	// Recorded are the members recorded the last time the cluster was
	// reached (the EtcdCluster's status.members). When no member answers,
	// a member recorded here whose pod is gone is recreated on its claim
	// with persistent storage: its data directory holds its identity.
	Recorded []Member
	// Claims holds the names of the members whose data claim exists.
	Claims map[string]bool
	// ClaimsDeleting holds the names of the members whose data claim is
	// being deleted. A new member never takes such a name: its pod would
	// mount the old claim, or wait forever for one that is gone.
	ClaimsDeleting map[string]bool
	// Timeouts bound how long Plan waits before it reports a wait as
	// stuck.
	Timeouts Timeouts
}

// Timeouts bound the waits of Plan. A wait that lasts longer is returned
// as a Stuck step with a reason naming what it waits on; Plan still does
// nothing about it (it deletes nothing on a timeout), it only says so.
// A zero timeout never expires.
type Timeouts struct {
	// Bootstrap is how long after the seed pod was created the seed member
	// may take to answer for the first time.
	Bootstrap time.Duration
	// MemberStart is how long after its pod was created a member's pod
	// may stay Pending, and a learner may take to start, become healthy
	// and be promoted.
	MemberStart time.Duration
}

// Step is the one change Plan decides on.
type Step struct {
	Action Action
	// Name is the pod and member name the step acts on.
	Name string
	// ID is the etcd member ID for Promote and Remove.
	ID uint64
	// Version is the target version of an Upgrade, and the version of a
	// pod to create.
	Version string
	// Reason is a CamelCase reason and Message a sentence explaining the
	// step, for conditions and events.
	Reason, Message string
	// Stuck is set on a step that has waited longer than its timeout in
	// Observed.Timeouts: the cluster may not get further without help, and
	// Reason and Message say what it is waiting on. It is a Wait, or the
	// Promote of a learner that etcd may keep refusing because it has not
	// caught up with the leader.
	Stuck bool
}

// Quorum returns the number of voting members that must agree in a cluster
// of n voting members.
func Quorum(n int) int { return n/2 + 1 }

// Reasons of Wait steps that callers may branch on.
const (
	// ReasonBootstrapping: the seed pod exists but the cluster has not
	// answered yet.
	ReasonBootstrapping = "Bootstrapping"
	// ReasonBootstrapTimeout: the seed member has not answered within
	// Timeouts.Bootstrap of its pod's creation (a Stuck step).
	ReasonBootstrapTimeout = "BootstrapTimeout"
	// ReasonMemberPodPending: a member's pod is still Pending
	// Timeouts.MemberStart after its creation (a Stuck step).
	ReasonMemberPodPending = "MemberPodPending"
	// ReasonLearnerNotCaughtUp: a learner has not started, become healthy
	// or been promoted within Timeouts.MemberStart of its pod's creation (a
	// Stuck step).
	ReasonLearnerNotCaughtUp = "LearnerNotCaughtUp"
	// ReasonMemberDataLost: no member answers and members recorded in
	// Observed.Recorded have neither a pod nor a data claim: they cannot
	// be recreated.
	ReasonMemberDataLost = "MemberDataLost"
	// ReasonMemberNotReady: etcd reports every member healthy, but a
	// member's pod has not passed its readiness probe, so it receives no
	// client traffic yet; nothing is changed until it does.
	ReasonMemberNotReady = "MemberNotReady"
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

// Plan returns the next step for the cluster described by o.
func Plan(o Observed) Step {
	pods := make(map[string]Pod, len(o.Pods))
	for _, p := range o.Pods {
		pods[p.Name] = p
	}
	if !o.Bootstrapped {
		if len(o.Pods) > 0 {
			return bootstrapping(o)
		}
		name := o.Cluster + "-0"
		return Step{Action: ActionBootstrap, Name: name, Version: o.Version, Reason: ReasonBootstrapping,
			Message: fmt.Sprintf("creating seed member %s", name)}
	}
	if !o.Reached {
		if s, ok := recreateRecorded(o, pods); ok {
			return s
		}
		if len(o.Pods) == 0 {
			return wait("ClusterLost", "no member pod exists and no member answers; restore from a backup")
		}
		return wait("Unreachable", "no member answers")
	}
	members := slices.Clone(o.Members)
	slices.SortFunc(members, func(a, b Member) int { return compareNames(a.Name, b.Name) })
	known := make(map[string]Member, len(members))
	voters, healthyVoters := 0, 0
	for _, m := range members {
		known[m.Name] = m
		if !m.Learner {
			voters++
			if m.Healthy {
				healthyVoters++
			}
		}
	}

	// 2. Finish half-done changes.
	for _, m := range members {
		if _, ok := pods[m.Name]; !ok && !m.Started {
			return Step{Action: ActionCreatePod, Name: m.Name, ID: m.ID, Version: o.Version, Reason: "MemberAdded",
				Message: fmt.Sprintf("creating pod for added member %s", m.Name)}
		}
	}
	for _, p := range sortedPods(o.Pods) {
		if _, ok := known[p.Name]; !ok {
			return Step{Action: ActionDeletePod, Name: p.Name, Reason: "MemberRemoved",
				Message: fmt.Sprintf("deleting pod %s of a removed member", p.Name)}
		}
	}

	// 3. Members whose pod is gone or failed.
	for _, m := range members {
		p, ok := pods[m.Name]
		if ok && p.Phase != PodFailed {
			continue
		}
		if ok && p.Phase == PodFailed {
			// Deleting the failed pod makes it "gone" on the next pass.
			return Step{Action: ActionDeletePod, Name: m.Name, ID: m.ID, Reason: "MemberFailed",
				Message: fmt.Sprintf("deleting failed pod %s", m.Name)}
		}
		if hasData(o, m.Name) {
			return Step{Action: ActionCreatePod, Name: m.Name, ID: m.ID, Version: o.Version, Reason: "MemberRecreated",
				Message: fmt.Sprintf("recreating pod %s on its data", m.Name)}
		}
		// Without its data (ephemeral storage, or its claim is gone) the
		// member can never come back: recreated under its old identity it
		// would rejoin with an empty raft log and could help elect a
		// leader that lacks acknowledged writes. Remove it; a replacement
		// with a new identity is added afterwards. The others must be a
		// healthy quorum of what remains.
		remaining, healthyRemaining := voters, healthyVoters
		if !m.Learner {
			remaining--
			if m.Healthy {
				healthyRemaining--
			}
		}
		if remaining == 0 || healthyRemaining < Quorum(remaining) {
			return wait("QuorumAtRisk", "member %s lost its pod and data, but removing it would leave %d of %d healthy voting members", m.Name, healthyRemaining, remaining)
		}
		return Step{Action: ActionRemove, Name: m.Name, ID: m.ID, Reason: "MemberLost",
			Message: fmt.Sprintf("removing member %s, which lost its pod and data, to replace it", m.Name)}
	}

	// 4. Remove a learner the cluster does not need (one that never
	// caught up, then the size was lowered): removing a learner changes no
	// quorum, and waiting for it would block every other change. Then
	// promote a caught-up learner; otherwise wait for everyone to be
	// healthy. Waits past Timeouts.MemberStart are reported as stuck.
	if s, ok := unneededLearner(o, members, pods, voters); ok {
		return s
	}
	for _, m := range members {
		if m.Learner && m.Started && m.Healthy {
			s := Step{Action: ActionPromote, Name: m.Name, ID: m.ID, Reason: "PromotingLearner",
				Message: fmt.Sprintf("promoting learner %s", m.Name)}
			if expired(o.Timeouts.MemberStart, pods[m.Name].Age) {
				// etcd refuses to promote a learner that lags behind
				// the leader; it has had its time.
				s.Reason, s.Stuck = ReasonLearnerNotCaughtUp, true
				s.Message = fmt.Sprintf("promoting learner %s, still a learner %s after its pod was created (member start timeout); etcd refuses the promotion until it has caught up with the leader",
					m.Name, o.Timeouts.MemberStart)
			}
			return s
		}
	}
	for _, m := range members {
		p := pods[m.Name]
		if s, ok := stuckMember(o, m, p); ok {
			return s
		}
		if !m.Started || !m.Healthy {
			return wait("MemberUnhealthy", "waiting for member %s to become healthy", m.Name)
		}
		if p.Phase != PodRunning {
			return wait("MemberStarting", "waiting for pod %s to run", m.Name)
		}
		// A member etcd calls healthy may not receive client traffic
		// yet: changing another member before this one's pod is Ready
		// would leave fewer members serving than the change assumes.
		if !p.Ready {
			return wait(ReasonMemberNotReady, "waiting for pod %s to pass its readiness probe (etcd's /readyz)", m.Name)
		}
	}

	// 5. Scale.
	if voters < o.Size {
		name := nextName(o, pods, known)
		return Step{Action: ActionAddLearner, Name: name, Version: o.Version, Reason: "ScalingUp",
			Message: fmt.Sprintf("adding member %s (%d of %d)", name, voters+1, o.Size)}
	}
	if voters > o.Size {
		m, ok := removable(o, members, pods)
		if !ok {
			return wait("NoLeader", "no non-leader member to remove")
		}
		if healthyVoters-1 < Quorum(voters-1) {
			return wait("QuorumAtRisk", "removing %s would leave no healthy quorum", m.Name)
		}
		reason, msg := "ScalingDown", fmt.Sprintf("removing member %s (%d to %d)", m.Name, voters, voters-1)
		if voters-1 == o.Size && !current(o, pods[m.Name]) {
			reason, msg = rollout(o, pods[m.Name]), fmt.Sprintf("removing member %s (%s), replaced by a member running %s", m.Name, pods[m.Name].Version, o.Version)
		}
		return Step{Action: ActionRemove, Name: m.Name, ID: m.ID, Reason: reason, Message: msg}
	}

	// 6. Upgrade (a new version, or a new pod revision), followers first.
	var leader *Member
	for i := range members {
		m := members[i]
		if current(o, pods[m.Name]) {
			continue
		}
		if m.Leader {
			leader = &members[i]
			continue
		}
		return upgrade(o, m, pods[m.Name], pods, known)
	}
	if leader != nil {
		return upgrade(o, *leader, pods[leader.Name], pods, known)
	}
	return Step{Action: ActionNone, Reason: "Ready", Message: fmt.Sprintf("%d members running %s", voters, o.Version)}
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
		case ok:
		case hasData(o, m.Name):
			return Step{Action: ActionCreatePod, Name: m.Name, ID: m.ID, Version: o.Version, Reason: "MemberRecreated",
				Message: fmt.Sprintf("recreating pod %s on its data; no member answers", m.Name)}, true
		default:
			noClaim = append(noClaim, m.Name)
		}
	}
	switch {
	case len(noClaim) == 0:
		return Step{}, false
	case len(o.Pods) == 0:
		return wait(ReasonMemberDataLost, "no member pod exists and no member answers; the data claims of members %s are gone, so they cannot be recreated; restore from a backup",
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

func sortedPods(in []Pod) []Pod {
	out := slices.Clone(in)
	slices.SortFunc(out, func(a, b Pod) int { return compareNames(a.Name, b.Name) })
	return out
}

// compareNames orders "<cluster>-<n>" names by n, then lexically.
func compareNames(a, b string) int {
	ia, ib := ordinal(a), ordinal(b)
	if c := cmp.Compare(ia, ib); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

func ordinal(name string) int {
	i := strings.LastIndexByte(name, '-')
	n, err := strconv.Atoi(name[i+1:])
	if err != nil {
		return -1
	}
	return n
}

// nextName returns "<cluster>-<n>" with the smallest n used by no pod,
// member or claim being deleted.
func nextName(o Observed, pods map[string]Pod, members map[string]Member) string {
	for n := 0; ; n++ {
		name := o.Cluster + "-" + strconv.Itoa(n)
		_, p := pods[name]
		_, m := members[name]
		if !p && !m && !o.ClaimsDeleting[name] {
			return name
		}
	}
}

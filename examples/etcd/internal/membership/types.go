package membership

import "time"

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
	// ActionForceNewCluster: rebuild a cluster that lost its quorum for
	// good from member Step.Name (see Observed.Rebuild): record it as the
	// member being rebuilt from, delete its pod (keeping its data) if it
	// runs without --force-new-cluster, and create it with the flag once
	// it is gone, so that it starts as a one-member cluster on its data.
	ActionForceNewCluster Action = "ForceNewCluster"
	// ActionRebuildFromBackup: no member of a cluster that lost its
	// quorum kept its data (see Observed.BackupStore): forget the lost
	// members and bootstrap the cluster again from the newest verified
	// backup of it in its backup store, which the controller chooses.
	ActionRebuildFromBackup Action = "RebuildFromBackup"
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
	// ForceNewCluster is true for a pod made by ActionForceNewCluster
	// (etcd runs with --force-new-cluster): it must be restarted without
	// the flag before any member joins, or a restart would remove them.
	ForceNewCluster bool
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
	// Terminating holds the names of the members whose pod is being
	// deleted but still exists: on a node that does not answer (a
	// partition) its etcd may still run and serve a majority, so no
	// rebuild starts until the pod is gone.
	Terminating map[string]bool
	// Timeouts bound how long Plan waits before it reports a wait as
	// stuck.
	Timeouts Timeouts
	// Rebuild opts into rebuilding a cluster that lost its quorum for
	// good (spec.recovery.quorumLoss Rebuild): with persistent storage,
	// no member answering, fewer than a quorum of the recorded voting
	// members with their data claim and at least one with it, the
	// surviving member with the highest RaftIndexes entry is restarted
	// with --force-new-cluster. Never while a lost member's claim exists.
	Rebuild bool
	// BackupStore is true when the cluster has a backup store
	// (spec.backup.storeRef): with Rebuild, a cluster no member of which
	// has a pod or its data (a data claim; with ephemeral storage, the pod
	// is the data) is rebuilt from its newest verified backup
	// (ActionRebuildFromBackup).
	BackupStore bool
	// RebuildingFrom is the member a rebuild began from (status.recovery),
	// "" when none is under way; it is kept until the cluster is reached.
	RebuildingFrom string
	// RaftIndexes are the raft indexes the running member pods reported
	// while no member list could be read (a member answers a status
	// request without a quorum), by member name.
	RaftIndexes map[string]uint64
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
	// OnData is set on a CreatePod or ForceNewCluster of a member that
	// had data: its pod must start on its existing claim, never a new
	// one, or etcd would take its registered ID with an empty log.
	OnData bool
	// Grows is set on the addition of a member the size asks for (a
	// scale up, or the replacement of a removed member): a caller may
	// defer it, as the operator does during a NOSPACE recovery.
	Grows bool
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
	// ReasonMemberPodTerminating: a lost member's pod is being deleted
	// (on a dead node, until the node is declared gone); the member is
	// recreated once the pod is gone.
	ReasonMemberPodTerminating = "MemberPodTerminating"
	// ReasonQuorumLost: the cluster lost its quorum for good (see
	// Observed.Rebuild) and waits for its surviving members to answer
	// before choosing one, or, without Rebuild, for a person.
	ReasonQuorumLost = "QuorumLost"
	// ReasonRebuilding: a cluster that lost its quorum is being rebuilt
	// from a surviving member (ActionForceNewCluster).
	ReasonRebuilding = "RebuildingFromSurvivor"
	// ReasonRebuildingFromBackup: no member of a cluster that lost its
	// quorum kept its data; it is rebuilt from its newest verified backup
	// (ActionRebuildFromBackup).
	ReasonRebuildingFromBackup = "RebuildingFromBackup"
	// ReasonRebuilt: the surviving member answers as a one-member
	// cluster; it is restarted without --force-new-cluster, then the
	// cluster grows back.
	ReasonRebuilt = "QuorumRebuilt"
	// ReasonMemberDataLost: no member answers and members recorded in
	// Observed.Recorded have neither a pod nor a data claim: they cannot
	// be recreated.
	ReasonMemberDataLost = "MemberDataLost"
	// ReasonClusterLost: a cluster with ephemeral storage has no member
	// pod and no member answers: its data is gone with its pods.
	ReasonClusterLost = "ClusterLost"
	// ReasonMemberNotReady: etcd reports every member healthy, but a
	// member's pod has not passed its readiness probe, so it receives no
	// client traffic yet; nothing is changed until it does.
	ReasonMemberNotReady = "MemberNotReady"
)

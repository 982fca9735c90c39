// Package membership decides the next membership change of an etcd cluster.
//
// Plan is a pure function: given the desired size and version and what was
// observed (member pods, etcd's member list, each member's health) it returns
// exactly one Step. The controller carries the step out and observes again, so
// the cluster changes one member at a time and every decision is made on
// fresh observations. Because it is pure (time enters only as the ages of
// pods), every transition is covered by table tests without Kubernetes or
// etcd.
//
// The rules, in order (one function each in plan.go: bootstrap,
// finishHalfDone, finishRebuild, replaceLost and unreached, settle, scale,
// rollOut; rule 7 in rebuild, rebuildFromBackup and rebuilding):
//
//  1. An unbootstrapped cluster (one that has never answered) gets one seed
//     member, and nothing else happens until the seed answers. The wait has
//     reason Bootstrapping; once the seed pod is older than
//     Timeouts.Bootstrap it is a Stuck step with reason BootstrapTimeout.
//  2. Half-finished changes are finished first: a member etcd knows but whose
//     pod is missing gets its pod (an add interrupted after MemberAddAsLearner),
//     a pod etcd does not know is deleted (a removal interrupted after
//     MemberRemove).
//  3. A member whose pod is gone keeps its identity only with its data:
//     with persistent storage and its claim in Observed.Claims, its pod is
//     recreated and it rejoins with its data. Otherwise (ephemeral storage,
//     or its claim deleted with it) it is removed, only if the others are a
//     healthy quorum of what remains, and a replacement with a new identity
//     is added: never an empty member under the old ID, which could help
//     elect a leader missing acknowledged writes. With persistent
//     storage recreation holds even when no member answers: a member recorded in
//     Observed.Recorded whose pod is gone and whose claim is in
//     Observed.Claims gets its pod back, one per pass (its identity is in
//     its data directory); one whose claim is gone is waited on with reason
//     MemberDataLost. Without persistent storage nothing is recreated while
//     no member answers.
//  4. A learner the cluster does not need is removed (one that never caught
//     up, after which the size was lowered: removing a learner changes no
//     quorum). Then a started, healthy learner is promoted. Nothing else
//     happens while any member is unhealthy or starting, or
//     its pod is not Ready (etcd may call a member healthy before its
//     readiness probe passes and the client Service sends it traffic). A
//     member whose pod is still Pending, or a learner not yet promoted,
//     Timeouts.MemberStart after its pod was created is reported with a
//     Stuck step (MemberPodPending, LearnerNotCaughtUp); nothing is
//     deleted because of it.
//  5. Scale up adds one learner (Step.Grows: a caller may defer it);
//     scale down removes one voting member, only if the members that
//     remain are a healthy quorum: an outdated follower (see 6), else the
//     outdated leader, else the highest-named follower; a current leader
//     never.
//  6. Upgrades move one member at a time to the new version, followers
//     first, the leader last; CheckUpgrade refuses downgrades and jumps of more
//     than one minor version. A new pod revision (Observed.Revision: what the
//     user chose for the pods besides the version) rolls out the same way;
//     a pod without a revision (made before they were recorded) is left as
//     it is. With persistent storage a member is restarted on its data.
//     Without, a restart would empty it: a replacement on the new version is
//     added first (a learner, promoted by 4), and the outdated member is
//     removed by 5 once the replacement votes, so the cluster never has
//     fewer voting members than its size, and a single-member cluster
//     upgrades too.
//  7. A quorum lost for good (with persistent storage, no member
//     answering, fewer than a quorum of the voting members in
//     Observed.Recorded with their claim and at least one with it; rule 3
//     recreates the pods of those with a claim first) is reported with
//     reason QuorumLost. With Observed.Rebuild the survivor with the
//     highest raft index (Observed.RaftIndexes; all survivors must have
//     answered) is restarted with --force-new-cluster
//     (ActionForceNewCluster, reason RebuildingFromSurvivor), waited for
//     (Observed.RebuildingFrom) and, once it answers as a one-member
//     cluster, restarted without the flag (reason QuorumRebuilt) before
//     anything else: the other survivors' pods are then unknown members
//     (rule 2 deletes them and their data) and rule 5 grows the cluster
//     back. Nothing is rebuilt while a lost member's claim exists. When no
//     member survives (no member pod, and no recorded member with its
//     claim; with ephemeral storage no member pod), Observed.Rebuild and
//     Observed.BackupStore rebuild the cluster from its newest verified
//     backup (ActionRebuildFromBackup, reason RebuildingFromBackup): the
//     controller forgets the members and bootstraps it again from that
//     backup, like a cluster created with spec.restore.
package membership

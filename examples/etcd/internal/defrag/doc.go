// Package defrag decides which etcd member to defragment next.
//
// etcd keeps the pages that compaction frees inside its database file:
// the file never shrinks until the member is defragmented, which rewrites
// it and blocks that member's reads and writes meanwhile (seconds to
// minutes, by the size of the database). Plan, a pure function like
// membership.Plan, returns one Step at a time so that the controller
// defragments one member per pass, on fresh observations:
//
//  1. Nothing while the cluster is degraded: a member unhealthy or
//     unanswered, or a learner (a membership change under way).
//  2. The members of a scheduled round (Pending, in the order Order gave:
//     followers first, the leader last), then any member whose file
//     reached Policy.Ceiling (near its quota) with less in use, then any
//     whose free pages reach Policy.ThresholdPercent of its file and
//     Policy.MinReclaimable bytes; followers before the leader.
//  3. Never the leader while others wait on it: when the leader's turn
//     comes and another voting member is healthy, the step moves leadership
//     to that member first (MoveLeader); the old leader is defragmented on
//     a later pass, as a follower. A single-member cluster is defragmented
//     as it is: no follower waits on it.
package defrag

package defrag

import (
	"fmt"
	"slices"
)

// Member is what Plan knows about one member, from its Status.
type Member struct {
	// Name is the member's name, ID its etcd member ID.
	Name string
	ID   uint64
	// Healthy is true when the member answered and reports a leader and
	// no errors.
	Healthy bool
	// Leader and Learner are the member's role.
	Leader, Learner bool
	// DBSize is the size of the member's database file and DBSizeInUse the
	// part of it that holds data.
	DBSize, DBSizeInUse int64
}

// Reclaimable is what defragmenting m returns to the file system.
func (m Member) Reclaimable() int64 { return max(m.DBSize-m.DBSizeInUse, 0) }

// Policy is when a member is defragmented outside a scheduled round.
type Policy struct {
	// ThresholdPercent defragments a member whose free pages are at least
	// this share of its file; 0 never does.
	ThresholdPercent int32
	// MinReclaimable is the least a threshold defragmentation must return.
	MinReclaimable int64
	// Ceiling defragments a member whose file is at or above these bytes
	// while the data is MinReclaimable below, before the threshold's
	// members: at its quota a member raises NOSPACE at the next write. 0
	// never does.
	Ceiling int64
	// Round names, in messages, what the pending members are defragmented
	// for; "its scheduled round" if empty.
	Round string
	// SkipUnhealthy defragments the members that answer while others do
	// not or are learners; those stay pending. Only where waiting costs
	// more than a paused member (NOSPACE: writes are refused until the
	// round ends): with a member down, the one defragmented may have
	// been needed for the quorum.
	SkipUnhealthy bool
}

// over reports whether m is due under p.
func (p Policy) over(m Member) bool {
	if p.ThresholdPercent <= 0 || m.DBSize <= 0 {
		return false
	}
	free := m.Reclaimable()
	return free >= p.MinReclaimable && free*100 >= int64(p.ThresholdPercent)*m.DBSize
}

// atCeiling reports whether m's file reached p's ceiling while the data,
// which every member holds, is below it by MinReclaimable: least is the
// smallest part in use of a voting member's file. A member's own part in
// use is no measure after it replays a compaction: bbolt counts the pages
// freed as in use until its next write.
func (p Policy) atCeiling(m Member, least int64) bool {
	return p.Ceiling > 0 && m.DBSize >= p.Ceiling && least < p.Ceiling && m.DBSize-least >= p.MinReclaimable
}

// Action is what a Step does.
type Action string

// The actions of a Step.
const (
	// ActionNone: nothing to defragment now (Reason says why).
	ActionNone Action = "None"
	// ActionDefragment: defragment Step.Member.
	ActionDefragment Action = "Defragment"
	// ActionMoveLeader: hand leadership from Step.Member to Step.To
	// (Step.ToID), before Step.Member is defragmented.
	ActionMoveLeader Action = "MoveLeader"
)

// Reasons of a Step.
const (
	ReasonDegraded   = "Degraded"
	ReasonNothingDue = "NothingDue"
	ReasonScheduled  = "Scheduled"
	ReasonThreshold  = "ThresholdReached"
	ReasonNearQuota  = "NearQuota"
)

// Step is Plan's decision.
type Step struct {
	Action Action
	// Member is the member to defragment, or the leader to move away from.
	Member string
	// To and ToID name the member that becomes leader in a MoveLeader.
	To   string
	ToID uint64
	// Reason is CamelCase, Message a sentence for events.
	Reason, Message string
}

// Order returns the names of members in the order of a scheduled round:
// followers first (as given), the leader last. Learners are left out.
func Order(members []Member) []string {
	var out []string
	leader := ""
	for _, m := range members {
		switch {
		case m.Learner:
		case m.Leader:
			leader = m.Name
		default:
			out = append(out, m.Name)
		}
	}
	if leader != "" {
		out = append(out, leader)
	}
	return out
}

// Plan returns the next step: the first member of pending that still
// exists, else the first member at p's ceiling, else the first over its
// threshold (followers first); for the leader, a move of leadership first
// (see the package doc).
func Plan(p Policy, members []Member, pending []string) Step {
	for _, m := range members {
		switch {
		case p.SkipUnhealthy:
		case !m.Healthy:
			return Step{Action: ActionNone, Reason: ReasonDegraded, Message: fmt.Sprintf("member %s is not healthy: no defragmentation until it is", m.Name)}
		case m.Learner:
			return Step{Action: ActionNone, Reason: ReasonDegraded, Message: fmt.Sprintf("member %s is a learner: no defragmentation during a membership change", m.Name)}
		}
	}
	byName := map[string]Member{}
	least := int64(-1)
	for _, m := range members {
		if m.Healthy && !m.Learner {
			byName[m.Name] = m
			if least < 0 || m.DBSizeInUse < least {
				least = m.DBSizeInUse
			}
		}
	}
	target, reason := "", ""
	for _, name := range pending {
		if _, ok := byName[name]; ok {
			target, reason = name, ReasonScheduled
			break
		}
	}
	for _, due := range []struct {
		reason string
		over   func(Member) bool
	}{{ReasonNearQuota, func(m Member) bool { return p.atCeiling(m, least) }}, {ReasonThreshold, p.over}} {
		for _, name := range Order(members) {
			if m, ok := byName[name]; ok && target == "" && due.over(m) {
				target, reason = name, due.reason
			}
		}
	}
	if target == "" {
		return Step{Action: ActionNone, Reason: ReasonNothingDue, Message: "no member is due for defragmentation"}
	}
	m := byName[target]
	why := p.Round
	if why == "" {
		why = "its scheduled round"
	}
	switch reason {
	case ReasonThreshold:
		why = fmt.Sprintf("%d%% of its %d-byte database is free", m.Reclaimable()*100/m.DBSize, m.DBSize)
	case ReasonNearQuota:
		why = fmt.Sprintf("its database file of %d bytes reached %d, near the quota, and the data is %d bytes: at the quota etcd refuses writes", m.DBSize, p.Ceiling, least)
	}
	if m.Leader {
		if to, ok := successor(members, target); ok {
			return Step{Action: ActionMoveLeader, Member: target, To: to.Name, ToID: to.ID, Reason: reason,
				Message: fmt.Sprintf("leadership moves from %s to %s, so that no follower waits while %s is defragmented (%s)", target, to.Name, target, why)}
		}
	}
	return Step{Action: ActionDefragment, Member: target, Reason: reason,
		Message: fmt.Sprintf("defragmenting %s (%s): %d bytes to return", target, why, m.Reclaimable())}
}

// successor is the voting member that takes over from leader: the first
// healthy voting member that is not the leader, in the given order.
func successor(members []Member, leader string) (Member, bool) {
	i := slices.IndexFunc(members, func(m Member) bool { return m.Name != leader && !m.Learner && m.Healthy })
	if i < 0 {
		return Member{}, false
	}
	return members[i], true
}

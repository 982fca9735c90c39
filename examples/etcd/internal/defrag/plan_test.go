package defrag

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

const mib = 1 << 20

func member(name string, id uint64, leader bool, size, inUse int64) Member {
	return Member{Name: name, ID: id, Healthy: true, Leader: leader, DBSize: size, DBSizeInUse: inUse}
}

func TestPlan(t *testing.T) {
	threshold := Policy{ThresholdPercent: 50, MinReclaimable: 10 * mib}
	three := func() []Member {
		return []Member{
			member("e-0", 1, true, 100*mib, 10*mib),
			member("e-1", 2, false, 100*mib, 10*mib),
			member("e-2", 3, false, 20*mib, 18*mib),
		}
	}
	tests := []struct {
		name    string
		policy  Policy
		members []Member
		pending []string
		want    Step
	}{
		{"nothing over the threshold", threshold, []Member{member("e-0", 1, true, 20*mib, 18*mib)}, nil,
			Step{Action: ActionNone, Reason: ReasonNothingDue}},
		{"no policy, no round", Policy{}, three(), nil, Step{Action: ActionNone, Reason: ReasonNothingDue}},
		{"a follower over the threshold goes before the leader", threshold, three(), nil,
			Step{Action: ActionDefragment, Member: "e-1", Reason: ReasonThreshold}},
		{"too little to reclaim", Policy{ThresholdPercent: 50, MinReclaimable: 200 * mib}, three(), nil,
			Step{Action: ActionNone, Reason: ReasonNothingDue}},
		{"the leader's turn moves leadership first", threshold, func() []Member {
			ms := three()
			ms[1].DBSize = ms[1].DBSizeInUse // e-1 done
			return ms
		}(), nil, Step{Action: ActionMoveLeader, Member: "e-0", To: "e-1", ToID: 2, Reason: ReasonThreshold}},
		{"a single member is defragmented as it is", threshold, []Member{member("e-0", 1, true, 100*mib, mib)}, nil,
			Step{Action: ActionDefragment, Member: "e-0", Reason: ReasonThreshold}},
		{"a round goes in its order", Policy{}, three(), []string{"e-2", "e-1", "e-0"},
			Step{Action: ActionDefragment, Member: "e-2", Reason: ReasonScheduled}},
		{"a round skips members that are gone", Policy{}, three(), []string{"e-5", "e-0"},
			Step{Action: ActionMoveLeader, Member: "e-0", To: "e-1", ToID: 2, Reason: ReasonScheduled}},
		{"nothing while a member is unhealthy", threshold, func() []Member {
			ms := three()
			ms[2].Healthy = false
			return ms
		}(), []string{"e-1"}, Step{Action: ActionNone, Reason: ReasonDegraded}},
		{"nothing during a membership change", threshold, append(three(), Member{Name: "e-3", ID: 4, Healthy: true, Learner: true}), nil,
			Step{Action: ActionNone, Reason: ReasonDegraded}},
		{"SkipUnhealthy passes over a member that does not answer", Policy{SkipUnhealthy: true}, func() []Member {
			ms := three()
			ms[2].Healthy = false
			return ms
		}(), []string{"e-2", "e-1", "e-0"}, Step{Action: ActionDefragment, Member: "e-1", Reason: ReasonScheduled}},
		{"SkipUnhealthy hands leadership to a member that answers", Policy{SkipUnhealthy: true}, func() []Member {
			ms := three()
			ms[1].Healthy = false
			return ms
		}(), []string{"e-1", "e-0"}, Step{Action: ActionMoveLeader, Member: "e-0", To: "e-2", ToID: 3, Reason: ReasonScheduled}},
		{"SkipUnhealthy passes over learners", Policy{SkipUnhealthy: true}, append(three(), Member{Name: "e-3", ID: 4, Healthy: true, Learner: true}),
			[]string{"e-3"}, Step{Action: ActionNone, Reason: ReasonNothingDue}},
		{"a file near the ceiling with little in use is due", Policy{Ceiling: 90 * mib}, three(), nil,
			Step{Action: ActionDefragment, Member: "e-1", Reason: ReasonNearQuota}},
		{"the ceiling goes before the threshold", Policy{Ceiling: 90 * mib, ThresholdPercent: 50, MinReclaimable: mib}, []Member{
			member("e-0", 1, true, 20*mib, 18*mib), member("e-1", 2, false, 60*mib, 10*mib), member("e-2", 3, false, 95*mib, 80*mib)}, nil,
			Step{Action: ActionDefragment, Member: "e-2", Reason: ReasonNearQuota}},
		{"the ceiling goes by the least in use: a member's own counts freed pages until its next write", Policy{Ceiling: 90 * mib}, []Member{
			member("e-0", 1, true, 20*mib, 18*mib), member("e-1", 2, false, 95*mib, 94*mib)}, nil,
			Step{Action: ActionDefragment, Member: "e-1", Reason: ReasonNearQuota}},
		{"no ceiling for a few pages", Policy{Ceiling: 90 * mib, MinReclaimable: 10 * mib}, []Member{
			member("e-0", 1, true, 92*mib, 85*mib), member("e-1", 2, false, 91*mib, 89*mib)}, nil,
			Step{Action: ActionNone, Reason: ReasonNothingDue}},
		{"no ceiling where the data fills it", Policy{Ceiling: 90 * mib}, []Member{member("e-0", 1, true, 100*mib, 95*mib)}, nil,
			Step{Action: ActionNone, Reason: ReasonNothingDue}},
		{"SkipUnhealthy with only unhealthy members pending", Policy{SkipUnhealthy: true, ThresholdPercent: 50, MinReclaimable: mib}, func() []Member {
			ms := three()
			ms[0].Healthy, ms[1].Healthy = false, false
			return ms
		}(), []string{"e-0", "e-1"}, Step{Action: ActionNone, Reason: ReasonNothingDue}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Plan(tt.policy, tt.members, tt.pending)
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(Step{}, "Message")); diff != "" {
				t.Errorf("Plan (-want +got):\n%s", diff)
			}
			if got.Message == "" {
				t.Error("Plan returned a step without a message")
			}
		})
	}
}

func TestOrder(t *testing.T) {
	ms := []Member{
		{Name: "e-0", Leader: true}, {Name: "e-1"}, {Name: "e-2", Learner: true}, {Name: "e-3"},
	}
	if diff := cmp.Diff([]string{"e-1", "e-3", "e-0"}, Order(ms)); diff != "" {
		t.Errorf("Order (-want +got):\n%s", diff)
	}
}

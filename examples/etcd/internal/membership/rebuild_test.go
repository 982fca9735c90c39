package membership

import "testing"

// TestPlanRebuild: rule 7. A quorum lost for good (fewer than a quorum of
// the recorded voting members have their data claim, at least one has) is
// reported; with Rebuild it is rebuilt from the survivor with the highest
// raft index, never while a lost member's claim exists.
func TestPlanRebuild(t *testing.T) {
	t.Parallel()
	flagged := func(name string) Pod {
		return Pod{Name: name, Phase: PodRunning, Version: v, ForceNewCluster: true}
	}
	tests := []struct {
		name     string
		o        Observed
		want     Step
		wantText []string
	}{{
		name: "two of three lost their claims, no opt-in: reported, nothing done",
		o: Observed{Size: 3, Persistent: true, Pods: running("c-1"),
			Recorded: recorded("c-0", "c-1", "c-2"), Claims: claims("c-1"), RaftIndexes: map[string]uint64{"c-1": 9}},
		want:     Step{Action: ActionWait, Reason: ReasonQuorumLost},
		wantText: []string{"c-0, c-2", "quorumLoss to Rebuild", "c-1"},
	}, {
		name: "opted in: rebuilt from the only survivor",
		o: Observed{Size: 3, Persistent: true, Rebuild: true, Pods: running("c-1"),
			Recorded: recorded("c-0", "c-1", "c-2"), Claims: claims("c-1"), RaftIndexes: map[string]uint64{"c-1": 9}},
		want:     Step{Action: ActionForceNewCluster, Name: "c-1", Version: v, OnData: true, Reason: ReasonRebuilding},
		wantText: []string{"raft index 9"},
	}, {
		name: "the most up-to-date of two survivors out of five",
		o: Observed{Size: 5, Persistent: true, Rebuild: true, Pods: running("c-1", "c-3"),
			Recorded: recorded("c-0", "c-1", "c-2", "c-3", "c-4"), Claims: claims("c-1", "c-3"),
			RaftIndexes: map[string]uint64{"c-1": 40, "c-3": 41}},
		want: Step{Action: ActionForceNewCluster, Name: "c-3", Version: v, OnData: true, Reason: ReasonRebuilding},
	}, {
		name: "equal raft indexes: the lowest name",
		o: Observed{Size: 5, Persistent: true, Rebuild: true, Pods: running("c-1", "c-3"),
			Recorded: recorded("c-0", "c-1", "c-2", "c-3", "c-4"), Claims: claims("c-1", "c-3"),
			RaftIndexes: map[string]uint64{"c-1": 41, "c-3": 41}},
		want: Step{Action: ActionForceNewCluster, Name: "c-1", Version: v, OnData: true, Reason: ReasonRebuilding},
	}, {
		name: "a lost member's pod is Terminating (its node partitioned): fenced, no rebuild",
		o: Observed{Size: 3, Persistent: true, Rebuild: true, Pods: running("c-1"), Terminating: claims("c-0"),
			Recorded: recorded("c-0", "c-1", "c-2"), Claims: claims("c-1"), ClaimsDeleting: claims("c-0", "c-2"),
			RaftIndexes: map[string]uint64{"c-1": 9}},
		want:     Step{Action: ActionWait, Reason: ReasonQuorumLost},
		wantText: []string{"c-0", "Terminating", "out-of-service"},
	}, {
		name: "a lost member's pod still runs without its claim: fenced, no rebuild",
		o: Observed{Size: 3, Persistent: true, Rebuild: true, Bootstrapped: true, Pods: running("c-1", "c-2"),
			Recorded: recorded("c-0", "c-1", "c-2"), Claims: claims("c-1"), ClaimsDeleting: claims("c-0", "c-2"),
			RaftIndexes: map[string]uint64{"c-1": 9, "c-2": 12}},
		want:     Step{Action: ActionWait, Reason: ReasonQuorumLost},
		wantText: []string{"c-2 still exist"},
	}, {
		name: "no survivor, a pod Terminating: fenced, no rebuild from a backup",
		o: Observed{Size: 3, Persistent: true, Rebuild: true, BackupStore: true, Version: v,
			Recorded: recorded("c-0", "c-1", "c-2"), Terminating: claims("c-2"), ClaimsDeleting: claims("c-2")},
		want:     Step{Action: ActionWait, Reason: ReasonMemberDataLost},
		wantText: []string{"c-2", "Terminating"},
	}, {
		name: "a survivor has not reported its raft index: wait for it",
		o: Observed{Size: 5, Persistent: true, Rebuild: true, Pods: running("c-1", "c-3"),
			Recorded: recorded("c-0", "c-1", "c-2", "c-3", "c-4"), Claims: claims("c-1", "c-3"),
			RaftIndexes: map[string]uint64{"c-1": 40}},
		want:     Step{Action: ActionWait, Reason: ReasonQuorumLost},
		wantText: []string{"c-3 to report"},
	}, {
		name: "a lost member's claim exists: its pod is recreated, never a rebuild",
		o: Observed{Size: 3, Persistent: true, Rebuild: true, Pods: running("c-1"),
			Recorded: recorded("c-0", "c-1", "c-2"), Claims: claims("c-0", "c-1"), RaftIndexes: map[string]uint64{"c-1": 9}},
		want: Step{Action: ActionCreatePod, Name: "c-0", ID: 1, Version: v, OnData: true, Reason: "MemberRecreated"},
	}, {
		name: "a quorum keeps its claims: not lost, no rebuild",
		o: Observed{Size: 3, Persistent: true, Rebuild: true, Pods: running("c-1", "c-2"),
			Recorded: recorded("c-0", "c-1", "c-2"), Claims: claims("c-1", "c-2"), RaftIndexes: map[string]uint64{"c-1": 9, "c-2": 9}},
		want: Step{Action: ActionWait, Reason: ReasonMemberDataLost},
	}, {
		name: "no survivor: nothing to rebuild from",
		o: Observed{Size: 3, Persistent: true, Rebuild: true,
			Recorded: recorded("c-0", "c-1", "c-2")},
		want: Step{Action: ActionWait, Reason: ReasonMemberDataLost},
	}, {
		name: "no survivor, opted in with a backup store: rebuilt from the newest backup",
		o: Observed{Size: 3, Persistent: true, Rebuild: true, BackupStore: true, Version: v,
			Recorded: recorded("c-0", "c-1", "c-2")},
		want:     Step{Action: ActionRebuildFromBackup, Version: v, Reason: ReasonRebuildingFromBackup},
		wantText: []string{"c-0, c-1, c-2 lost", "newest verified backup"},
	}, {
		name: "no survivor, a backup store, no opt-in: reported",
		o: Observed{Size: 3, Persistent: true, BackupStore: true,
			Recorded: recorded("c-0", "c-1", "c-2")},
		want:     Step{Action: ActionWait, Reason: ReasonMemberDataLost},
		wantText: []string{"restore from a backup", "quorumLoss Rebuild", "newest backup"},
	}, {
		name: "no survivor but a claim being deleted is gone already: rebuilt",
		o: Observed{Size: 1, Persistent: true, Rebuild: true, BackupStore: true, Version: v,
			Recorded: recorded("c-0"), ClaimsDeleting: map[string]bool{"c-0": true}},
		want: Step{Action: ActionRebuildFromBackup, Version: v, Reason: ReasonRebuildingFromBackup},
	}, {
		name: "a member's claim exists: its pod is recreated, never a rebuild from a backup",
		o: Observed{Size: 3, Persistent: true, Rebuild: true, BackupStore: true,
			Recorded: recorded("c-0", "c-1", "c-2"), Claims: claims("c-2")},
		want: Step{Action: ActionCreatePod, Name: "c-2", ID: 3, Version: v, OnData: true, Reason: "MemberRecreated"},
	}, {
		name: "ephemeral storage, every pod gone: rebuilt from the newest backup",
		o: Observed{Size: 3, Rebuild: true, BackupStore: true, Version: v,
			Recorded: recorded("c-0", "c-1", "c-2")},
		want: Step{Action: ActionRebuildFromBackup, Version: v, Reason: ReasonRebuildingFromBackup},
	}, {
		name: "ephemeral storage, a pod left: no rebuild from a backup (it may answer again)",
		o: Observed{Size: 3, Rebuild: true, BackupStore: true, Pods: []Pod{{Name: "c-1", Phase: PodPending, Version: v}},
			Recorded: recorded("c-0", "c-1", "c-2")},
		want: Step{Action: ActionWait, Reason: "Unreachable"},
	}, {
		name:     "ephemeral storage, every pod gone, no opt-in: reported",
		o:        Observed{Size: 3, BackupStore: true, Recorded: recorded("c-0", "c-1", "c-2")},
		want:     Step{Action: ActionWait, Reason: "ClusterLost"},
		wantText: []string{"quorumLoss Rebuild"},
	}, {
		name:     "no survivor, opted in, no backup store: reported",
		o:        Observed{Size: 3, Persistent: true, Rebuild: true, Recorded: recorded("c-0", "c-1", "c-2")},
		want:     Step{Action: ActionWait, Reason: ReasonMemberDataLost},
		wantText: []string{"names no store"},
	}, {
		name: "ephemeral storage: never",
		o: Observed{Size: 3, Rebuild: true, Pods: running("c-1"),
			Recorded: recorded("c-0", "c-1", "c-2"), RaftIndexes: map[string]uint64{"c-1": 9}},
		want: Step{Action: ActionWait, Reason: "Unreachable"},
	}, {
		name: "rebuilding: the survivor's pod without the flag is restarted with it",
		o: Observed{Size: 3, Persistent: true, Rebuild: true, RebuildingFrom: "c-1", Pods: running("c-1"),
			Recorded: recorded("c-0", "c-1", "c-2"), Claims: claims("c-1")},
		want: Step{Action: ActionForceNewCluster, Name: "c-1", Version: v, OnData: true, Reason: ReasonRebuilding},
	}, {
		name: "rebuilding: its pod is gone, created with the flag (not recreated as before)",
		o: Observed{Size: 3, Persistent: true, Rebuild: true, RebuildingFrom: "c-1",
			Recorded: recorded("c-0", "c-1", "c-2"), Claims: claims("c-1")},
		want: Step{Action: ActionForceNewCluster, Name: "c-1", Version: v, OnData: true, Reason: ReasonRebuilding},
	}, {
		name: "rebuilding: flagged pod starting, wait",
		o: Observed{Size: 3, Persistent: true, Rebuild: true, RebuildingFrom: "c-1", Pods: []Pod{flagged("c-1")},
			Recorded: recorded("c-0", "c-1", "c-2"), Claims: claims("c-1")},
		want: Step{Action: ActionWait, Reason: ReasonRebuilding},
	}, {
		name: "rebuilding: the survivor's claim is gone too",
		o: Observed{Size: 3, Persistent: true, Rebuild: true, RebuildingFrom: "c-1",
			Recorded: recorded("c-0", "c-1", "c-2")},
		want:     Step{Action: ActionWait, Reason: ReasonQuorumLost},
		wantText: []string{"restore a backup"},
	}, {
		name: "rebuilt: the one-member cluster answers; restarted without the flag before it grows",
		o: Observed{Size: 3, Persistent: true, Reached: true, Pods: []Pod{flagged("c-1")},
			Members: healthy("c-1"), Claims: claims("c-1")},
		want: Step{Action: ActionUpgrade, Name: "c-1", ID: 1, Version: v, Reason: ReasonRebuilt},
	}, {
		name: "rebuilt: another survivor's pod, unknown to the new cluster, is deleted with its data",
		o: Observed{Size: 3, Persistent: true, Reached: true, Pods: append([]Pod{flagged("c-1")}, running("c-3")...),
			Members: healthy("c-1"), Claims: claims("c-1", "c-3")},
		want: Step{Action: ActionDeletePod, Name: "c-3", Reason: "MemberRemoved"},
	}, {
		name: "rebuilt and restarted: grows back one learner at a time",
		o: Observed{Size: 3, Persistent: true, Reached: true, Pods: running("c-1"),
			Members: healthy("c-1"), Claims: claims("c-1")},
		want: Step{Action: ActionAddLearner, Name: "c-0", Version: v, Reason: "ScalingUp", Grows: true},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := tt.o
			o.Cluster, o.Version, o.Bootstrapped = "c", v, true
			checkStep(t, tt.want, tt.wantText, Plan(o))
		})
	}
}

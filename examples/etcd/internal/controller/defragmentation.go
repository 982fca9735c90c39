package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/defrag"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/reconcile"
)

// DefaultMinReclaimable is spec.defragmentation.minReclaimable's default.
var DefaultMinReclaimable = resource.MustParse("64Mi")

// defragTimeout bounds one defragmentation: it rewrites the member's whole
// database, which takes long for a big one.
const defragTimeout = 5 * time.Minute

// defragment carries out the next step of spec.defragmentation, if one is
// due, and returns its result; nil when there is nothing to do (no policy,
// nothing due, a degraded cluster) or the defragmentation failed (an
// event and the metric say so; a later pass tries again). It runs only once membership.Plan
// has nothing to do, so the cluster has its size, version and health.
func (h *ClusterHooks) defragment(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) *reconcile.Result {
	d := c.Spec.Defragmentation
	if d == nil || !obs.planned.Reached {
		return nil
	}
	members := defragMembers(obs)
	st := &c.Status.Defragmentation
	now := h.now().UTC()
	if sched, err := backup.ParseSchedule(d.Schedule); d.Schedule != "" && err == nil && len(st.Pending) == 0 {
		last := c.CreationTimestamp.Time
		if st.LastRound != nil {
			last = st.LastRound.Time
		}
		if due, _ := sched.Next(last.UTC(), now); due {
			st.LastRound = &metav1.Time{Time: now}
			st.Pending = defrag.Order(members)
		}
	}
	minReclaim := DefaultMinReclaimable
	if d.MinReclaimable != nil {
		minReclaim = *d.MinReclaimable
	}
	return h.defragStep(ctx, c, obs, defrag.Policy{ThresholdPercent: d.ThresholdPercent, MinReclaimable: minReclaim.Value()}, true)
}

// defragStep takes the next step of defrag.Plan under p, with the pending
// members of status.defragmentation if round; nil when there is none or
// it failed.
func (h *ClusterHooks) defragStep(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation, p defrag.Policy, round bool) *reconcile.Result {
	st := &c.Status.Defragmentation
	now := h.now().UTC()
	members := defragMembers(obs)
	// A member removed since the round began is no longer due: left in
	// Pending, it would hold the round open for good.
	st.Pending = slices.DeleteFunc(st.Pending, func(n string) bool {
		return !slices.ContainsFunc(members, func(m defrag.Member) bool { return m.Name == n })
	})
	var pending []string
	if round {
		pending = st.Pending
	}
	step := defrag.Plan(p, members, pending)
	log := ctrl.LoggerFrom(ctx)
	switch step.Action {
	case defrag.ActionMoveLeader:
		if err := h.moveLeader(ctx, obs, step.Member, step.ToID); err != nil {
			res := reconcile.Retry(fmt.Errorf("moving leadership from %s to %s before defragmenting it: %w", step.Member, step.To, err))
			return &res
		}
		log.Info("leadership moved before defragmenting", "etcdcluster", klog.KObj(c), "from", step.Member, "to", step.To)
		emit(h.Recorder, c, normal, EventLeaderMoved, "Defragment", step.Message)
		res := reconcile.RequeueAfter(stepRequeue)
		return &res
	case defrag.ActionDefragment:
		before := obs.statuses[step.Member]
		ep := obs.healthy[step.Member]
		err := h.defragmentMember(ctx, obs, ep)
		countDefragmentation(c.Namespace, c.Name, step.Member, now, err)
		if err != nil {
			// Reported, and tried again on a later pass; the cluster
			// serves meanwhile, so the pass goes on (scheduled backups
			// must not wait on a failing defragmentation).
			log.Error(err, "defragmentation failed", "etcdcluster", klog.KObj(c), "member", step.Member)
			emit(h.Recorder, c, warning, EventDefragmentationFailed, "Defragment", fmt.Sprintf("defragmenting %s failed: %v", step.Member, err))
			return nil
		}
		reclaimed := before.Reclaimable()
		if after, err := h.memberStatus(ctx, obs, ep); err == nil {
			reclaimed = max(before.DBSize-after.DBSize, 0)
		}
		st.Pending = slices.DeleteFunc(st.Pending, func(n string) bool { return n == step.Member })
		st.LastTime, st.LastMember, st.LastReclaimedBytes = &metav1.Time{Time: now}, step.Member, reclaimed
		log.Info("member defragmented", "etcdcluster", klog.KObj(c), "member", step.Member, "reason", step.Reason, "reclaimed", reclaimed)
		emit(h.Recorder, c, normal, EventDefragmented, "Defragment",
			fmt.Sprintf("%s defragmented (%s): its database file shrank by %d bytes, from %d", step.Member, cmp.Or(p.Round, step.Reason), reclaimed, before.DBSize))
		res := reconcile.RequeueAfter(stepRequeue)
		return &res
	}
	if step.Reason == defrag.ReasonDegraded && len(st.Pending) > 0 {
		log.V(1).Info("scheduled defragmentation waits", "etcdcluster", klog.KObj(c), "reason", step.Message)
	}
	return nil
}

// defragMembers is what defrag.Plan needs of the observed members: a
// member that did not answer is unhealthy, with no sizes.
func defragMembers(obs *observation) []defrag.Member {
	out := make([]defrag.Member, 0, len(obs.planned.Members))
	for _, m := range obs.planned.Members {
		st, ok := obs.statuses[m.Name]
		out = append(out, defrag.Member{Name: m.Name, ID: m.ID, Healthy: m.Healthy && ok, Leader: m.Leader,
			Learner: m.Learner, DBSize: st.DBSize, DBSizeInUse: st.DBSizeInUse})
	}
	return out
}

// onMember calls fn with a client on endpoint alone and ctx bounded by
// timeout.
func (h *ClusterHooks) onMember(ctx context.Context, obs *observation, endpoint string, timeout time.Duration, fn func(context.Context, etcdclient.Client) error) error {
	ec, err := h.dial(ctx, obs, []string{endpoint})
	if err != nil {
		return err
	}
	defer func() { _ = ec.Close() }()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return fn(ctx, ec)
}

// defragmentMember defragments the member serving endpoint.
func (h *ClusterHooks) defragmentMember(ctx context.Context, obs *observation, endpoint string) error {
	return h.onMember(ctx, obs, endpoint, defragTimeout, func(ctx context.Context, ec etcdclient.Client) error {
		return ec.Defragment(ctx, endpoint)
	})
}

// moveLeader hands leadership from leader to member transferee, through a
// client on the leader alone (etcd refuses the call on a follower).
func (h *ClusterHooks) moveLeader(ctx context.Context, obs *observation, leader string, transferee uint64) error {
	return h.onMember(ctx, obs, obs.healthy[leader], callTimeout, func(ctx context.Context, ec etcdclient.Client) error {
		return ec.MoveLeader(ctx, transferee)
	})
}

// memberStatus asks the member serving endpoint for its status.
func (h *ClusterHooks) memberStatus(ctx context.Context, obs *observation, endpoint string) (etcdclient.Status, error) {
	var st etcdclient.Status
	err := h.onMember(ctx, obs, endpoint, callTimeout, func(ctx context.Context, ec etcdclient.Client) error {
		var err error
		st, err = ec.Status(ctx, endpoint)
		return err
	})
	return st, err
}

package controller

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/defrag"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
)

// Condition reasons of alarms.
const (
	// ReasonNoSpace (Degraded=True): etcd raised NOSPACE and refuses
	// writes; the operator compacts, defragments and disarms.
	ReasonNoSpace = "NoSpace"
	// ReasonCorrupt (Degraded=True, Stalled): etcd raised CORRUPT. The
	// operator changes nothing until a person removes the corrupt member
	// (etcdctl member remove, then delete its claim) and disarms the alarm
	// (etcdctl alarm disarm); it then replaces the member.
	ReasonCorrupt = "Corrupt"
)

// DefaultQuotaBackendBytes is etcd's quota when spec.quotaBackendBytes is
// unset.
var DefaultQuotaBackendBytes = resource.MustParse("2Gi")

// noSpaceHeadroom is the share of the quota every database must be below
// before NOSPACE is disarmed: at the quota etcd raises it again at the
// next write, and the recovery would loop.
const noSpaceHeadroom = 90

// alarmsOf are the alarm types the members reported, sorted.
func alarmsOf(obs *observation) []string {
	var out []string
	for _, st := range obs.statuses {
		for _, a := range st.Alarms {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	slices.Sort(out)
	return out
}

// corrupt stops the pass while etcd reports CORRUPT: a membership change,
// backup or defragmentation could spread or keep the corrupt data.
func (h *ClusterHooks) corrupt(ctx context.Context, c *v1alpha1.EtcdCluster, previous []string) *reconcile.Result {
	if !slices.Contains(c.Status.Alarms, etcdclient.AlarmCorrupt) {
		return nil
	}
	msg := "etcd raised a CORRUPT alarm: a member's data differs from the others'. The operator changes nothing until a person " +
		"removes that member (etcdctl alarm list names it; etcdctl member remove, then delete its claim) and disarms the alarm (etcdctl alarm disarm)"
	if !slices.Contains(previous, etcdclient.AlarmCorrupt) {
		ctrl.LoggerFrom(ctx).Info("etcd raised CORRUPT: the operator stops", "etcdcluster", klog.KObj(c))
		emit(h.Recorder, c, warning, EventCorrupt, "Observe", msg)
	}
	statusutil.MarkTrue(c, v1alpha1.ConditionDegraded, ReasonCorrupt, msg)
	res := reconcile.Waiting(ReasonCorrupt, msg, childConflictRequeue)
	return &res
}

// quotaBytes is the quota etcd applies for --quota-backend-bytes=n: its
// default for 0, none for a negative n (noQuota).
func quotaBytes(n int64) int64 {
	switch {
	case n == 0:
		return DefaultQuotaBackendBytes.Value()
	case n < 0:
		return noQuota
	}
	return n
}

// specQuota is the quota spec.quotaBackendBytes asks for.
func specQuota(c *v1alpha1.EtcdCluster) int64 {
	if q := c.Spec.QuotaBackendBytes; q != nil {
		return quotaBytes(q.Value())
	}
	return DefaultQuotaBackendBytes.Value()
}

// noQuota stands for no quota: no database reaches it, and its share
// (noSpaceHeadroom) does not overflow.
const noQuota = math.MaxInt64 / 100

// podQuota is the --quota-backend-bytes of pod's etcd container, etcd's
// default without one or without a pod. A member runs with a raised
// spec.quotaBackendBytes only once its pod is rolled out.
func podQuota(pod *corev1.Pod) int64 {
	if pod != nil {
		for _, ctr := range pod.Spec.Containers {
			if ctr.Name != "etcd" {
				continue
			}
			for _, a := range ctr.Args {
				if v, ok := strings.CutPrefix(a, quotaFlag); ok {
					if n, err := strconv.ParseInt(v, 10, 64); err == nil {
						return quotaBytes(n)
					}
				}
			}
		}
	}
	return DefaultQuotaBackendBytes.Value()
}

// defragNearQuota defragments a voting member whose database file reached
// noSpaceHeadroom of the quota while the data is below, before it raises
// NOSPACE: a member added after a recovery replays the raft log, which
// still holds the history that filled the quota, and its file outgrows
// the quota that the data is far below. nil when none is due.
func (h *ClusterHooks) defragNearQuota(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) *reconcile.Result {
	quota := specQuota(c)
	for _, pod := range obs.pods {
		quota = min(quota, podQuota(pod))
	}
	// A tenth of the quota back at least: data just below the ceiling
	// would have a member defragmented on every pass for a few pages.
	return h.defragStep(ctx, c, obs, defrag.Policy{Ceiling: quota / 100 * noSpaceHeadroom, MinReclaimable: quota / 10}, false)
}

// noSpaceMargin is how many revisions a recovery's first compaction keeps
// below the current one (etcd's revision-mode auto-compaction keeps as
// many): watchers a little behind resume without relisting. Never more
// than a tenth of the history, which the compaction is there to remove.
const noSpaceMargin = 1000

// recoverNoSpace takes the next step out of a NOSPACE alarm through the
// members that answer: compact (the first time keeping noSpaceMargin
// revisions, then at the current one), defragment each member (followers
// first), disarm once every database is well below the quota. A member
// that does not answer is left: writes wait on the round, and if its
// database fills its quota it raises the alarm again when it is back. nil
// when there is no alarm, no quorum answers, or the data itself fills the
// quota (a person's to solve: Degraded says how; the pass goes on).
func (h *ClusterHooks) recoverNoSpace(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) *reconcile.Result {
	if !slices.Contains(c.Status.Alarms, etcdclient.AlarmNoSpace) {
		c.Status.NoSpace = nil
		return nil
	}
	log := ctrl.LoggerFrom(ctx)
	quota := specQuota(c)
	st := c.Status.NoSpace
	if st == nil {
		st = &v1alpha1.NoSpaceStatus{Since: metav1.Time{Time: h.now().UTC()}}
		c.Status.NoSpace = st
	}
	if !hasQuorum(c, obs) {
		statusutil.MarkTrue(c, v1alpha1.ConditionDegraded, ReasonNoSpace, fmt.Sprintf(
			"etcd raised NOSPACE and refuses writes: the recovery waits for a quorum (%d of %d voting members answer)", c.Status.ReadyMembers, voters(obs)))
		return nil
	}
	members := defragMembers(obs)
	var answering, silent []string
	for _, m := range members {
		if m.Healthy {
			answering = append(answering, m.Name)
		} else {
			silent = append(silent, m.Name)
		}
	}
	statusutil.MarkTrue(c, v1alpha1.ConditionDegraded, ReasonNoSpace,
		fmt.Sprintf("etcd raised NOSPACE and refuses writes: recovering since %s", st.Since.Format("15:04:05Z")))
	if st.CompactedRevision == 0 {
		var rev, kept int64
		err := h.onAll(ctx, obs, func(ctx context.Context, ec etcdclient.Client) error {
			var err error
			if rev, err = ec.Revision(ctx); err != nil {
				return err
			}
			if st.Rounds == 0 {
				kept = min(noSpaceMargin, rev/10)
			}
			return ec.Compact(ctx, rev-kept)
		})
		if err != nil {
			res := reconcile.Retry(fmt.Errorf("compacting after NOSPACE: %w", err))
			return &res
		}
		st.CompactedRevision, st.KeptRevisions = rev-kept, kept
		st.Rounds++
		c.Status.Defragmentation.Pending = defrag.Order(members)
		msg := fmt.Sprintf("etcd raised NOSPACE (a database reached the quota of %d bytes) and refuses writes: compacted at revision %d "+
			"(keeping the last %d), now defragmenting %s", quota, st.CompactedRevision, kept, strings.Join(c.Status.Defragmentation.Pending, ", "))
		if st.Rounds > 1 {
			msg = fmt.Sprintf("NOSPACE: the databases still fill the quota of %d bytes: compacted again, at the current revision %d, "+
				"now defragmenting %s", quota, st.CompactedRevision, strings.Join(c.Status.Defragmentation.Pending, ", "))
		}
		log.Info("NOSPACE: compacted", "etcdcluster", klog.KObj(c), "revision", st.CompactedRevision, "kept", kept, "round", st.Rounds, "quota", quota)
		emit(h.Recorder, c, warning, EventNoSpace, "Compact", msg)
		res := reconcile.Waiting(ReasonNoSpace, msg, stepRequeue)
		return &res
	}
	if len(c.Status.Defragmentation.Pending) > 0 {
		if res := h.defragStep(ctx, c, obs, defrag.Policy{Round: "NOSPACE recovery", SkipUnhealthy: true}, true); res != nil {
			return res
		}
		if left := slices.DeleteFunc(slices.Clone(c.Status.Defragmentation.Pending), func(n string) bool { return slices.Contains(silent, n) }); len(left) > 0 {
			res := reconcile.Waiting(ReasonNoSpace, "NOSPACE: defragmenting "+strings.Join(left, ", "), stepRequeue)
			return &res
		}
	}
	var full []string
	fillsSpec, inUseFills := false, false
	for _, m := range members {
		if !m.Healthy {
			continue
		}
		q := min(quota, podQuota(obs.pods[m.Name]))
		if m.DBSize*100 >= q*noSpaceHeadroom {
			full = append(full, fmt.Sprintf("%s %d bytes (%d in use) of %d", m.Name, m.DBSize, m.DBSizeInUse, q))
			fillsSpec = fillsSpec || m.DBSize*100 >= quota*noSpaceHeadroom
			inUseFills = inUseFills || m.DBSizeInUse*100 >= q*noSpaceHeadroom
		}
	}
	if len(full) > 0 && (!inUseFills || st.KeptRevisions > 0) {
		// Keys deleted since, or history inside the margin: another round
		// returns their space.
		st.CompactedRevision = 0
		res := reconcile.Waiting(ReasonNoSpace, fmt.Sprintf("NOSPACE: the databases still fill %d%% or more of their quota (%s): compacting again",
			noSpaceHeadroom, strings.Join(full, ", ")), stepRequeue)
		return &res
	}
	if len(full) > 0 {
		msg := fmt.Sprintf("NOSPACE stays raised: after compaction and defragmentation the databases still fill %d%% or more of their quota "+
			"(%s). Raise spec.quotaBackendBytes, or delete keys (etcd allows deletes under NOSPACE)",
			noSpaceHeadroom, strings.Join(full, ", "))
		if !fillsSpec {
			msg = fmt.Sprintf("NOSPACE stays raised until the members restart with spec.quotaBackendBytes (%d bytes): "+
				"the databases fill %d%% or more of the quota they run with (%s)", quota, noSpaceHeadroom, strings.Join(full, ", "))
		}
		// Backups and the rest of the pass go on meanwhile.
		statusutil.MarkTrue(c, v1alpha1.ConditionDegraded, ReasonNoSpace, msg)
		return nil
	}
	var disarmed []string
	err := h.onAll(ctx, obs, func(ctx context.Context, ec etcdclient.Client) error {
		alarms, err := ec.Alarms(ctx)
		if err != nil {
			return err
		}
		for _, a := range alarms {
			if a.Type != etcdclient.AlarmNoSpace {
				continue
			}
			if err := ec.Disarm(ctx, a); err != nil {
				return err
			}
			disarmed = append(disarmed, a.Type+" of "+etcdclient.FormatID(a.MemberID))
		}
		return nil
	})
	if err != nil {
		res := reconcile.Retry(fmt.Errorf("disarming NOSPACE: %w", err))
		return &res
	}
	msg := fmt.Sprintf("disarmed %s after compacting at revision %d and defragmenting %s: each database is below %d%% of the quota of %d bytes; writes go through again",
		strings.Join(disarmed, ", "), st.CompactedRevision, strings.Join(answering, ", "), noSpaceHeadroom, quota)
	if len(silent) > 0 {
		msg += fmt.Sprintf(" (%s did not answer: left as it is)", strings.Join(silent, ", "))
	}
	log.Info("NOSPACE disarmed", "etcdcluster", klog.KObj(c), "alarms", disarmed, "notAnswering", silent)
	emit(h.Recorder, c, normal, EventAlarmDisarmed, "Disarm", msg)
	c.Status.NoSpace = nil
	// The round is over: a member that did not answer is defragmented in
	// the round its own alarm starts.
	c.Status.Defragmentation.Pending = nil
	c.Status.Alarms = slices.DeleteFunc(c.Status.Alarms, func(a string) bool { return a == etcdclient.AlarmNoSpace })
	res := reconcile.RequeueAfter(stepRequeue)
	return &res
}

// onAll calls fn with a client on every healthy member, bounded by
// callTimeout.
func (h *ClusterHooks) onAll(ctx context.Context, obs *observation, fn func(context.Context, etcdclient.Client) error) error {
	ec, err := h.clientOn(ctx, obs, "")
	if err != nil {
		return err
	}
	defer func() { _ = ec.Close() }()
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return fn(ctx, ec)
}

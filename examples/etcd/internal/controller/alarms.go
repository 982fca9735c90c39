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

// recoverNoSpace takes the next step out of a NOSPACE alarm: compact at
// the current revision, defragment every member (followers first), then
// disarm once every database is well below the quota. nil when there is
// no alarm, or when the data itself fills the quota (a person's to solve:
// Degraded says how; the rest of the pass goes on).
func (h *ClusterHooks) recoverNoSpace(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) *reconcile.Result {
	if !slices.Contains(c.Status.Alarms, etcdclient.AlarmNoSpace) {
		c.Status.NoSpace = nil
		return nil
	}
	log := ctrl.LoggerFrom(ctx)
	quota := DefaultQuotaBackendBytes.Value()
	if q := c.Spec.QuotaBackendBytes; q != nil {
		quota = quotaBytes(q.Value())
	}
	st := c.Status.NoSpace
	if st == nil {
		st = &v1alpha1.NoSpaceStatus{Since: metav1.Time{Time: h.now().UTC()}}
		c.Status.NoSpace = st
	}
	statusutil.MarkTrue(c, v1alpha1.ConditionDegraded, ReasonNoSpace,
		fmt.Sprintf("etcd raised NOSPACE and refuses writes: recovering since %s", st.Since.Format("15:04:05Z")))
	if st.CompactedRevision == 0 {
		var rev int64
		err := h.onAll(ctx, obs, func(ctx context.Context, ec etcdclient.Client) error {
			var err error
			if rev, err = ec.Revision(ctx); err != nil {
				return err
			}
			return ec.Compact(ctx, rev)
		})
		if err != nil {
			res := reconcile.Retry(fmt.Errorf("compacting after NOSPACE: %w", err))
			return &res
		}
		st.CompactedRevision = rev
		c.Status.Defragmentation.Pending = defrag.Order(defragMembers(obs))
		msg := fmt.Sprintf("etcd raised NOSPACE (a database reached the quota of %d bytes) and refuses writes: compacted at revision %d, "+
			"now defragmenting %s", quota, rev, strings.Join(c.Status.Defragmentation.Pending, ", "))
		log.Info("NOSPACE: compacted", "etcdcluster", klog.KObj(c), "revision", rev, "quota", quota)
		emit(h.Recorder, c, warning, EventNoSpace, "Compact", msg)
		res := reconcile.Waiting(ReasonNoSpace, msg, stepRequeue)
		return &res
	}
	if len(c.Status.Defragmentation.Pending) > 0 {
		if res := h.defragStep(ctx, c, obs, defrag.Policy{Round: "NOSPACE recovery"}); res != nil {
			return res
		}
		if len(c.Status.Defragmentation.Pending) > 0 {
			res := reconcile.Waiting(ReasonNoSpace, "NOSPACE: waiting for every member to be healthy to defragment "+
				strings.Join(c.Status.Defragmentation.Pending, ", "), stepRequeue)
			return &res
		}
	}
	var full []string
	fillsSpec := false
	for _, m := range defragMembers(obs) {
		if !m.Healthy {
			res := reconcile.Waiting(ReasonNoSpace, fmt.Sprintf("NOSPACE: waiting for %s to answer before disarming", m.Name), stepRequeue)
			return &res
		}
		q := min(quota, podQuota(obs.pods[m.Name]))
		if m.DBSize*100 >= q*noSpaceHeadroom {
			full = append(full, fmt.Sprintf("%s %d bytes (%d in use) of %d", m.Name, m.DBSize, m.DBSizeInUse, q))
			fillsSpec = fillsSpec || m.DBSize*100 >= quota*noSpaceHeadroom
			if m.DBSizeInUse*100 < q*noSpaceHeadroom {
				// Keys deleted since: another round returns their space.
				st.CompactedRevision = 0
			}
		}
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
	msg := fmt.Sprintf("disarmed %s after compacting at revision %d and defragmenting: every database is below %d%% of the quota of %d bytes; writes go through again",
		strings.Join(disarmed, ", "), st.CompactedRevision, noSpaceHeadroom, quota)
	log.Info("NOSPACE disarmed", "etcdcluster", klog.KObj(c), "alarms", disarmed)
	emit(h.Recorder, c, normal, EventAlarmDisarmed, "Disarm", msg)
	c.Status.NoSpace = nil
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

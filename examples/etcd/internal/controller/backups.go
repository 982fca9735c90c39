package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/snapshot"
	"github.com/opkit-dev/opkit/operation"
	"github.com/opkit-dev/opkit/reconcile"
)

// source is a voting member a backup may stream from.
type source struct {
	name, endpoint string
	leader         bool
}

// sources are the healthy voting members of obs, the leader first:
// a learner may still be catching up.
func (obs *observation) sources() []source {
	var out []source
	for name, st := range obs.statuses {
		if !st.IsLearner {
			out = append(out, source{name: name, endpoint: obs.healthy[name], leader: st.Leader == st.ID})
		}
	}
	return sortSources(out)
}

func sortSources(s []source) []source {
	slices.SortFunc(s, func(a, b source) int {
		if a.leader != b.leader {
			if a.leader {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	return s
}

// errStaleSnapshot is returned (wrapped) when no source had applied every
// write acknowledged before the backup started.
var errStaleSnapshot = errors.New("snapshot older than the cluster's revision")

// snapshotInto backs up c's data into store from the first of sources
// that has applied every write acknowledged before it started and
// answers: a linearizable read gives the cluster's revision first, and a
// snapshot at an older revision is discarded before its manifest is
// written.
func snapshotInto(ctx context.Context, f etcdclient.Factory, store backup.Store, sources []source, extra map[string]string, opts ...etcdclient.DialOption) error {
	if len(sources) == 0 {
		return errors.New("no healthy voting member to snapshot")
	}
	eps := make([]string, 0, len(sources))
	for _, s := range sources {
		eps = append(eps, s.endpoint)
	}
	all, err := f.New(ctx, eps, opts...)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, callTimeout)
	rev, err := all.Revision(rctx)
	cancel()
	_ = all.Close()
	if err != nil {
		return fmt.Errorf("reading the cluster's revision before the snapshot: %w", err)
	}
	var errs []error
	for _, s := range sources {
		_, err := snapshotFrom(ctx, f, store, s, rev, extra, opts...)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
		// A member's failure (behind, stalled, gone, a reset
		// connection) leaves the next voter to try; a store that is
		// down or a canceled attempt fails them all alike.
		if ctx.Err() != nil || errors.Is(err, backup.ErrStoreUnavailable) {
			break
		}
	}
	return errors.Join(errs...)
}

func snapshotFrom(ctx context.Context, f etcdclient.Factory, store backup.Store, s source, rev int64, extra map[string]string, opts ...etcdclient.DialOption) (backup.Manifest, error) {
	ec, err := f.New(ctx, []string{s.endpoint}, opts...)
	if err != nil {
		return backup.Manifest{}, err
	}
	defer func() { _ = ec.Close() }()
	m, err := backup.Backup(ctx, store, snapshot.Snapshotter{Client: ec, Extra: extra, MinRevision: rev})
	if errors.Is(err, snapshot.ErrBehind) {
		return m, fmt.Errorf("member %s: %w: %w", s.name, errStaleSnapshot, err)
	}
	return m, err
}

// OperationScheduledBackup is the Type of status.backupOperation.
const OperationScheduledBackup = "ScheduledBackup"

// ExtraOperation is the key, in a scheduled backup's manifest, of the ID of
// the operation that took it (status.backupOperation.id): a pass after a
// restart finds the backup by it.
const ExtraOperation = "etcd.opkit.dev/operation"

// reasonScheduledFailed is the Reason of a scheduled backup's Record when
// its attempt failed: the next waits for the next scheduled time.
const reasonScheduledFailed = "SnapshotFailed"

// scheduledAttempts: an interrupted attempt (an operator restart) runs
// once more; a failed one does not (reasonScheduledFailed).
const scheduledAttempts = 2

// scheduledBackup starts the backup spec.backup.schedule asks for, if one
// is due, and steps the one under way (status.backupOperation), which the
// Runner takes beside the passes. Once it succeeded, the retention is
// applied to scheduled backups; a failed one is counted and reported, and
// the next waits for the next scheduled time. Without a backup to take,
// the retention is still applied once per spec generation in each
// operator process (applyRetention).
func (h *ClusterHooks) scheduledBackup(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) reconcile.Result {
	b := c.Spec.Backup
	if b == nil {
		if c.Status.BackupOperation != nil {
			h.Runner.Cancel(c)
			c.Status.BackupOperation = nil
		}
		// Once per generation, as the retention: only a spec change
		// leaves a copy of a store's Secret unneeded.
		if now := h.now(); h.retained.due(c.UID, c.Generation, now) {
			if err := h.dropStoreCredentials(ctx, c); err != nil {
				h.retained.failed(c.UID, c.Generation, now.Add(retentionRetry))
				ctrl.LoggerFrom(ctx).Error(err, "the copy of the backup store's Secret is not deleted", "etcdcluster", klog.KObj(c), "retryIn", retentionRetry)
			} else {
				h.retained.record(c.UID, c.Generation)
			}
		}
		return reconcile.RequeueAfter(healthRequeue)
	}
	if c.Status.BackupOperation != nil {
		return h.stepScheduled(ctx, c, obs)
	}
	due, after, err := h.backupDue(c)
	if b.Schedule == "" || err != nil {
		// An invalid schedule is reported by Reconcile (invalidFields).
		h.applyRetention(ctx, c)
		return reconcile.RequeueAfter(healthRequeue)
	}
	if !due {
		h.applyRetention(ctx, c)
		return reconcile.RequeueAfter(min(after, healthRequeue))
	}
	now := h.now().UTC()
	c.Status.Backup.RecordAttempt(now)
	c.Status.BackupOperation = &operation.Record{}
	if err := operation.Start(c.Status.BackupOperation, OperationScheduledBackup, now.Format("20060102T150405Z"), now); err != nil {
		return reconcile.Retry(err)
	}
	return h.stepScheduled(ctx, c, obs)
}

// stepScheduled advances status.backupOperation and records its outcome.
func (h *ClusterHooks) stepScheduled(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) reconcile.Result {
	rec := c.Status.BackupOperation
	if rec.Type != OperationScheduledBackup {
		// A final backup's, left by a deletion that did not finish.
		c.Status.BackupOperation = nil
		return reconcile.RequeueAfter(time.Second)
	}
	store, err := clusterStore(ctx, h.Stores, c.Namespace, c.Name, c.Spec.Backup.StoreRef)
	if err != nil {
		countBackup(c.Namespace, c.Name, TriggerSchedule, err)
		return h.scheduledFailed(c, err)
	}
	next := h.Runner.Step(ctx, c, rec, h.scheduledOperation(c, store, obs))
	switch rec.Phase {
	case operation.Succeeded:
		m, ok, err := findScheduled(ctx, store, c.UID, rec.ID)
		if err != nil {
			return reconcile.Retry(fmt.Errorf("reading the scheduled backup taken: %w", err))
		}
		if !ok {
			return reconcile.Retry(errors.New("the scheduled backup completed but its manifest is not in the store"))
		}
		c.Status.BackupOperation = nil
		c.Status.Backup.RecordSuccess(m)
		ctrl.LoggerFrom(ctx).Info("scheduled backup taken", "etcdcluster", klog.KObj(c), "id", m.ID, "size", m.Size)
		emit(h.Recorder, c, normal, EventBackupTaken, "Backup", fmt.Sprintf("scheduled backup %s taken at revision %s (%d bytes)", m.ID, m.Snapshot.ConsistencyPoint, m.Size))
		h.refreshStoreCredentials(ctx, c)
		if err := h.pruneScheduled(ctx, c, store, h.now().UTC()); err != nil {
			return reconcile.Retry(err)
		}
		after := healthRequeue
		if _, a, err := h.backupDue(c); err == nil {
			after = min(a, after)
		}
		return reconcile.RequeueAfter(after)
	case operation.Failed:
		err := errors.New(rec.Message)
		if rec.Reason != reasonScheduledFailed {
			// Interrupted or canceled: Run did not count it.
			countBackup(c.Namespace, c.Name, TriggerSchedule, err)
		}
		return h.scheduledFailed(c, err)
	}
	return reconcile.RequeueAfter(next)
}

// scheduledFailed records a failed scheduled backup; it is kept in
// status.backup until the next success, beyond the Ready condition of this
// pass.
func (h *ClusterHooks) scheduledFailed(c *v1alpha1.EtcdCluster, err error) reconcile.Result {
	c.Status.BackupOperation = nil
	c.Status.Backup.RecordFailure(h.now(), err)
	emit(h.Recorder, c, warning, EventBackupFailed, "Backup", "scheduled backup failed: "+err.Error())
	return reconcile.Retry(fmt.Errorf("scheduled backup: %w", err))
}

// scheduledOperation is c's scheduled backup into store from the members
// obs found healthy; its manifest carries the operation's ID.
func (h *ClusterHooks) scheduledOperation(c *v1alpha1.EtcdCluster, store backup.Store, obs *observation) operation.Operation {
	uid, ns, name := c.UID, c.Namespace, c.Name
	sources, tlsConfig := obs.sources(), obs.tls
	return operation.Operation{
		Type:        OperationScheduledBackup,
		MaxAttempts: scheduledAttempts,
		Run: func(ctx context.Context, id string, progress func(string)) error {
			progress(fmt.Sprintf("snapshotting one of %d healthy voting members", len(sources)))
			err := snapshotInto(ctx, h.Etcd, store, sources,
				map[string]string{ExtraTrigger: TriggerSchedule, ExtraClusterUID: string(uid), ExtraOperation: id}, etcdclient.WithTLS(tlsConfig))
			countBackup(ns, name, TriggerSchedule, err)
			if err != nil {
				return operation.Permanent(reasonScheduledFailed, err)
			}
			return nil
		},
		Done: func(ctx context.Context, id string) (bool, error) {
			_, ok, err := findScheduled(ctx, store, uid, id)
			return ok, err
		},
	}
}

// findScheduled returns the scheduled backup operation id of the cluster
// with uid took, if it is in store.
func findScheduled(ctx context.Context, store backup.Store, uid types.UID, id string) (backup.Manifest, bool, error) {
	found, err := backup.Find(ctx, store, func(m backup.Manifest) bool {
		return m.Snapshot.Extra[ExtraOperation] == id && m.Snapshot.Extra[ExtraClusterUID] == string(uid)
	})
	if err != nil || len(found) == 0 {
		return backup.Manifest{}, false, err
	}
	return found[0], true, nil
}

// backupDue reports whether spec.backup.schedule has a backup due, and
// how long until the next one.
func (h *ClusterHooks) backupDue(c *v1alpha1.EtcdCluster) (bool, time.Duration, error) {
	sched, err := backup.ParseSchedule(c.Spec.Backup.Schedule)
	if err != nil {
		return false, 0, err
	}
	last := c.Status.Backup.LastRun()
	if last.IsZero() {
		last = c.CreationTimestamp.Time
	}
	due, after := sched.Next(last.UTC(), h.now().UTC())
	return due, after, nil
}

// errNoQuorumToBackUp is why a due scheduled backup was skipped.
var errNoQuorumToBackUp = errors.New("skipped: the cluster has no quorum, so no member can prove it holds every acknowledged write")

// backupWhileWaiting takes a due scheduled backup on a pass that waits on
// a membership step: a member that stays down, or a learner that takes
// hours to catch up, must not stop the schedule. Without a quorum the due backup is counted and
// reported as failed (status.backup, the metric, an event) and the next
// waits for the next scheduled time.
func (h *ClusterHooks) backupWhileWaiting(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) {
	if c.Spec.Backup != nil && c.Status.BackupOperation != nil {
		_ = h.stepScheduled(ctx, c, obs) // reported by stepScheduled; the pass waits on its step
		return
	}
	if c.Spec.Backup == nil || c.Spec.Backup.Schedule == "" {
		return
	}
	if due, _, err := h.backupDue(c); err != nil || !due {
		return
	}
	if hasQuorum(c, obs) {
		_ = h.scheduledBackup(ctx, c, obs) // reported by scheduledBackup; the pass waits on its step
		return
	}
	now := h.now().UTC()
	c.Status.Backup.RecordAttempt(now)
	countBackup(c.Namespace, c.Name, TriggerSchedule, errNoQuorumToBackUp)
	c.Status.Backup.RecordFailure(now, errNoQuorumToBackUp)
	emit(h.Recorder, c, warning, EventBackupFailed, "Backup", "scheduled backup "+errNoQuorumToBackUp.Error())
}

// retentionRetry is how long applyRetention waits after a failed attempt.
const retentionRetry = 5 * time.Minute

// applyRetention applies spec.backup.retention to the cluster's store unless
// this process did so for the spec's generation already: after a restart
// (the operator may have stopped between a backup's commit and its prune)
// and after a change of spec.backup (a lower retention, a cleared
// schedule), when no new scheduled backup may come to apply it. It runs on
// passes that find the cluster settled (no membership step, restore or
// defragmentation under way). An attempt that fails, the store unusable
// included, is logged and made again after retentionRetry; the pass goes on
// either way, since scheduled backups report their own store errors and
// nothing else waits on the retention.
func (h *ClusterHooks) applyRetention(ctx context.Context, c *v1alpha1.EtcdCluster) {
	now := h.now()
	if !h.retained.due(c.UID, c.Generation, now) {
		return
	}
	h.refreshStoreCredentials(ctx, c)
	store, err := clusterStore(ctx, h.Stores, c.Namespace, c.Name, c.Spec.Backup.StoreRef)
	if err == nil {
		err = h.pruneScheduled(ctx, c, store, now.UTC())
	}
	if err != nil {
		h.retained.failed(c.UID, c.Generation, now.Add(retentionRetry))
		ctrl.LoggerFrom(ctx).Error(err, "spec.backup.retention not applied", "etcdcluster", klog.KObj(c), "retryIn", retentionRetry)
	}
}

// pruneScheduled keeps c's newest spec.backup.retention scheduled backups
// in store and deletes its older ones (another cluster's, by UID, are
// neither counted nor deleted), logging the IDs deleted and naming them in
// one BackupsPruned event. On-demand and final backups share
// the store and are not counted or deleted: an EtcdBackup's backup lives
// as long as the store keeps it. Leftovers of interrupted backups are
// removed after backup.DefaultIncompleteGrace. Backups whose manifest
// cannot be read (of a newer operator, damaged) are never deleted: they
// are logged. Once it succeeds, applyRetention has nothing to do until the
// spec changes or the operator restarts.
func (h *ClusterHooks) pruneScheduled(ctx context.Context, c *v1alpha1.EtcdCluster, store backup.Store, now time.Time) error {
	log := ctrl.LoggerFrom(ctx)
	// The prefix is namespace/name: a cluster re-created under the name,
	// or another given the same bucket and prefix, writes beside c.
	uid := string(c.UID)
	scheduled := func(m backup.Manifest) bool {
		return m.Snapshot.Extra[ExtraTrigger] == TriggerSchedule && m.Snapshot.Extra[ExtraClusterUID] == uid
	}
	keep := int(max(c.Spec.Backup.Retention, 1))
	res, err := backup.Prune(ctx, store, backup.Policy{KeepLast: keep, Match: scheduled}, now)
	for _, u := range res.Unreadable {
		log.Info("a backup in the store is kept: its manifest cannot be read or disagrees with its data; inspect it",
			"etcdcluster", klog.KObj(c), "id", u.ID, "reason", u.Err.Error())
	}
	if len(res.Deleted) > 0 {
		log.Info("scheduled backups deleted by spec.backup.retention", "etcdcluster", klog.KObj(c), "retention", keep, "deleted", res.Deleted)
		emit(h.Recorder, c, normal, EventBackupsPruned, "Prune",
			fmt.Sprintf("deleted scheduled backups beyond the retention of %d: %s", keep, strings.Join(res.Deleted, ", ")))
	}
	if err != nil {
		return fmt.Errorf("pruning scheduled backups: %w", err)
	}
	h.retained.record(c.UID, c.Generation)
	return nil
}

// retention remembers, by cluster UID, whether this process has applied
// spec.backup.retention of the spec's current generation to the cluster's
// store, or when to try again after a failure. It starts empty: a
// restarted operator applies each cluster's retention once.
type retention struct {
	mu    sync.Mutex
	state map[types.UID]retentionState
}

type retentionState struct {
	generation int64
	applied    bool
	// retryAt is when a failed attempt for generation may be made again.
	retryAt time.Time
}

// due reports whether the retention of generation should be applied now.
func (r *retention) due(uid types.UID, generation int64, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.state[uid]
	if !ok || s.generation != generation {
		return true
	}
	return !s.applied && !now.Before(s.retryAt)
}

func (r *retention) record(uid types.UID, generation int64) {
	r.set(uid, retentionState{generation: generation, applied: true})
}

func (r *retention) failed(uid types.UID, generation int64, retryAt time.Time) {
	r.set(uid, retentionState{generation: generation, retryAt: retryAt})
}

func (r *retention) set(uid types.UID, s retentionState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == nil {
		r.state = map[types.UID]retentionState{}
	}
	r.state[uid] = s
}

// forget drops a deleted cluster.
func (r *retention) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.state, uid)
}

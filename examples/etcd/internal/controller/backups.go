package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/snapshot"
	"github.com/opkit-dev/opkit/reconcile"
)

// snapshotInto backs up the first healthy member, by name, into store,
// recording extra in the manifest.
func snapshotInto(ctx context.Context, f etcdclient.Factory, store backup.Store, healthy map[string]string, extra map[string]string, opts ...etcdclient.DialOption) (backup.Manifest, error) {
	names := make([]string, 0, len(healthy))
	for n := range healthy {
		names = append(names, n)
	}
	if len(names) == 0 {
		return backup.Manifest{}, errors.New("no healthy member to snapshot")
	}
	slices.Sort(names)
	ec, err := f.New(ctx, []string{healthy[names[0]]}, opts...)
	if err != nil {
		return backup.Manifest{}, err
	}
	defer func() { _ = ec.Close() }()
	return backup.Backup(ctx, store, snapshot.Snapshotter{Client: ec, Extra: extra})
}

// scheduledBackup takes the backup spec.backup.schedule asks for, if one is
// due, and applies the retention to scheduled backups. A failed attempt is
// counted and reported, and the next one waits for the next scheduled time.
// Without a backup to take, the retention is still applied once per spec
// generation in each operator process (applyRetention).
func (h *ClusterHooks) scheduledBackup(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) reconcile.Result {
	b := c.Spec.Backup
	if b == nil {
		return reconcile.RequeueAfter(healthRequeue)
	}
	if b.Schedule == "" {
		h.applyRetention(ctx, c)
		return reconcile.RequeueAfter(healthRequeue)
	}
	sched, err := backup.ParseSchedule(b.Schedule)
	if err != nil {
		return reconcile.Terminal(reconcile.ReasonInvalidSpec, err) // Validate catches this first
	}
	last := c.Status.Backup.LastRun()
	if last.IsZero() {
		last = c.CreationTimestamp.Time
	}
	now := h.now().UTC()
	due, after := sched.Next(last.UTC(), now)
	if !due {
		h.applyRetention(ctx, c)
		return reconcile.RequeueAfter(min(after, healthRequeue))
	}
	c.Status.Backup.RecordAttempt(now)
	store, err := clusterStore(ctx, h.Stores, c.Namespace, c.Name, b.StoreRef)
	var m backup.Manifest
	if err == nil {
		m, err = snapshotInto(ctx, h.Etcd, store, obs.healthy, map[string]string{ExtraTrigger: TriggerSchedule, ExtraClusterUID: string(c.UID)}, etcdclient.WithTLS(obs.tls))
	}
	countBackup(c.Namespace, c.Name, TriggerSchedule, err)
	if err != nil {
		// Kept in status.backup until the next success, beyond the
		// Ready condition of this pass.
		c.Status.Backup.RecordFailure(h.now(), err)
		emit(h.Recorder, c, warning, EventBackupFailed, "Backup", "scheduled backup failed: "+err.Error())
		return reconcile.Retry(fmt.Errorf("scheduled backup: %w", err))
	}
	c.Status.Backup.RecordSuccess(m)
	ctrl.LoggerFrom(ctx).Info("scheduled backup taken", "etcdcluster", klog.KObj(c), "id", m.ID, "size", m.Size)
	emit(h.Recorder, c, normal, EventBackupTaken, "Backup", fmt.Sprintf("scheduled backup %s taken at revision %s (%d bytes)", m.ID, m.Snapshot.ConsistencyPoint, m.Size))
	if _, err := h.pruneScheduled(ctx, c, store, now); err != nil {
		return reconcile.Retry(err)
	}
	return reconcile.RequeueAfter(min(after, healthRequeue))
}

// applyRetention applies spec.backup.retention to the cluster's store unless
// this process did so for the spec's generation already: after a restart
// (the operator may have stopped between a backup's commit and its prune)
// and after a change of spec.backup (a lower retention, a cleared
// schedule), when no new scheduled backup may come to apply it. A store
// that cannot be opened or pruned now is tried again at the next pass; the
// pass goes on either way, since scheduled backups report their own store
// errors and nothing else waits on the retention.
func (h *ClusterHooks) applyRetention(ctx context.Context, c *v1alpha1.EtcdCluster) {
	if h.retained.applied(c.UID, c.Generation) {
		return
	}
	log := ctrl.LoggerFrom(ctx)
	store, err := clusterStore(ctx, h.Stores, c.Namespace, c.Name, c.Spec.Backup.StoreRef)
	if err != nil {
		// Scheduled backups and the final backup report an unusable store.
		log.V(1).Info("retention not applied: the backup store cannot be opened", "etcdcluster", klog.KObj(c), "error", err.Error())
		return
	}
	deleted, err := h.pruneScheduled(ctx, c, store, h.now().UTC())
	if err != nil {
		log.Info("retention not applied, retried at the next pass", "etcdcluster", klog.KObj(c), "error", err.Error())
		return
	}
	if len(deleted) > 0 {
		log.Info("retention applied without a new backup", "etcdcluster", klog.KObj(c), "retention", c.Spec.Backup.Retention, "deleted", deleted)
	}
}

// pruneScheduled keeps the newest spec.backup.retention scheduled backups in
// store and deletes older ones, returning the IDs deleted. On-demand and
// final backups share the store and are not counted or deleted: an
// EtcdBackup's backup lives as long as the store keeps it. Leftovers of
// interrupted backups are removed after backup.DefaultIncompleteGrace.
// Backups whose manifest cannot be read (of a newer operator, damaged) are
// never deleted: they are logged. Once it succeeds, applyRetention has
// nothing to do until the spec changes or the operator restarts.
func (h *ClusterHooks) pruneScheduled(ctx context.Context, c *v1alpha1.EtcdCluster, store backup.Store, now time.Time) ([]string, error) {
	scheduled := func(m backup.Manifest) bool { return m.Snapshot.Extra[ExtraTrigger] == TriggerSchedule }
	keep := int(max(c.Spec.Backup.Retention, 1))
	res, err := backup.Prune(ctx, store, backup.Policy{KeepLast: keep, Match: scheduled}, now)
	for _, u := range res.Unreadable {
		ctrl.LoggerFrom(ctx).Info("a backup in the store is kept: its manifest cannot be read or disagrees with its data; inspect it",
			"etcdcluster", klog.KObj(c), "id", u.ID, "reason", u.Err.Error())
	}
	if err != nil {
		return res.Deleted, fmt.Errorf("pruning scheduled backups: %w", err)
	}
	h.retained.record(c.UID, c.Generation)
	return res.Deleted, nil
}

// retention remembers, by cluster UID, the spec generation whose
// spec.backup.retention this process has applied to the cluster's store.
// It starts empty: a restarted operator applies each cluster's retention
// once.
type retention struct {
	mu   sync.Mutex
	done map[types.UID]int64
}

func (r *retention) applied(uid types.UID, generation int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.done[uid]
	return ok && g == generation
}

func (r *retention) record(uid types.UID, generation int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done == nil {
		r.done = map[types.UID]int64{}
	}
	r.done[uid] = generation
}

// forget drops a deleted cluster.
func (r *retention) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.done, uid)
}

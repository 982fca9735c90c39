package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

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
func (h *ClusterHooks) scheduledBackup(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) reconcile.Result {
	b := c.Spec.Backup
	if b == nil || b.Schedule == "" {
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
	unreadable, err := pruneScheduled(ctx, store, int(max(b.Retention, 1)), now)
	for _, u := range unreadable {
		ctrl.LoggerFrom(ctx).Info("a backup in the store is kept: its manifest cannot be read or disagrees with its data; inspect it",
			"etcdcluster", klog.KObj(c), "id", u.ID, "reason", u.Err.Error())
	}
	if err != nil {
		return reconcile.Retry(err)
	}
	return reconcile.RequeueAfter(min(after, healthRequeue))
}

// pruneScheduled keeps the newest keep scheduled backups in store and
// deletes older ones. On-demand and final backups share the store and are
// not counted or deleted: an EtcdBackup's backup lives as long as the
// store keeps it. Leftovers of interrupted backups are removed after
// backup.DefaultIncompleteGrace. Backups whose manifest cannot be read (of
// a newer operator, damaged) are never deleted: they are returned.
func pruneScheduled(ctx context.Context, store backup.Store, keep int, now time.Time) ([]backup.UnreadableBackup, error) {
	scheduled := func(m backup.Manifest) bool { return m.Snapshot.Extra[ExtraTrigger] == TriggerSchedule }
	res, err := backup.Prune(ctx, store, backup.Policy{KeepLast: keep, Match: scheduled}, now)
	if err != nil {
		return res.Unreadable, fmt.Errorf("pruning scheduled backups: %w", err)
	}
	return res.Unreadable, nil
}

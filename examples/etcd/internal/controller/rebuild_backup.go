package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
	"github.com/opkit-dev/opkit/reconcile"
)

// ReasonNoBackupToRebuildFrom (Stalled=True): no member of the cluster
// kept its data and spec.backup.storeRef holds no backup of it whose data
// verifies; the message names the backups skipped and why. Looked at
// again every 30 s (a backup copied into the store is found).
const ReasonNoBackupToRebuildFrom = "NoBackupToRebuildFrom"

// EventRebuildingFromBackup (Warning): no member kept its data; the
// cluster is rebuilt from the backup the note names, and writes after it
// are lost.
const EventRebuildingFromBackup = membership.ReasonRebuildingFromBackup

// rebuildFromBackup starts rebuilding c, none of whose members kept its
// data (membership.ActionRebuildFromBackup), from the newest verified
// backup of it in spec.backup.storeRef: it records the backup in
// status.recovery, forgets the members, marks the data not restored and
// takes a new cluster token, so that the next pass, reading that status
// back, bootstraps the cluster from the backup as for spec.restore.
// Nothing is created in this pass: a lost status write only repeats the
// choice.
func (h *ClusterHooks) rebuildFromBackup(ctx context.Context, c *v1alpha1.EtcdCluster, step membership.Step) reconcile.Result {
	ref := c.Spec.Backup.StoreRef
	store, err := clusterStore(ctx, h.Stores, c.Namespace, c.Name, ref)
	if err != nil {
		if storeUnusable(err) {
			return reconcile.Terminal(ReasonNoBackupToRebuildFrom, fmt.Errorf("%s; spec.backup.storeRef: %w", step.Message, err)).RecheckAfter(childConflictRequeue)
		}
		return reconcile.Retry(err)
	}
	m, rev, skipped, err := newestVerifiedBackup(ctx, store, c)
	if err != nil {
		return reconcile.Retry(fmt.Errorf("finding a backup to rebuild %s from: %w", c.Name, err))
	}
	if m == nil {
		msg := "no member survives, and spec.backup.storeRef holds no verified backup of this cluster to rebuild from"
		if len(skipped) > 0 {
			msg += "; skipped: " + strings.Join(skipped, "; ")
		}
		return reconcile.Terminal(ReasonNoBackupToRebuildFrom, errors.New(msg)).RecheckAfter(childConflictRequeue)
	}
	c.Status.Recovery = &v1alpha1.RecoveryStatus{Backup: m.ID, Revision: rev, StartTime: ptr.To(metav1.NewTime(h.now()))}
	c.Status.Members = nil
	c.Status.Restored = false
	// A new cluster, not the lost one: its members must not take a
	// leftover of the old one for a peer.
	c.Status.ClusterToken = string(c.UID) + "-" + m.ID
	msg := fmt.Sprintf("%s; rebuilding it from backup %s taken at %s (revision %d): writes after it are lost", step.Message, m.ID, m.StartTime.UTC().Format("2006-01-02T15:04:05Z"), rev)
	if len(skipped) > 0 {
		msg += "; skipped newer backups: " + strings.Join(skipped, "; ")
	}
	ctrl.LoggerFrom(ctx).Info("rebuilding from a backup", "etcdcluster", klog.KObj(c), "backup", m.ID, "revision", rev, "skipped", skipped)
	emit(h.Recorder, c, warning, EventRebuildingFromBackup, string(step.Action), msg)
	return reconcile.Waiting(membership.ReasonRebuildingFromBackup, msg, stepRequeue)
}

// recoverySource is the restore source of a cluster rebuilt from a backup
// (status.recovery.backup), in spec.backup.storeRef.
func (h *ClusterHooks) recoverySource(ctx context.Context, c *v1alpha1.EtcdCluster) (*restoreSource, reconcile.Result) {
	r := c.Status.Recovery
	if c.Spec.Backup == nil {
		return nil, reconcile.Terminal(ReasonRestoreFailed, fmt.Errorf(
			"the cluster is being rebuilt from backup %s of spec.backup.storeRef, but spec.backup was removed; put it back", r.Backup))
	}
	ref := c.Spec.Backup.StoreRef
	store, err := clusterStore(ctx, h.Stores, c.Namespace, c.Name, ref)
	if err != nil {
		if storeUnusable(err) {
			return nil, reconcile.Terminal(ReasonRestoreFailed, fmt.Errorf("spec.backup.storeRef: %w", err))
		}
		return nil, reconcile.Retry(err)
	}
	return &restoreSource{name: r.Backup, what: "backup " + r.Backup, id: r.Backup, revision: r.Revision,
		prefix: c.Namespace + "/" + c.Name, ref: ref, store: store}, reconcile.Done()
}

// newestVerifiedBackup returns the newest backup of c in store whose data
// verifies against its manifest, with the revision it was taken at, and
// what it skipped on the way (newer backups that did not verify), each as
// "<id>: <why>". It returns a nil manifest when no backup qualifies, and
// an error only when the store could not be read.
//
// A backup is c's when its manifest records c's UID (ExtraClusterUID);
// one recording no cluster UID (from before they were recorded, or an
// EtcdBackup's) is c's when it was taken after c was created: the store's
// prefix is the cluster's namespace and name, which an earlier cluster of
// the same name shared.
func newestVerifiedBackup(ctx context.Context, store backup.Store, c *v1alpha1.EtcdCluster) (*backup.Manifest, int64, []string, error) {
	found, err := backup.Find(ctx, store, func(m backup.Manifest) bool {
		if uid, ok := m.Snapshot.Extra[ExtraClusterUID]; ok {
			return uid == string(c.UID)
		}
		return !m.StartTime.Before(c.CreationTimestamp.Time)
	})
	if err != nil {
		return nil, 0, nil, err
	}
	var skipped []string
	for i := range found {
		m := found[i]
		rev, err := strconv.ParseInt(m.Snapshot.ConsistencyPoint, 10, 64)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: revision %q: %v", m.ID, m.Snapshot.ConsistencyPoint, err))
			continue
		}
		if _, err := backup.Verify(ctx, store, m.ID); err != nil {
			var ve *backup.VerificationError
			if errors.As(err, &ve) || errors.Is(err, backup.ErrNotFound) {
				skipped = append(skipped, fmt.Sprintf("%s: %v", m.ID, err))
				continue
			}
			return nil, 0, skipped, err
		}
		return &m, rev, skipped, nil
	}
	return nil, 0, skipped, nil
}

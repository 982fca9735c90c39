package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
	"github.com/opkit-dev/opkit/operation"
	"github.com/opkit-dev/opkit/ownership"
	"github.com/opkit-dev/opkit/reconcile"
)

// Finalize takes a final backup before the cluster's data is deleted, when
// spec.backup is set and skipFinalBackup is not, then deletes the
// cluster's guard and metric series. Pods and claims are deleted by the
// garbage collector afterwards, once neither the cluster nor its guard
// exists: the guard keeps them through a deletion in the foreground or
// orphaning (see LabelGuardOf).
func (h *ClusterHooks) Finalize(ctx context.Context, c *v1alpha1.EtcdCluster) reconcile.Result {
	if op := c.Status.BackupOperation; op != nil && op.Type == OperationScheduledBackup {
		// A scheduled backup under way yields to the final one.
		h.Runner.Cancel(c)
		c.Status.BackupOperation = nil
	}
	res := h.finalBackup(ctx, c)
	if k := res.Outcome(); k != reconcile.OutcomeDone && k != reconcile.OutcomeRequeueAfter {
		return res
	}
	// The children go only now: see LabelGuardOf.
	if err := h.releaseGuard(ctx, c); err != nil {
		return reconcile.Retry(err)
	}
	h.forgetMetrics(c)
	h.retained.forget(c.UID)
	return res
}

func (h *ClusterHooks) finalBackup(ctx context.Context, c *v1alpha1.EtcdCluster) reconcile.Result {
	b := c.Spec.Backup
	if b == nil || b.SkipFinalBackup {
		return reconcile.Done()
	}
	// With ordered namespace deletion (Kubernetes 1.34+) the namespace
	// controller deletes c only once the pods are gone: the Reconciler
	// (WithNamespaceDeletion) runs Finalize when the namespace goes.
	going := reconcile.NamespaceGoing(ctx)
	if going {
		// Released by an earlier pass once the final backup was taken
		// (or given up): nothing is held, and the namespace controller
		// may have taken the store's Secret and its copy already.
		if g, err := h.getGuard(ctx, c); err == nil && g == nil {
			return reconcile.Done()
		}
	}
	fail := func(err error) reconcile.Result {
		if going {
			return h.finalBackupBlocked(ctx, c, err)
		}
		return reconcile.Retry(fmt.Errorf("final backup: %w", err))
	}
	store, err := h.finalStore(ctx, c)
	if err != nil {
		return fail(err)
	}
	// Idempotent: a final backup recording this cluster's UID is this
	// deletion's (an on-demand or scheduled one taken meanwhile is not: it
	// may predate the last writes).
	rec := c.Status.BackupOperation
	running := rec != nil && rec.Type == OperationFinalBackup && rec.Active()
	if m, done, err := finalBackupOf(ctx, store, c.UID); err != nil {
		return fail(err)
	} else if done {
		if running {
			h.finalBackupTaken(ctx, c, m, going)
		}
		return reconcile.Done()
	}
	// A ConfigMap of the guard's name that is not c's guard holds
	// nothing of c: c's children are then found as c's own.
	guard, err := h.getGuard(ctx, c)
	if err != nil && !ownership.IsConflict(err) {
		return reconcile.Retry(err)
	}
	// The certificates are read, not made or renewed: the Secrets stay
	// until the guard goes.
	tlsConfig, err := clientTLS(ctx, h.secrets(), c, h.now())
	if err != nil {
		return fail(err)
	}
	obs, err := h.observe(ctx, c, guard, tlsConfig)
	if err != nil {
		return fail(err)
	}
	sources := obs.sources()
	if len(sources) == 0 && going {
		// No pod can be created in the namespace: wait for a member to
		// answer again, or for the user to give up the backup.
		return h.finalBackupBlocked(ctx, c, errors.New("no healthy voting member answers, and no member can be recreated in a namespace being deleted"))
	}
	if len(sources) == 0 {
		// A deleted cluster runs no Reconcile: a member whose pod went
		// (a restart, an eviction) comes back on its data here, to take
		// the final backup from.
		if step := membership.Plan(obs.planned); step.Action == membership.ActionCreatePod && step.OnData {
			if err := h.execute(ctx, c, obs, step, nil); err != nil {
				return reconcile.Retry(fmt.Errorf("final backup: %s %s: %w", step.Action, step.Name, err))
			}
			emit(h.Recorder, c, normal, step.Reason, string(step.Action), step.Message+", to take the final backup from")
			return reconcile.Waiting(ReasonFinalBackup, "recreating member "+step.Name+" on its data to take the final backup from", stepRequeue)
		}
		return reconcile.Waiting(ReasonFinalBackup,
			"no healthy voting member to take the final backup from; set spec.backup.skipFinalBackup to delete without one", stepRequeue)
	}
	if !running {
		rec = &operation.Record{}
		now := h.now().UTC()
		if err := operation.Start(rec, OperationFinalBackup, now.Format("20060102T150405Z"), now); err != nil {
			return reconcile.Retry(err)
		}
		c.Status.BackupOperation = rec
	}
	next := h.Runner.Step(ctx, c, rec, h.finalOperation(c, store, sources, obs))
	switch rec.Phase {
	case operation.Failed:
		c.Status.BackupOperation = nil
		err := errors.New(rec.Message)
		if going {
			// The next pass starts a new operation.
			return h.finalBackupBlocked(ctx, c, err)
		}
		return reconcile.Retry(fmt.Errorf("final backup: %w", err))
	case operation.Succeeded:
		m, ok, err := finalBackupOf(ctx, store, c.UID)
		if err != nil || !ok {
			return reconcile.Retry(fmt.Errorf("reading the final backup taken (found %t): %w", ok, err))
		}
		h.finalBackupTaken(ctx, c, m, going)
		return reconcile.Done()
	}
	msg := fmt.Sprintf("taking the final backup, attempt %d", rec.Attempts)
	if rec.Progress != "" {
		msg += ": " + rec.Progress
	}
	return reconcile.Waiting(ReasonTakingFinalBackup, msg, max(next, time.Second))
}

// finalBackupTaken reports c's final backup m, once.
func (h *ClusterHooks) finalBackupTaken(ctx context.Context, c *v1alpha1.EtcdCluster, m backup.Manifest, going bool) {
	c.Status.BackupOperation = nil
	ctrl.LoggerFrom(ctx).Info("final backup taken", "id", m.ID, "size", m.Size, "sha256", m.SHA256, "revision", m.Snapshot.ConsistencyPoint)
	// A namespace being deleted refuses new events: the log line is all.
	if !going {
		emit(h.Recorder, c, normal, EventFinalBackupTaken, "Backup", fmt.Sprintf("final backup %s taken at revision %s (%d bytes); the members are deleted next", m.ID, m.Snapshot.ConsistencyPoint, m.Size))
	}
}

// blockedRequeue is how often a blocked final backup is tried again.
const blockedRequeue = 15 * time.Second

// finalBackupBlocked keeps c, whose namespace is being deleted, until its
// final backup can be taken: the guard holds the members and claims, so
// the namespace stays Terminating. Skipping the backup instead would lose
// the data for good on the first store or election hiccup. Reconciling
// says why; the Warning goes to the Namespace, where kubectl describe
// shows it, since the namespace refuses new events.
func (h *ClusterHooks) finalBackupBlocked(ctx context.Context, c *v1alpha1.EtcdCluster, why error) reconcile.Result {
	msg := fmt.Sprintf("namespace %s is being deleted and waits for the final backup of EtcdCluster %s, whose members and claims the guard keeps: %v; "+
		"set spec.backup.skipFinalBackup to delete without one", c.Namespace, c.Name, why)
	ctrl.LoggerFrom(ctx).Info(msg, "etcdcluster", klog.KObj(c))
	ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: c.Namespace}}
	emit(h.Recorder, ns, warning, EventFinalBackupBlocked, "Backup", msg)
	return reconcile.Waiting(ReasonFinalBackupBlocked, msg, blockedRequeue)
}

// finalBackupOf returns the final backup of the deletion of the cluster
// with uid, or of its namespace's, if store holds it: a final backup
// recording the UID (finalBackupExtra). A UID is deleted once, so no clock
// is compared: the operator's (a manifest's start time) and the API
// server's (deletionTimestamp) may disagree.
func finalBackupOf(ctx context.Context, store backup.Store, uid types.UID) (backup.Manifest, bool, error) {
	found, err := backup.Find(ctx, store, func(m backup.Manifest) bool {
		return m.Snapshot.Extra[ExtraTrigger] == TriggerFinal && m.Snapshot.Extra[ExtraClusterUID] == string(uid)
	})
	if err != nil || len(found) == 0 {
		return backup.Manifest{}, false, err
	}
	return found[0], true, nil
}

// OperationFinalBackup is the Type of status.backupOperation while the
// final backup is taken.
const OperationFinalBackup = "FinalBackup"

// finalOperation is c's final backup into store from sources; Done finds
// it by c's UID, so a restarted operator does not take it twice.
func (h *ClusterHooks) finalOperation(c *v1alpha1.EtcdCluster, store backup.Store, sources []source, obs *observation) operation.Operation {
	uid, ns, name, extra, tlsConfig := c.UID, c.Namespace, c.Name, finalBackupExtra(c), obs.tls
	return operation.Operation{
		Type: OperationFinalBackup,
		Run: func(ctx context.Context, _ string, progress func(string)) error {
			progress(fmt.Sprintf("snapshotting one of %d healthy voting members", len(sources)))
			err := snapshotInto(ctx, h.Etcd, store, sources, extra, etcdclient.WithTLS(tlsConfig))
			countBackup(ns, name, TriggerFinal, err)
			return err
		},
		Done: func(ctx context.Context, _ string) (bool, error) {
			_, ok, err := finalBackupOf(ctx, store, uid)
			return ok, err
		},
	}
}

// finalBackupExtra is the snapshot metadata of c's final backup.
func finalBackupExtra(c *v1alpha1.EtcdCluster) map[string]string {
	return map[string]string{ExtraTrigger: TriggerFinal, ExtraClusterUID: string(c.UID)}
}

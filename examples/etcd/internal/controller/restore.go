package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
	"github.com/opkit-dev/opkit/examples/etcd/internal/snapshot"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
)

// restoreSource is a backup a new seed member is loaded from: spec.restore's
// EtcdBackup, or the backup a rebuild chose (status.recovery.backup).
type restoreSource struct {
	// name is the EtcdBackup's name or the backup's ID, recorded on the
	// seed pod (AnnotationRestoreBackup); what names it in messages.
	name, what string
	// id is the backup's ID in store, and revision the etcd revision it
	// was taken at.
	id       string
	revision int64
	// prefix is where the backup lives in the store ref names
	// (<namespace>/<cluster>), and store that store under it.
	prefix string
	ref    v1alpha1.StoreReference
	store  backup.Store
}

// restorePending reports whether c is to be loaded from a backup before
// it serves or grows: spec.restore's, or the one a rebuild chose.
func restorePending(c *v1alpha1.EtcdCluster) bool {
	return !c.Status.Restored && (c.Spec.Restore != nil || rebuildingFromBackup(c))
}

// rebuildingFromBackup reports whether c is being rebuilt from a backup
// after losing every member (status.recovery.backup).
func rebuildingFromBackup(c *v1alpha1.EtcdCluster) bool {
	return c.Status.Recovery != nil && c.Status.Recovery.Backup != ""
}

// restoreSource returns the backup c is to be loaded from: the one a
// rebuild chose, else spec.restore's EtcdBackup once it has Succeeded.
// Otherwise the source is nil and the result says why: a missing or failed
// backup, or a store that is missing or misconfigured, stalls the cluster;
// an EtcdBackup still running is waited for.
func (h *ClusterHooks) restoreSource(ctx context.Context, c *v1alpha1.EtcdCluster) (*restoreSource, reconcile.Result) {
	if rebuildingFromBackup(c) {
		return h.recoverySource(ctx, c)
	}
	var b v1alpha1.EtcdBackup
	if err := h.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Spec.Restore.BackupName}, &b); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, reconcile.Terminal(ReasonRestoreFailed, fmt.Errorf("spec.restore.backupName: EtcdBackup %q not found", c.Spec.Restore.BackupName))
		}
		return nil, reconcile.Retry(err)
	}
	if b.Status.Phase == v1alpha1.BackupFailed {
		msg := "no reason recorded"
		if cc := statusutil.Get(&b, ConditionComplete); cc != nil {
			msg = cc.Message
		}
		return nil, reconcile.Terminal(ReasonRestoreFailed, fmt.Errorf("spec.restore.backupName: EtcdBackup %s failed: %s", b.Name, msg))
	}
	if b.Status.Phase != v1alpha1.BackupSucceeded {
		return nil, reconcile.Waiting("WaitingForBackup", fmt.Sprintf("EtcdBackup %s is %q, not Succeeded", b.Name, b.Status.Phase), stepRequeue)
	}
	if err := membership.CheckRestore(b.Status.EtcdVersion, c.Spec.Version); err != nil {
		return nil, reconcile.Terminal(ReasonRestoreFailed, fmt.Errorf("spec.restore.backupName: EtcdBackup %s: %w", b.Name, err))
	}
	store, err := clusterStore(ctx, h.Stores, b.Namespace, b.Spec.ClusterName, b.Spec.StoreRef)
	if err != nil {
		if storeUnusable(err) {
			return nil, reconcile.Terminal(ReasonRestoreFailed, err)
		}
		return nil, reconcile.Retry(err)
	}
	return &restoreSource{name: b.Name, what: "EtcdBackup " + b.Name, id: b.Status.BackupID, revision: b.Status.Revision,
		prefix: b.Namespace + "/" + b.Spec.ClusterName, ref: b.Spec.StoreRef, store: store}, reconcile.Done()
}

// checkPhysicalRestore sets status.restored once the seed restored by its
// init containers answers at the backup's revision or later. A seed below
// it was not restored (its init containers did not run, or restored
// something else), which stalls the cluster: growing it would replicate
// the wrong data.
func (h *ClusterHooks) checkPhysicalRestore(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) reconcile.Result {
	var name, ep string
	for n, e := range obs.healthy {
		name, ep = n, e
	}
	pod := obs.pods[name]
	if !restoredPhysically(pod) {
		return reconcile.Retry(fmt.Errorf("the healthy member %s is not the seed restored physically", name))
	}
	want, err := strconv.ParseInt(pod.Annotations[AnnotationRestoreRevision], 10, 64)
	if err != nil {
		return reconcile.Terminal(ReasonRestoreFailed, fmt.Errorf("pod %s: annotation %s: %w", name, AnnotationRestoreRevision, err))
	}
	ec, err := h.clientOn(ctx, obs, "")
	if err != nil {
		return reconcile.Retry(err)
	}
	defer func() { _ = ec.Close() }()
	sctx, cancel := context.WithTimeout(ctx, callTimeout)
	st, err := ec.Status(sctx, ep)
	cancel()
	if err != nil {
		return reconcile.Retry(fmt.Errorf("reading the revision of the restored member %s: %w", name, err))
	}
	backupName := pod.Annotations[AnnotationRestoreBackup]
	if st.Revision < want {
		return reconcile.Terminal(ReasonRestoreFailed, fmt.Errorf(
			"physical restore: member %s runs at revision %d, %s was taken at revision %d: the init containers of pod %s did not restore it; see their logs",
			name, st.Revision, restoredWhat(c, backupName), want, name))
	}
	c.Status.Restored = true
	ctrl.LoggerFrom(ctx).Info("restored backup", "restore", "physical", "backup", backupName, "member", name, "revision", st.Revision)
	emit(h.Recorder, c, normal, EventRestored, "Restore", fmt.Sprintf("%s restored physically into %s (revision %d); the cluster grows next",
		restoredWhat(c, backupName), name, st.Revision))
	return reconcile.Done()
}

// restoreInitFailed returns a stalling result when an init container of
// a pod that does not answer yet has failed, the seed restored physically
// or a survivor restarted by a rebuild, naming it and its termination
// message (the end of its log), nil otherwise. The kubelet retries it
// alone; the cluster carries on once the member answers.
func restoreInitFailed(c *v1alpha1.EtcdCluster, obs *observation) *reconcile.Result {
	var rebuild string
	if r := c.Status.Recovery; r != nil && r.Backup == "" && r.RevisionBump != 0 {
		rebuild = rebuildToken(r)
	}
	for _, name := range slices.Sorted(maps.Keys(obs.pods)) {
		pod := obs.pods[name]
		what := "physical restore"
		switch {
		case obs.healthy[name] != "":
			continue
		case rebuild != "" && pod.Annotations[AnnotationRebuild] == rebuild:
			what = "rebuild"
		case !restoredPhysically(pod):
			continue
		}
		for _, st := range pod.Status.InitContainerStatuses {
			if t := st.State.Terminated; t != nil && t.ExitCode == 0 {
				continue // its retry succeeded
			}
			for _, t := range []*corev1.ContainerStateTerminated{st.State.Terminated, st.LastTerminationState.Terminated} {
				if t != nil && t.ExitCode != 0 {
					res := reconcile.Terminal(ReasonRestoreFailed, fmt.Errorf(
						"%s: init container %s of pod %s exited with %d: %s; the kubelet retries it alone: delete pod %s to run every step again",
						what, st.Name, name, t.ExitCode, strings.TrimSpace(t.Message), name))
					return &res
				}
			}
		}
	}
	return nil
}

// restore loads spec.restore's backup into the single seed member.
func (h *ClusterHooks) restore(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) reconcile.Result {
	src, res := h.restoreSource(ctx, c)
	if src == nil {
		return res
	}
	ec, err := h.clientOn(ctx, obs, "")
	if err != nil {
		return reconcile.Retry(err)
	}
	defer func() { _ = ec.Close() }()
	emit(h.Recorder, c, warning, EventLogicalRestore, "Restore", fmt.Sprintf(
		"loading %s logically, as the operator runs without --restore-image: until the restore is recorded, a client addressing the seed pod by name reads part of it; revisions and leased keys are not restored",
		restoredWhat(c, src.name)))
	r := &snapshot.Restorer{Client: ec, Dir: h.ScratchDir}
	if _, err := backup.Restore(ctx, src.store, src.id, r); err != nil {
		var ve *backup.VerificationError
		if errors.As(err, &ve) || errors.Is(err, backup.ErrNotFound) || errors.Is(err, snapshot.ErrWrongFormat) {
			return reconcile.Terminal(ReasonRestoreFailed, err)
		}
		return reconcile.Retry(fmt.Errorf("restoring %s: %w", src.id, err))
	}
	c.Status.Restored = true
	ctrl.LoggerFrom(ctx).Info("restored backup", "restore", "logical", "backup", src.name, "keys", r.Loaded.Keys, "skippedLeased", r.Loaded.SkippedLeased)
	emit(h.Recorder, c, normal, EventRestored, "Restore", fmt.Sprintf("%s restored logically: %d keys written, %d leased keys skipped; the cluster grows next",
		restoredWhat(c, src.name), r.Loaded.Keys, r.Loaded.SkippedLeased))
	return reconcile.Done()
}

// plannedSize is the size the planner works towards: one member while a
// cluster created from a backup is not restored yet (it grows afterwards),
// spec.size otherwise.
func plannedSize(c *v1alpha1.EtcdCluster) int {
	if restorePending(c) {
		return 1
	}
	return int(c.Spec.Size)
}

// restoreStep is the restore part of a pass of a cluster created from a
// backup that is not restored yet; it returns nothing for any other. The
// cluster is restored while it has one member (plannedSize), before it
// grows: physically, by its seed pod's init containers before etcd starts,
// or logically, by loading the backup into the running seed. It returns
// the result ending the pass, if any, and the physical restore the seed
// pod is to be created with, if any.
func (h *ClusterHooks) restoreStep(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) (*seedRestore, *reconcile.Result) {
	if !restorePending(c) {
		return nil, nil
	}
	physical := slices.ContainsFunc(slices.Collect(maps.Values(obs.pods)), restoredPhysically)
	switch {
	case len(obs.healthy) == 1 && len(obs.planned.Members) == 1:
		restore := h.restore
		if physical {
			restore = h.checkPhysicalRestore
		}
		if res := restore(ctx, c, obs); res.Outcome() != reconcile.OutcomeDone {
			return nil, &res
		}
		// The pass ends here: status.restored is written at its end, and
		// the cluster grows only in a pass that reads it back, so that a
		// lost status write redoes the restore (checked, or loaded again
		// into the lone seed no client reaches) rather than leaving a
		// grown cluster that looks unrestored.
		res := reconcile.Waiting(ReasonRestored, restoredWhat(c, "")+" restored into the seed; the cluster grows once that is recorded", stepRequeue)
		return nil, &res
	case physical:
		return nil, restoreInitFailed(c, obs)
	case len(obs.pods) == 0 && !obs.planned.Bootstrapped && h.RestoreImage != "":
		// The backup must be known before the seed pod is created.
		src, res := h.restoreSource(ctx, c)
		if src == nil {
			return nil, &res
		}
		return &seedRestore{image: h.RestoreImage, source: src}, nil
	}
	return nil, nil
}

// restoredWhat names the backup c is loaded from in messages: the backup
// a rebuild chose, or spec.restore's EtcdBackup (name, when known, is
// what the seed pod records).
func restoredWhat(c *v1alpha1.EtcdCluster, name string) string {
	if rebuildingFromBackup(c) {
		return "backup " + c.Status.Recovery.Backup
	}
	if name == "" {
		name = c.Spec.Restore.BackupName
	}
	return "EtcdBackup " + name
}

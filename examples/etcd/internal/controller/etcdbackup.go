package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/snapshot"
	"github.com/opkit-dev/opkit/operation"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
)

// Reasons of EtcdBackup results, on the Complete condition and, for
// failures, Stalled.
const (
	ReasonClusterNotFound = "ClusterNotFound"
	ReasonStoreNotFound   = "StoreNotFound"
	ReasonBackupSucceeded = "BackupSucceeded"
	// ReasonStoreMisconfigured: the store reference or its Secret is
	// invalid (a Failed backup).
	ReasonStoreMisconfigured = "StoreMisconfigured"
	// ReasonSnapshotRefused: the member refused the snapshot, for example
	// for lack of permission (a Failed backup).
	ReasonSnapshotRefused = "SnapshotRefused"
	// ReasonSnapshotFailed: every attempt failed or was interrupted (a
	// Failed backup).
	ReasonSnapshotFailed = "SnapshotFailed"
	// ReasonBackingUp: an attempt is under way (Reconciling).
	ReasonBackingUp = "BackingUp"
	// ReasonRestoreInProgress (Reconciling): the cluster is being loaded
	// from a backup and holds part of its keyspace; the backup starts once
	// the restore is recorded.
	ReasonRestoreInProgress = "RestoreInProgress"
)

// OperationBackup is the Type of an EtcdBackup's operation.Record.
const OperationBackup = "Backup"

// backupAttempts bounds the attempts of one EtcdBackup, interrupted ones
// included: an attempt that fails takes no backup, so another is safe.
const backupAttempts = 5

// ConditionComplete is True on an EtcdBackup whose snapshot is stored and
// committed.
const ConditionComplete = "Complete"

// ExtraBackupUID is the key, in the manifest's Snapshot.Extra, of the UID of
// the EtcdBackup that took the backup. It makes an EtcdBackup idempotent: a
// pass that finds a complete backup with its UID records that backup instead
// of taking another one.
const ExtraBackupUID = "etcd.opkit.dev/etcdbackup-uid"

// ExtraClusterUID is the key, in the manifest's Snapshot.Extra, of the UID
// of the EtcdCluster backed up: a deletion recognises its final backup by
// it, and a rebuild after every member was lost the backups of this
// cluster rather than of an earlier one of the same name, whatever the
// clocks say.
const ExtraClusterUID = "etcd.opkit.dev/etcdcluster-uid"

// ExtraTrigger is the key, in the manifest's Snapshot.Extra, of what took
// the backup: TriggerOnDemand, TriggerSchedule or TriggerFinal. The
// retention of spec.backup applies only to TriggerSchedule.
const ExtraTrigger = "etcd.opkit.dev/trigger"

// DefaultNotFoundGrace is BackupHooks.NotFoundGrace when it is zero.
const DefaultNotFoundGrace = time.Minute

// BackupConfig is what BackupHooks work with; Client, Etcd and Stores are
// required.
type BackupConfig struct {
	// Client reads EtcdClusters (the manager's client).
	Client client.Client
	// Etcd builds clients on member endpoints.
	Etcd etcdclient.Factory
	// Endpoints maps members to the URLs the operator dials.
	Endpoints Endpoints
	// Stores opens backup stores.
	Stores StoreResolver
	// Secrets reads the certificates of TLS clusters (the manager's API
	// reader: the cache holds no Secrets); Client if nil.
	Secrets client.Reader
	// Now returns the time; time.Now if nil.
	Now func() time.Time
	// NotFoundGrace is how long after an EtcdBackup's creation a missing
	// EtcdCluster or store (Secret, volume) is waited for before the backup
	// fails, so that objects applied together may arrive in any order;
	// DefaultNotFoundGrace if zero.
	NotFoundGrace time.Duration
	// Recorder emits an event when a backup is taken or fails for good;
	// none if nil.
	Recorder events.EventRecorder
	// Runner runs the backups beside the passes; add it to the manager.
	Runner *operation.Runner
}

// BackupHooks reconciles EtcdBackups: each takes one snapshot, once, as an
// operation recorded in its status (operation.Runner). A backup ends
// Succeeded, or Failed when retrying cannot help: the cluster or the
// store's Secret or volume is still missing NotFoundGrace after the
// EtcdBackup was created, the store is misconfigured, etcd refuses the
// snapshot, or backupAttempts attempts failed or were interrupted. Build
// them with NewBackupHooks.
type BackupHooks struct {
	BackupConfig
}

// NewBackupHooks returns the hooks of the EtcdBackup Reconciler, once cfg
// has what they need, and registers the operator's metrics.
func NewBackupHooks(cfg BackupConfig) (*BackupHooks, error) {
	if err := required("NewBackupHooks", "BackupConfig", map[string]bool{
		"Client": cfg.Client != nil, "Etcd": cfg.Etcd != nil, "Stores": cfg.Stores != nil, "Runner": cfg.Runner != nil,
	}); err != nil {
		return nil, err
	}
	if cfg.NotFoundGrace < 0 {
		return nil, fmt.Errorf("controller.NewBackupHooks: negative NotFoundGrace %s; zero means the default", cfg.NotFoundGrace)
	}
	return &BackupHooks{BackupConfig: cfg}, nil
}

var _ reconcile.Hooks[*v1alpha1.EtcdBackup] = (*BackupHooks)(nil)

func (h *BackupHooks) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// Reconcile takes the backup unless it already succeeded or failed: once
// the store, the cluster and a healthy member are there, it starts the
// backup operation, which h.Runner runs beside the passes.
func (h *BackupHooks) Reconcile(ctx context.Context, b *v1alpha1.EtcdBackup) reconcile.Result {
	switch b.Status.Phase {
	case v1alpha1.BackupSucceeded:
		statusutil.MarkTrue(b, ConditionComplete, ReasonBackupSucceeded, b.Status.Location)
		return reconcile.Done()
	case v1alpha1.BackupFailed:
		reason, msg := "BackupFailed", "the backup failed"
		if cc := statusutil.Get(b, ConditionComplete); cc != nil {
			reason, msg = cc.Reason, cc.Message
		}
		return reconcile.Terminal(reason, errors.New(msg))
	}
	if b.Status.Phase == "" {
		b.Status.Phase = v1alpha1.BackupPending
	}
	statusutil.MarkFalse(b, ConditionComplete, "InProgress", "")
	if err := RegisterMetrics(); err != nil {
		return reconcile.Retry(err)
	}
	store, err := clusterStore(ctx, h.Stores, b.Namespace, b.Spec.ClusterName, b.Spec.StoreRef)
	switch {
	case errors.Is(err, ErrStoreMisconfigured):
		return h.fail(b, ReasonStoreMisconfigured, err)
	case errors.Is(err, ErrStoreNotFound):
		return h.notFound(b, ReasonStoreNotFound, err)
	case err != nil:
		return reconcile.Retry(err)
	}
	if b.Status.Operation == nil || !b.Status.Operation.Active() {
		// An operator before operation.Record took it in one pass, whose
		// status write may have failed.
		if m, ok, err := findBackup(ctx, store, b.UID); err != nil {
			return reconcile.Retry(fmt.Errorf("looking for a backup taken earlier: %w", err))
		} else if ok {
			ctrl.LoggerFrom(ctx).Info("recording the backup taken earlier", "etcdbackup", klog.KObj(b), "id", m.ID)
			h.succeed(b, m)
			return reconcile.Done()
		}
		if res, ok := h.ready(ctx, b); !ok {
			return res
		}
		b.Status.Operation = &operation.Record{}
		if err := operation.Start(b.Status.Operation, OperationBackup, string(b.UID), h.now()); err != nil {
			return reconcile.Retry(err)
		}
		b.Status.StartTime = b.Status.Operation.StartTime
	}
	rec := b.Status.Operation
	next := h.Runner.Step(ctx, b, rec, h.operation(b, store))
	switch rec.Phase {
	case operation.Succeeded:
		m, ok, err := findBackup(ctx, store, b.UID)
		if err != nil {
			return reconcile.Retry(fmt.Errorf("reading the backup taken: %w", err))
		}
		if !ok {
			// Run returns nil only after the manifest's commit.
			return reconcile.Retry(errors.New("the backup completed but its manifest is not in the store"))
		}
		h.succeed(b, m)
		return reconcile.Done()
	case operation.Failed:
		switch rec.Reason {
		case ReasonSnapshotRefused:
			return h.fail(b, rec.Reason, errors.New(rec.Message))
		case operation.ReasonFailed:
			return h.fail(b, ReasonSnapshotFailed, fmt.Errorf("%d attempts failed, the last: %s", rec.Attempts, rec.Message))
		}
		return h.fail(b, ReasonSnapshotFailed, errors.New(rec.Message))
	}
	b.Status.Phase = v1alpha1.BackupRunning
	msg := fmt.Sprintf("attempt %d of %d", rec.Attempts, backupAttempts)
	if rec.Progress != "" {
		msg += ": " + rec.Progress
	}
	if rec.Message != "" {
		msg += "; the last failed: " + rec.Message
	}
	return reconcile.Waiting(ReasonBackingUp, msg, max(next, time.Second))
}

// ready reports whether the backup may start: its cluster exists, is not
// being restored, and has a healthy voting member. Otherwise it returns the pass's Result.
func (h *BackupHooks) ready(ctx context.Context, b *v1alpha1.EtcdBackup) (reconcile.Result, bool) {
	c, err := h.cluster(ctx, b)
	if client.IgnoreNotFound(err) == nil && err != nil {
		return h.notFound(b, ReasonClusterNotFound, fmt.Errorf("EtcdCluster %q not found", b.Spec.ClusterName)), false
	}
	if err != nil {
		return reconcile.Retry(err), false
	}
	if restorePending(c) {
		return reconcile.Waiting(ReasonRestoreInProgress, fmt.Sprintf("EtcdCluster %s is being restored from a backup and holds part of its keyspace", c.Name), 10*time.Second), false
	}
	if len(backupSources(h.Endpoints, c)) == 0 {
		return reconcile.Waiting("NoHealthyMember", fmt.Sprintf("EtcdCluster %s has no healthy member", c.Name), 10*time.Second), false
	}
	return reconcile.Result{}, true
}

func (h *BackupHooks) cluster(ctx context.Context, b *v1alpha1.EtcdBackup) (*v1alpha1.EtcdCluster, error) {
	var c v1alpha1.EtcdCluster
	if err := h.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.ClusterName}, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// backupSources are c's healthy voting members, the leader first.
func backupSources(e Endpoints, c *v1alpha1.EtcdCluster) []source {
	var sources []source
	for _, m := range c.Status.Members {
		if m.Healthy && !m.Learner {
			sources = append(sources, source{name: m.Name, endpoint: e.clientURL(c, m.Name), leader: m.Leader})
		}
	}
	return sortSources(sources)
}

// operation is b's backup into store: an attempt reads the cluster's
// members afresh, and the manifest carries b's UID, by which Done and
// later passes find it.
func (h *BackupHooks) operation(b *v1alpha1.EtcdBackup, store backup.Store) operation.Operation {
	b = b.DeepCopy()
	return operation.Operation{
		Type:        OperationBackup,
		MaxAttempts: backupAttempts,
		Run: func(ctx context.Context, _ string, progress func(string)) error {
			c, err := h.cluster(ctx, b)
			if err != nil {
				return fmt.Errorf("reading EtcdCluster %s: %w", b.Spec.ClusterName, err)
			}
			if restorePending(c) {
				return fmt.Errorf("EtcdCluster %s is being restored from a backup and holds part of its keyspace", c.Name)
			}
			secrets := h.Secrets
			if secrets == nil {
				secrets = h.Client
			}
			tlsConfig, err := clientTLS(ctx, secrets, c, h.now())
			if err != nil {
				return fmt.Errorf("the certificates of EtcdCluster %s: %w", c.Name, err)
			}
			sources := backupSources(h.Endpoints, c)
			progress(fmt.Sprintf("snapshotting one of %d healthy members", len(sources)))
			err = snapshotInto(ctx, h.Etcd, store, sources,
				map[string]string{ExtraBackupUID: string(b.UID), ExtraTrigger: TriggerOnDemand, ExtraClusterUID: string(c.UID)},
				etcdclient.WithTLS(tlsConfig))
			countBackup(b.Namespace, b.Spec.ClusterName, TriggerOnDemand, err)
			if errors.Is(err, etcdclient.ErrRefused) {
				return operation.Permanent(ReasonSnapshotRefused, fmt.Errorf("taking backup: %w", err))
			}
			if err != nil {
				return fmt.Errorf("taking backup: %w", err)
			}
			return nil
		},
		Done: func(ctx context.Context, _ string) (bool, error) {
			_, ok, err := findBackup(ctx, store, b.UID)
			return ok, err
		},
	}
}

// notFound waits for something the backup needs until NotFoundGrace after
// the EtcdBackup's creation, then fails the backup.
func (h *BackupHooks) notFound(b *v1alpha1.EtcdBackup, reason string, err error) reconcile.Result {
	grace := h.NotFoundGrace
	if grace == 0 {
		grace = DefaultNotFoundGrace
	}
	waited := h.now().Sub(b.CreationTimestamp.Time)
	if waited < grace {
		return reconcile.Waiting(reason, fmt.Sprintf("%v; waiting up to %s after the backup's creation", err, grace), 10*time.Second)
	}
	return h.fail(b, reason, fmt.Errorf("%w, %s after the backup's creation", err, grace))
}

// fail ends the backup in phase Failed; it is not retried.
func (h *BackupHooks) fail(b *v1alpha1.EtcdBackup, reason string, err error) reconcile.Result {
	b.Status.Phase = v1alpha1.BackupFailed
	statusutil.MarkFalse(b, ConditionComplete, reason, err.Error())
	emit(h.Recorder, b, warning, EventBackupFailed, "Backup", reason+": "+err.Error())
	return reconcile.Terminal(reason, err)
}

// succeed records backup m in b's status.
func (h *BackupHooks) succeed(b *v1alpha1.EtcdBackup, m backup.Manifest) {
	done := metav1.NewTime(m.EndTime)
	start := metav1.NewTime(m.StartTime)
	b.Status.Phase = v1alpha1.BackupSucceeded
	b.Status.BackupID = m.ID
	b.Status.Location = describeRef(b.Spec.StoreRef) + "/" + b.Namespace + "/" + b.Spec.ClusterName + "/" + m.DataKey
	b.Status.SizeBytes = m.Size
	b.Status.SHA256 = m.SHA256
	b.Status.Revision = snapshot.Revision(m.Snapshot)
	b.Status.EtcdVersion = m.Snapshot.EngineVersion
	b.Status.StartTime = &start
	b.Status.CompletionTime = &done
	statusutil.MarkTrue(b, ConditionComplete, ReasonBackupSucceeded, b.Status.Location)
	emit(h.Recorder, b, normal, EventBackupTaken, "Backup", fmt.Sprintf("backup %s of EtcdCluster %s taken at revision %d (%d bytes): %s",
		m.ID, b.Spec.ClusterName, b.Status.Revision, m.Size, b.Status.Location))
}

// findBackup returns the complete backup in store taken for the EtcdBackup
// with uid, if there is one.
func findBackup(ctx context.Context, store backup.Store, uid types.UID) (backup.Manifest, bool, error) {
	if uid == "" {
		return backup.Manifest{}, false, nil
	}
	found, err := backup.Find(ctx, store, func(m backup.Manifest) bool { return m.Snapshot.Extra[ExtraBackupUID] == string(uid) })
	if err != nil || len(found) == 0 {
		return backup.Manifest{}, false, err
	}
	return found[0], true, nil
}

func describeRef(r v1alpha1.StoreReference) string {
	if r.S3SecretName != "" {
		return "s3:" + r.S3SecretName
	}
	return "pvc:" + r.PVCName
}

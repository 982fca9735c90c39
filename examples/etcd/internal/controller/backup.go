package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/snapshot"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
)

// Reasons of EtcdBackup results.
const (
	ReasonClusterNotFound = "ClusterNotFound"
	ReasonStoreNotFound   = "StoreNotFound"
	ReasonBackupSucceeded = "BackupSucceeded"
)

// ConditionComplete is True on an EtcdBackup whose snapshot is stored and
// committed.
const ConditionComplete = "Complete"

// BackupHooks reconciles EtcdBackups: each takes one snapshot, once.
type BackupHooks struct {
	// Client reads EtcdClusters (the manager's client).
	Client client.Client
	// Etcd builds clients on member endpoints.
	Etcd etcdclient.Factory
	// Endpoints maps members to the URLs the operator dials.
	Endpoints Endpoints
	// Stores opens backup stores.
	Stores StoreResolver
	// Now returns the time; time.Now if nil.
	Now func() time.Time
}

var _ reconcile.Hooks[*v1alpha1.EtcdBackup] = (*BackupHooks)(nil)

// Reconcile takes the backup unless it already succeeded or failed.
func (h *BackupHooks) Reconcile(ctx context.Context, b *v1alpha1.EtcdBackup) reconcile.Result {
	switch b.Status.Phase {
	case v1alpha1.BackupSucceeded:
		statusutil.MarkTrue(b, ConditionComplete, ReasonBackupSucceeded, b.Status.Location)
		return reconcile.Done()
	case v1alpha1.BackupFailed:
		return reconcile.Terminal("BackupFailed", errors.New(statusutil.Get(b, ConditionComplete).Message))
	}
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	if b.Status.Phase == "" {
		b.Status.Phase = v1alpha1.BackupPending
	}
	statusutil.MarkFalse(b, ConditionComplete, "InProgress", "")
	if err := RegisterMetrics(); err != nil {
		return reconcile.Retry(err)
	}
	var c v1alpha1.EtcdCluster
	if err := h.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.ClusterName}, &c); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return reconcile.Waiting(ReasonClusterNotFound, fmt.Sprintf("EtcdCluster %q not found", b.Spec.ClusterName), 10*time.Second)
		}
		return reconcile.Retry(err)
	}
	healthy := map[string]string{}
	for _, m := range c.Status.Members {
		if m.Healthy && !m.Learner {
			healthy[m.Name] = h.Endpoints.clientURL(&c, m.Name)
		}
	}
	if len(healthy) == 0 {
		return reconcile.Waiting("NoHealthyMember", fmt.Sprintf("EtcdCluster %s has no healthy member", c.Name), 10*time.Second)
	}
	store, err := clusterStore(ctx, h.Stores, b.Namespace, b.Spec.ClusterName, b.Spec.StoreRef)
	if err != nil {
		if errors.Is(err, ErrStoreNotFound) {
			return reconcile.Waiting(ReasonStoreNotFound, err.Error(), 30*time.Second)
		}
		return reconcile.Retry(err)
	}
	start := metav1.NewTime(now())
	b.Status.StartTime = &start
	b.Status.Phase = v1alpha1.BackupRunning
	m, err := snapshotInto(ctx, h.Etcd, store, healthy)
	countBackup(b.Namespace, b.Spec.ClusterName, TriggerOnDemand, err)
	if err != nil {
		return reconcile.Retry(fmt.Errorf("taking backup: %w", err))
	}
	done := metav1.NewTime(m.EndTime)
	b.Status.Phase = v1alpha1.BackupSucceeded
	b.Status.BackupID = m.ID
	b.Status.Location = describeRef(b.Spec.StoreRef) + "/" + b.Namespace + "/" + b.Spec.ClusterName + "/" + m.DataKey
	b.Status.SizeBytes = m.Size
	b.Status.SHA256 = m.SHA256
	b.Status.Revision = snapshot.Revision(m.Snapshot)
	b.Status.EtcdVersion = m.Snapshot.EngineVersion
	b.Status.CompletionTime = &done
	statusutil.MarkTrue(b, ConditionComplete, ReasonBackupSucceeded, b.Status.Location)
	return reconcile.Done()
}

func describeRef(r v1alpha1.StoreReference) string {
	if r.S3SecretName != "" {
		return "s3:" + r.S3SecretName
	}
	return "pvc:" + r.PVCName
}

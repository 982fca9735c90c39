package controller

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/operation"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
	"github.com/opkit-dev/opkit/webhook"
)

// FieldOwner is the field manager of every write the operator makes for
// an EtcdCluster: its status and its children.
const FieldOwner = "opkit-etcdcluster"

// BackupFieldOwner is the field manager of an EtcdBackup's status writes.
const BackupFieldOwner = "opkit-etcdbackup"

// EventSource is the reporting controller of the operator's events.
const EventSource = "etcd-operator"

// Options configure the operator's controllers (SetupWithManager).
type Options struct {
	// Etcd builds clients on member endpoints (required).
	Etcd etcdclient.Factory
	// Endpoints maps members to the URLs the operator dials.
	Endpoints Endpoints
	// BackupRoot is where backup claims are mounted: <root>/<namespace>/
	// <pvcName> serves storeRef.pvcName of that namespace (required).
	BackupRoot string
	// RestoreImage, BootstrapTimeout and MemberStartTimeout are those of
	// ClusterHooks.
	RestoreImage                         string
	BootstrapTimeout, MemberStartTimeout time.Duration
	// MaxConcurrentReconciles is how many EtcdClusters are reconciled at
	// once (default 4).
	MaxConcurrentReconciles int
	// Webhooks serves the EtcdCluster checks at admission too, on the
	// manager's webhook server.
	Webhooks bool
}

// CacheOptions restricts the manager's cache to what the operator reads:
// pods, claims, Services and PodDisruptionBudgets labelled with
// LabelCluster, and ConfigMaps labelled with LabelGuardOf (guards), without
// managedFields. Other objects of those kinds, however many the cluster
// holds, are neither listed nor watched. Of Secrets only the metadata is
// cached (SetupWithManager watches them for the certificates of spec.tls);
// their data is read through the API reader when a pass needs it.
// EtcdClusters and EtcdBackups keep only their Reconciler's own
// managedFields entries (reconcile.KeepManagedFieldsOf with FieldOwner and
// BackupFieldOwner, from which each reads the conditions it owns).
func CacheOptions() (cache.Options, error) {
	selected := func(label string) (cache.ByObject, error) {
		req, err := labels.NewRequirement(label, selection.Exists, nil)
		if err != nil {
			return cache.ByObject{}, fmt.Errorf("cache selector on %s: %w", label, err)
		}
		return cache.ByObject{Label: labels.NewSelector().Add(*req), Transform: cache.TransformStripManagedFields()}, nil
	}
	children, err := selected(LabelCluster)
	if err != nil {
		return cache.Options{}, err
	}
	guards, err := selected(LabelGuardOf)
	if err != nil {
		return cache.Options{}, err
	}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}:                   children,
		&corev1.PersistentVolumeClaim{}: children,
		&corev1.Service{}:               children,
		&policyv1.PodDisruptionBudget{}: children,
		&corev1.ConfigMap{}:             guards,
		&v1alpha1.EtcdCluster{}:         {Transform: reconcile.KeepManagedFieldsOf(FieldOwner)},
		&v1alpha1.EtcdBackup{}:          {Transform: reconcile.KeepManagedFieldsOf(BackupFieldOwner)},
	}}, nil
}

// SetupWithManager registers the operator's controllers with mgr, whose
// scheme must know v1alpha1 and whose cache should be built with
// CacheOptions: EtcdClusters (ClusterHooks), EtcdBackups (BackupHooks) and
// the collector of guards left by clusters deleted without their finalizer
// (NewGuardCollector). It registers the operator's metrics.
func SetupWithManager(mgr ctrl.Manager, o Options) error {
	if o.Etcd == nil {
		return errors.New("controller.SetupWithManager: Options.Etcd is required")
	}
	if o.BackupRoot == "" {
		return errors.New("controller.SetupWithManager: Options.BackupRoot is required")
	}
	// The cache holds labelled children only: an unlabelled object of a
	// child's name is found through the API server and refused, not
	// applied over.
	children, err := reconcile.NewChildren(mgr.GetClient(), mgr.GetScheme(), reconcile.WithUncachedReader(mgr.GetAPIReader()))
	if err != nil {
		return err
	}
	stores := DefaultStores(mgr.GetAPIReader(), o.BackupRoot)
	concurrency := o.MaxConcurrentReconciles
	if concurrency == 0 {
		concurrency = 4
	}
	rec := reconcile.DropEventsInGoingNamespaces(mgr.GetEventRecorder(EventSource), mgr.GetClient())
	// One Runner for both controllers: it keys runs by owner and type.
	runner := operation.NewRunner(nil)
	if err := mgr.Add(runner); err != nil {
		return fmt.Errorf("adding the backup runner: %w", err)
	}
	clusters, err := NewClusterHooks(ClusterConfig{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Children: children, Etcd: o.Etcd, Endpoints: o.Endpoints, Stores: stores, Secrets: mgr.GetAPIReader(),
		BootstrapTimeout: o.BootstrapTimeout, MemberStartTimeout: o.MemberStartTimeout, RestoreImage: o.RestoreImage,
		Recorder: rec, Runner: runner,
	})
	if err != nil {
		return err
	}
	_, err = reconcile.SetupWithManager[*v1alpha1.EtcdCluster](mgr, clusters,
		reconcile.WithFieldOwner(FieldOwner),
		reconcile.WithOwns(&corev1.Pod{}, &corev1.PersistentVolumeClaim{}, &corev1.Service{}, &policyv1.PodDisruptionBudget{}),
		reconcile.WithSummary(statusutil.WithConditions(v1alpha1.ConditionAvailable),
			statusutil.WithNegativePolarityConditions(v1alpha1.ConditionDegraded)),
		reconcile.WithMaxConcurrentReconciles(concurrency),
		reconcile.WithNamespaceDeletion(),
		reconcile.WithEventRecorder(rec))
	if err != nil {
		return fmt.Errorf("setting up the EtcdCluster controller: %w", err)
	}
	if o.Webhooks {
		if err := webhook.SetupWithManager[*v1alpha1.EtcdCluster](mgr, clusters); err != nil {
			return fmt.Errorf("setting up the EtcdCluster webhook: %w", err)
		}
	}
	backups, err := NewBackupHooks(BackupConfig{Client: mgr.GetClient(), Etcd: o.Etcd, Endpoints: o.Endpoints, Stores: stores,
		Secrets: mgr.GetAPIReader(), Recorder: rec, Runner: runner})
	if err != nil {
		return err
	}
	_, err = reconcile.SetupWithManager[*v1alpha1.EtcdBackup](mgr, backups, reconcile.WithFieldOwner(BackupFieldOwner),
		reconcile.WithSummary(statusutil.WithConditions(ConditionComplete)), reconcile.WithEventRecorder(rec))
	if err != nil {
		return fmt.Errorf("setting up the EtcdBackup controller: %w", err)
	}
	collector, err := NewGuardCollector(mgr.GetClient(), mgr.GetAPIReader())
	if err != nil {
		return err
	}
	if err := collector.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the guard collector: %w", err)
	}
	return nil
}

package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/opkit-dev/opkit/storageversion"
)

// CRDName is the Memcached CustomResourceDefinition's name.
const CRDName = "memcacheds.cache.opkit.dev"

// ReasonStorageMigrated is the reason of the event on the CRD once every
// Memcached is stored at the storage version.
const ReasonStorageMigrated = "StorageMigrated"

// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions/status,verbs=update,resourceNames=memcacheds.cache.opkit.dev

// MigrateStorage adds to mgr a leader-only runnable that rewrites every
// Memcached stored at an older version at the CRD's storage version and
// trims status.storedVersions (storageversion.Migrate), retrying until it
// succeeds. With leader election off (sharded replicas) every replica
// runs it: each Memcached is still written once.
//
// Footgun: run it only where the CRD converts through the webhook. Without
// one the API server relabels old objects unconverted, and the rewrite
// prunes their fields.
func MigrateStorage(mgr ctrl.Manager) error {
	rec := mgr.GetEventRecorder(Name)
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		log := ctrl.LoggerFrom(ctx).WithName("storage-migration")
		// The objects stored at v1alpha1 convert through the webhook,
		// which serves once a replica is ready.
		backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: time.Minute}
		err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
			res, err := storageversion.Migrate(ctx, mgr.GetConfig(), CRDName)
			if err != nil {
				log.Error(err, "migrating the stored Memcacheds; retrying")
				return false, nil
			}
			if len(res.Trimmed) > 0 {
				log.Info("stored Memcacheds migrated", "storageVersion", res.StorageVersion, "listed", res.Listed, "rewritten", res.Rewritten, "trimmed", res.Trimmed)
				crd := &apiextensionsv1.CustomResourceDefinition{}
				crd.Name = CRDName
				rec.Eventf(crd, nil, corev1.EventTypeNormal, ReasonStorageMigrated, "MigrateStorage",
					"rewrote %d of %d Memcacheds at %s; no longer stored at %v", res.Rewritten, res.Listed, res.StorageVersion, res.Trimmed)
			}
			return true, nil
		})
		if ctx.Err() != nil {
			return nil // stopped before it succeeded; the next leader runs it
		}
		return err
	}))
}

package controller

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/fsstore"
	"github.com/opkit-dev/opkit/backup/s3"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
)

// StoreResolver opens the backup store a StoreReference names, for objects
// in namespace.
type StoreResolver func(ctx context.Context, namespace string, ref v1alpha1.StoreReference) (backup.Store, error)

// ErrStoreNotFound is returned (wrapped) when a referenced store does not
// exist; retrying does not help until the reference or the Secret changes.
var ErrStoreNotFound = errors.New("backup store not found")

// DefaultStores resolves S3 references through their Secret (read with c)
// and PVC references to directories <fsRoot>/<pvcName>, where the claim is
// expected to be mounted into the operator.
func DefaultStores(c client.Reader, fsRoot string) StoreResolver {
	return func(ctx context.Context, namespace string, ref v1alpha1.StoreReference) (backup.Store, error) {
		switch {
		case ref.S3SecretName != "":
			var sec corev1.Secret
			if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.S3SecretName}, &sec); err != nil {
				if client.IgnoreNotFound(err) == nil {
					return nil, fmt.Errorf("%w: secret %s/%s", ErrStoreNotFound, namespace, ref.S3SecretName)
				}
				return nil, fmt.Errorf("reading secret %s/%s: %w", namespace, ref.S3SecretName, err)
			}
			cfg, err := s3.ConfigFromSecret(&sec)
			if err != nil {
				return nil, fmt.Errorf("%w: secret %s/%s: %w", ErrStoreNotFound, namespace, ref.S3SecretName, err)
			}
			return s3.New(cfg)
		case ref.PVCName != "":
			if fsRoot == "" {
				return nil, fmt.Errorf("%w: pvcName %s: the operator mounts no backup volumes (--backup-root)", ErrStoreNotFound, ref.PVCName)
			}
			return fsstore.New(filepath.Join(fsRoot, ref.PVCName))
		}
		return nil, fmt.Errorf("%w: empty storeRef", ErrStoreNotFound)
	}
}

// clusterStore returns the part of the store holding cluster's backups.
func clusterStore(ctx context.Context, stores StoreResolver, namespace, cluster string, ref v1alpha1.StoreReference) (backup.Store, error) {
	s, err := stores(ctx, namespace, ref)
	if err != nil {
		return nil, err
	}
	return backup.Sub(s, namespace+"/"+cluster)
}

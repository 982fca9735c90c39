package controller

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/fsstore"
	"github.com/opkit-dev/opkit/backup/s3"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
)

// StoreResolver opens the backup store a StoreReference names, for objects
// in namespace.
type StoreResolver func(ctx context.Context, namespace string, ref v1alpha1.StoreReference) (backup.Store, error)

// Errors of a StoreResolver that callers branch on (errors.Is).
var (
	// ErrStoreNotFound: the referenced store does not exist (yet): its
	// Secret is missing, or its claim is not mounted into the operator.
	// Retrying helps once it is created.
	ErrStoreNotFound = errors.New("backup store not found")
	// ErrStoreMisconfigured: the reference or the store's configuration is
	// invalid. Retrying does not help until they change.
	ErrStoreMisconfigured = errors.New("backup store misconfigured")
)

// storeUnusable reports whether err, from a StoreResolver, says the store
// cannot be used until someone creates or fixes it (ErrStoreNotFound,
// ErrStoreMisconfigured): a pass reports it rather than retrying at once.
func storeUnusable(err error) bool {
	return errors.Is(err, ErrStoreNotFound) || errors.Is(err, ErrStoreMisconfigured)
}

// DefaultStores resolves S3 references through their Secret (read with c)
// and PVC references of namespace to directories <fsRoot>/<namespace>/<pvcName>,
// where a claim is expected to be mounted into the operator: the mount
// decides which namespace a filesystem store serves, so that no namespace
// writes into another's. Its errors wrap
// ErrStoreNotFound or ErrStoreMisconfigured when retrying cannot help
// right away.
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
				return nil, fmt.Errorf("%w: secret %s/%s: %w", ErrStoreMisconfigured, namespace, ref.S3SecretName, err)
			}
			st, err := s3.New(cfg)
			if err != nil {
				return nil, fmt.Errorf("%w: secret %s/%s: %w", ErrStoreMisconfigured, namespace, ref.S3SecretName, err)
			}
			return st, nil
		case ref.PVCName != "":
			if fsRoot == "" {
				return nil, fmt.Errorf("%w: pvcName %s: the operator mounts no backup volumes (--backup-root)", ErrStoreMisconfigured, ref.PVCName)
			}
			// Checked again here: objects made before the CRD checked names
			// may exist. A name is one path segment, never "..".
			if errs := validation.IsDNS1123Subdomain(ref.PVCName); len(errs) > 0 {
				return nil, fmt.Errorf("%w: storeRef.pvcName %q: %s", ErrStoreMisconfigured, ref.PVCName, strings.Join(errs, "; "))
			}
			dir := filepath.Join(fsRoot, namespace, ref.PVCName)
			st, err := fsstore.New(dir)
			if err != nil {
				return nil, fmt.Errorf("%w: pvcName %s is not mounted into the operator for namespace %s (at %s): %w", ErrStoreNotFound, ref.PVCName, namespace, dir, err)
			}
			return st, nil
		}
		return nil, fmt.Errorf("%w: empty storeRef", ErrStoreMisconfigured)
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

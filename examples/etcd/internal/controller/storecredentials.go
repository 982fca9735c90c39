package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/ownership"
)

// StoreCredentialsName returns the name of the operator's copy of the
// Secret of spec.backup.storeRef.s3SecretName of the EtcdCluster named
// cluster. The guard holds the copy as it holds the claims: deleting the
// namespace deletes the user's Secret within seconds, and the final
// backup would have no store to write to.
func StoreCredentialsName(cluster string) string { return cluster + "-backup-store" }

// keepStoreCredentials copies c's S3 store Secret into its copy
// (StoreCredentialsName), held by guard, when the two differ, and deletes
// the copy once no final backup needs it (no S3 store, or none taken). A
// missing Secret is left to the backups to report.
func (h *ClusterHooks) keepStoreCredentials(ctx context.Context, c *v1alpha1.EtcdCluster, guard *corev1.ConfigMap) error {
	b := c.Spec.Backup
	if b == nil || b.StoreRef.S3SecretName == "" || b.SkipFinalBackup {
		return h.dropStoreCredentials(ctx, c)
	}
	if guard == nil {
		return nil
	}
	src, err := getSecret(ctx, h.secrets(), c.Namespace, b.StoreRef.S3SecretName)
	if err != nil || src == nil {
		return err
	}
	name := StoreCredentialsName(c.Name)
	cp, err := getSecret(ctx, h.secrets(), c.Namespace, name)
	if err != nil {
		return err
	}
	if cp == nil {
		cp = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: selectorLabels(c)},
			Type: corev1.SecretTypeOpaque, Data: src.Data}
		if err := controllerutil.SetControllerReference(c, cp, h.Client.Scheme()); err != nil {
			return err
		}
		if err := h.Client.Create(ctx, heldBy(cp, guard)); err != nil {
			return fmt.Errorf("copying the store's Secret %s to %s: %w", src.Name, name, err)
		}
		return nil
	}
	if !metav1.IsControlledBy(cp, c) {
		return &ownership.NotControlledError{Object: cp}
	}
	if maps.EqualFunc(cp.Data, src.Data, bytes.Equal) {
		return nil
	}
	cp.Data = src.Data
	if err := h.Client.Update(ctx, cp); err != nil {
		return fmt.Errorf("updating the copy %s of the store's Secret %s: %w", name, src.Name, err)
	}
	return nil
}

// dropStoreCredentials deletes c's copy of its store's Secret, if there is
// one: credentials nothing uses any more.
func (h *ClusterHooks) dropStoreCredentials(ctx context.Context, c *v1alpha1.EtcdCluster) error {
	cp, err := getSecret(ctx, h.secrets(), c.Namespace, StoreCredentialsName(c.Name))
	if err != nil || cp == nil || !metav1.IsControlledBy(cp, c) || cp.DeletionTimestamp != nil {
		return err
	}
	uid := cp.UID
	if err := h.Client.Delete(ctx, cp, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting %s, the copy of a store's Secret no final backup needs: %w", cp.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("deleted the copy of the backup store's Secret: no final backup needs it", "etcdcluster", klog.KObj(c), "secret", cp.Name)
	return nil
}

// finalStore opens c's store for its final backup: through the copy of
// the store's Secret (keepStoreCredentials) once the Secret is gone.
func (h *ClusterHooks) finalStore(ctx context.Context, c *v1alpha1.EtcdCluster) (backup.Store, error) {
	ref := c.Spec.Backup.StoreRef
	store, err := clusterStore(ctx, h.Stores, c.Namespace, c.Name, ref)
	if ref.S3SecretName == "" || !errors.Is(err, ErrStoreNotFound) {
		return store, err
	}
	ref.S3SecretName = StoreCredentialsName(c.Name)
	if held, herr := clusterStore(ctx, h.Stores, c.Namespace, c.Name, ref); herr == nil {
		return held, nil
	}
	return nil, err
}

// refreshStoreCredentials is keepStoreCredentials on a pass that opens the
// store anyway; a failure is logged, since the backups report their own
// store errors and only the final backup, later, needs the copy.
func (h *ClusterHooks) refreshStoreCredentials(ctx context.Context, c *v1alpha1.EtcdCluster) {
	guard, err := h.getGuard(ctx, c)
	if err == nil {
		err = h.keepStoreCredentials(ctx, c, guard)
	}
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "the copy of the backup store's Secret for the final backup is not up to date",
			"etcdcluster", klog.KObj(c), "secret", StoreCredentialsName(c.Name))
	}
}

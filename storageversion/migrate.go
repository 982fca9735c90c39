package storageversion

import (
	"context"
	"errors"
	"fmt"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrStorageVersionChanged is returned by Migrate when the CRD's storage
// version changed while it ran: run it again.
var ErrStorageVersionChanged = errors.New("storageversion: the storage version changed during the migration")

// Result is what Migrate did.
type Result struct {
	// StorageVersion is the CRD's storage version.
	StorageVersion string
	// Listed is how many objects were patched, Rewritten how many of them
	// came back at a new resourceVersion: stored at another version, or
	// rewritten meanwhile by another replica's Migrate.
	Listed, Rewritten int
	// Trimmed are the versions removed from status.storedVersions.
	Trimmed []string
}

// Option configures Migrate.
type Option func(*options)

type options struct{ pageSize int64 }

// WithPageSize lists the objects n at a time (default 500).
func WithPageSize(n int64) Option { return func(o *options) { o.pageSize = n } }

// Migrate rewrites every object of the CRD named crd at its storage
// version when status.storedVersions lists another, then sets
// storedVersions to the storage version alone. It reads and writes
// through a client of its own on cfg, never a cache: a cache may see some
// namespaces, slots or labels only, and an object it missed would stay at
// a version no longer listed. It needs get on the CRD, update on its
// status, and list and patch on its objects.
//
// Footgun: every API server must already store at the new version; during
// a control-plane upgrade with skewed API servers, one may still write the
// old version after Migrate trimmed it.
func Migrate(ctx context.Context, cfg *rest.Config, crd string, opts ...Option) (Result, error) {
	o := options{pageSize: 500}
	for _, opt := range opts {
		opt(&o)
	}
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return Result{}, fmt.Errorf("storageversion: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return Result{}, fmt.Errorf("storageversion: a client: %w", err)
	}
	def := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, types.NamespacedName{Name: crd}, def); err != nil {
		return Result{}, fmt.Errorf("storageversion: CRD %s: %w", crd, err)
	}
	res := Result{StorageVersion: storageVersion(def)}
	if res.StorageVersion == "" {
		return res, fmt.Errorf("storageversion: CRD %s has no storage version", crd)
	}
	if slices.Equal(def.Status.StoredVersions, []string{res.StorageVersion}) {
		return res, nil
	}
	gv := schema.GroupVersion{Group: def.Spec.Group, Version: res.StorageVersion}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gv.WithKind(def.Spec.Names.ListKind))
	for {
		if err := c.List(ctx, list, client.Limit(o.pageSize), client.Continue(list.Continue)); err != nil {
			return res, fmt.Errorf("storageversion: listing %s: %w", crd, err)
		}
		for i := range list.Items {
			obj := &list.Items[i]
			obj.SetGroupVersionKind(gv.WithKind(def.Spec.Names.Kind))
			before := obj.ResourceVersion
			err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte("{}")))
			if apierrors.IsNotFound(err) {
				continue // deleted since the list
			}
			if err != nil {
				return res, fmt.Errorf("storageversion: rewriting %s %s: %w", def.Spec.Names.Kind, client.ObjectKeyFromObject(obj), err)
			}
			res.Listed++
			if obj.ResourceVersion != before {
				res.Rewritten++
			}
		}
		if list.Continue == "" {
			break
		}
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, types.NamespacedName{Name: crd}, def); err != nil {
			return err
		}
		if storageVersion(def) != res.StorageVersion {
			return fmt.Errorf("%w: %s to %s", ErrStorageVersionChanged, res.StorageVersion, storageVersion(def))
		}
		res.Trimmed = slices.DeleteFunc(slices.Clone(def.Status.StoredVersions), func(v string) bool { return v == res.StorageVersion })
		def.Status.StoredVersions = []string{res.StorageVersion}
		return c.Status().Update(ctx, def)
	})
	if err != nil {
		return res, fmt.Errorf("storageversion: trimming the storedVersions of %s: %w", crd, err)
	}
	return res, nil
}

// storageVersion is the name of def's storage version.
func storageVersion(def *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range def.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}

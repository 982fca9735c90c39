package controller_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
)

// TestPVCStoresAreKeyedByNamespace: a claim mounted into the operator at
// <root>/<namespace>/<name> serves the EtcdClusters and EtcdBackups of that
// namespace only; a reference from another namespace, or one that climbs
// out of its directory (an object written before the CRD checked names),
// reaches nothing.
func TestPVCStoresAreKeyedByNamespace(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "team-a", "backups"), 0o700); err != nil {
		t.Fatal(err)
	}
	stores := controller.DefaultStores(nil, root)
	tests := []struct {
		namespace, pvcName string
		want               error
	}{
		{"team-a", "backups", nil},
		{"team-b", "backups", controller.ErrStoreNotFound},
		{"team-b", "../team-a/backups", controller.ErrStoreMisconfigured},
		{"team-b", "..", controller.ErrStoreMisconfigured},
	}
	for _, tt := range tests {
		t.Run(tt.namespace+"/"+tt.pvcName, func(t *testing.T) {
			_, err := stores(t.Context(), tt.namespace, v1alpha1.StoreReference{PVCName: tt.pvcName})
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("store for %s in %s: %v, want %v", tt.pvcName, tt.namespace, err, tt.want)
			}
		})
	}
}

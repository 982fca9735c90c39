package controller_test

import (
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
)

// TestCacheOptionsKeepTheReconcilersManagedFields: the cache keeps, of an
// EtcdCluster's and an EtcdBackup's managedFields, the entries of the
// field owner their Reconciler writes status with, and no other client's.
func TestCacheOptionsKeepTheReconcilersManagedFields(t *testing.T) {
	opts, err := controller.CacheOptions()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		obj   client.Object
		owner string
	}{
		{&v1alpha1.EtcdCluster{}, controller.FieldOwner},
		{&v1alpha1.EtcdBackup{}, controller.BackupFieldOwner},
	} {
		t.Run(reflect.TypeOf(tc.obj).Elem().Name(), func(t *testing.T) {
			var transform func(any) (any, error)
			for k, by := range opts.ByObject {
				if reflect.TypeOf(k) == reflect.TypeOf(tc.obj) {
					transform = by.Transform
				}
			}
			if transform == nil {
				t.Fatal("CacheOptions has no transform for the kind: the cache holds every client's managedFields")
			}
			obj := tc.obj.DeepCopyObject().(client.Object)
			obj.SetManagedFields([]metav1.ManagedFieldsEntry{
				{Manager: "kubectl-client-side-apply", Operation: metav1.ManagedFieldsOperationUpdate},
				{Manager: tc.owner, Operation: metav1.ManagedFieldsOperationApply, Subresource: "status"},
				{Manager: "flux", Operation: metav1.ManagedFieldsOperationApply},
			})
			out, err := transform(obj)
			if err != nil {
				t.Fatal(err)
			}
			var managers []string
			for _, e := range out.(client.Object).GetManagedFields() {
				managers = append(managers, e.Manager)
			}
			if diff := cmp.Diff([]string{tc.owner}, managers); diff != "" {
				t.Errorf("managers kept (-want +got):\n%s", diff)
			}
		})
	}
}

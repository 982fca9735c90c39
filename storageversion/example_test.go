package storageversion_test

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/opkit-dev/opkit/storageversion"
)

// After an upgrade that made v1beta1 the storage version, an operator
// moves the objects stored at v1alpha1 on its start; a later release can
// then drop v1alpha1 from the CRD.
func ExampleMigrate() {
	res, err := storageversion.Migrate(context.Background(), ctrl.GetConfigOrDie(), "memcacheds.cache.opkit.dev")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d rewritten at %s, %v trimmed\n", res.Rewritten, res.StorageVersion, res.Trimmed)
}

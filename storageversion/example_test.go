package storageversion_test

import (
	"context"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/storageversion"
)

// After an upgrade that made v1beta1 the storage version, an operator
// moves the objects stored at v1alpha1 on its start; a later release can
// then drop v1alpha1 from the CRD.
func ExampleMigrate() {
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	c, err := client.New(ctrl.GetConfigOrDie(), client.Options{Scheme: scheme})
	if err != nil {
		panic(err)
	}
	res, err := storageversion.Migrate(context.Background(), c, "memcacheds.cache.opkit.dev")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d rewritten at %s, %v trimmed\n", res.Rewritten, res.StorageVersion, res.Trimmed)
}

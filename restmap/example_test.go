package restmap_test

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/opkit-dev/opkit/restmap"
)

// An operator that caches several namespaces gives its manager the
// memoized mapper; the caches and the client share it.
func ExampleProvider() {
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{MapperProvider: restmap.Provider})
	if err != nil {
		panic(err)
	}
	_ = mgr
}

func ExampleMemoize() {
	gv := schema.GroupVersion{Group: "example.com", Version: "v1"}
	static := meta.NewDefaultRESTMapper([]schema.GroupVersion{gv})
	static.Add(gv.WithKind("Widget"), meta.RESTScopeNamespace)

	m := restmap.Memoize(static)
	r, err := m.RESTMapping(schema.GroupKind{Group: "example.com", Kind: "Widget"}, "v1")
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Resource.Resource, r.Scope.Name())
	// Output: widgets namespace
}

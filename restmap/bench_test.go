package restmap_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/opkit-dev/opkit/restmap"
)

// discoveryMapper is what controller-runtime's dynamic mapper answers
// from: client-go's priority mapper over the groups it discovered.
func discoveryMapper() meta.RESTMapper {
	group := func(name string, kinds ...string) *restmapper.APIGroupResources {
		gv := metav1.GroupVersionForDiscovery{GroupVersion: schema.GroupVersion{Group: name, Version: "v1"}.String(), Version: "v1"}
		g := &restmapper.APIGroupResources{
			Group:              metav1.APIGroup{Name: name, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv},
			VersionedResources: map[string][]metav1.APIResource{},
		}
		for _, k := range kinds {
			g.VersionedResources["v1"] = append(g.VersionedResources["v1"], metav1.APIResource{Name: k + "s", Kind: k, Namespaced: true})
		}
		return g
	}
	return restmapper.NewDiscoveryRESTMapper([]*restmapper.APIGroupResources{
		group("", "Pod", "Service", "ConfigMap", "Secret"),
		group("apps", "Deployment", "StatefulSet", "ReplicaSet"),
		group("policy", "PodDisruptionBudget"),
		group("example.com", "Widget"),
	})
}

// go test ./restmap -run '^$' -bench IsGVKNamespaced -benchmem
func BenchmarkIsGVKNamespaced(b *testing.B) {
	gvk := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	for _, bm := range []struct {
		name   string
		mapper meta.RESTMapper
	}{
		{"discovery", discoveryMapper()},
		{"memoized", restmap.Memoize(discoveryMapper())},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if ok, err := apiutil.IsGVKNamespaced(gvk, bm.mapper); err != nil || !ok {
					b.Fatalf("IsGVKNamespaced = %v, %v", ok, err)
				}
			}
		})
	}
}

package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of the Memcached API.
var GroupVersion = schema.GroupVersion{Group: "cache.opkit.dev", Version: "v1beta1"}

// AddToScheme registers the Memcached types with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Memcached{}, &MemcachedList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

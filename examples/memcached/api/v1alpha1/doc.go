// Package v1alpha1 is the cache.opkit.dev/v1alpha1 API of the memcached
// example operator: the Memcached kind.
//
// +kubebuilder:object:generate=true
// +groupName=cache.opkit.dev
package v1alpha1

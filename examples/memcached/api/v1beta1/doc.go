// Package v1beta1 is the cache.opkit.dev/v1beta1 API of the memcached
// example operator: the Memcached kind, the hub v1alpha1 converts to.
// Against v1alpha1, size is replicas, memoryLimitMB and extraArgs are in
// cache, and affinity and topologySpreadConstraints in placement.
//
// +kubebuilder:object:generate=true
// +groupName=cache.opkit.dev
package v1beta1

// Package v1alpha1 is the etcd.opkit.dev/v1alpha1 API of the etcd example
// operator: EtcdCluster, a quorum-safe etcd cluster, and EtcdBackup, an
// on-demand snapshot of one.
//
// +kubebuilder:object:generate=true
// +groupName=etcd.opkit.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of this API.
var GroupVersion = schema.GroupVersion{Group: "etcd.opkit.dev", Version: "v1alpha1"}

// AddToScheme adds this API's types to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &EtcdCluster{}, &EtcdClusterList{}, &EtcdBackup{}, &EtcdBackupList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

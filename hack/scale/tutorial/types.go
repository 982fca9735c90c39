package main

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// groupVersion is the Memcached kind's group and the version the CRD of
// examples/memcached, which the benchmark installs, serves without the
// operator's conversion webhook.
var groupVersion = schema.GroupVersion{Group: "cache.opkit.dev", Version: "v1beta1"}

// memcached is the part of the kind this operator reads and writes, as the
// tutorial's api package would declare it.
type memcached struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              memcachedSpec   `json:"spec,omitempty"`
	Status            memcachedStatus `json:"status,omitempty"`
}

type memcachedSpec struct {
	Replicas int32  `json:"replicas"` // required by the CRD, and 0 is a size
	Image    string `json:"image,omitempty"`
}

type memcachedStatus struct {
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	ReadyReplicas      int32              `json:"readyReplicas,omitempty"`
}

type memcachedList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []memcached `json:"items"`
}

// DeepCopyInto copies m into out (what controller-gen would generate).
func (m *memcached) DeepCopyInto(out *memcached) {
	*out = *m
	out.TypeMeta = m.TypeMeta
	m.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec = m.Spec
	out.Status = m.Status
	if m.Status.Conditions != nil {
		out.Status.Conditions = make([]metav1.Condition, len(m.Status.Conditions))
		for i := range m.Status.Conditions {
			m.Status.Conditions[i].DeepCopyInto(&out.Status.Conditions[i])
		}
	}
}

// DeepCopyObject implements runtime.Object.
func (m *memcached) DeepCopyObject() runtime.Object {
	out := &memcached{}
	m.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *memcachedList) DeepCopyObject() runtime.Object {
	out := &memcachedList{TypeMeta: l.TypeMeta}
	l.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]memcached, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// addToScheme registers the kind.
func addToScheme(s *runtime.Scheme) error {
	s.AddKnownTypeWithName(groupVersion.WithKind("Memcached"), &memcached{})
	s.AddKnownTypeWithName(groupVersion.WithKind("MemcachedList"), &memcachedList{})
	metav1.AddToGroupVersion(s, groupVersion)
	return nil
}

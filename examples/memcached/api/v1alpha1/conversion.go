package v1alpha1

import (
	"sigs.k8s.io/controller-runtime/pkg/conversion"

	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
)

// ConvertTo converts m to the hub, v1beta1.
func (m *Memcached) ConvertTo(dst conversion.Hub) error {
	h := dst.(*v1beta1.Memcached)
	h.ObjectMeta = *m.ObjectMeta.DeepCopy()
	s := m.Spec.DeepCopy()
	h.Spec = v1beta1.MemcachedSpec{
		Replicas: s.Size, Image: s.Image, Port: s.Port,
		Cache:     v1beta1.CacheSpec{MemoryMB: s.MemoryLimitMB, ExtraArgs: s.ExtraArgs},
		Resources: s.Resources,
		Placement: v1beta1.PlacementSpec{Affinity: s.Affinity, TopologySpreadConstraints: s.TopologySpreadConstraints},
	}
	h.Status = v1beta1.MemcachedStatus(*m.Status.DeepCopy()) // the same fields in both
	return nil
}

// ConvertFrom converts the hub, v1beta1, to m.
func (m *Memcached) ConvertFrom(src conversion.Hub) error {
	h := src.(*v1beta1.Memcached)
	m.ObjectMeta = *h.ObjectMeta.DeepCopy()
	s := h.Spec.DeepCopy()
	m.Spec = MemcachedSpec{
		Size: s.Replicas, Image: s.Image, Port: s.Port,
		MemoryLimitMB: s.Cache.MemoryMB, ExtraArgs: s.Cache.ExtraArgs, Resources: s.Resources,
		Affinity: s.Placement.Affinity, TopologySpreadConstraints: s.Placement.TopologySpreadConstraints,
	}
	m.Status = MemcachedStatus(*h.Status.DeepCopy())
	return nil
}

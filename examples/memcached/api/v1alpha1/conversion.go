package v1alpha1

import (
	"strconv"

	"sigs.k8s.io/controller-runtime/pkg/conversion"

	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
)

// AnnotationMaxConnections keeps v1beta1's spec.cache.maxConnections,
// which v1alpha1 has no field for, on a Memcached read as v1alpha1, so
// that writing it back at v1alpha1 keeps it.
const AnnotationMaxConnections = "cache.opkit.dev/v1beta1-max-connections"

// ConvertTo converts m to the hub, v1beta1.
func (m *Memcached) ConvertTo(dst conversion.Hub) error {
	h := dst.(*v1beta1.Memcached)
	h.ObjectMeta = *m.ObjectMeta.DeepCopy()
	if v, ok := h.Annotations[AnnotationMaxConnections]; ok {
		// An unparsable value (written by hand) is kept as it is.
		if n, err := strconv.ParseInt(v, 10, 32); err == nil {
			h.Spec.Cache.MaxConnections = int32(n)
			delete(h.Annotations, AnnotationMaxConnections)
			if len(h.Annotations) == 0 {
				h.Annotations = nil
			}
		}
	}
	s := m.Spec.DeepCopy()
	h.Spec.Replicas = s.Size
	h.Spec.Image = s.Image
	h.Spec.Port = s.Port
	h.Spec.Cache.MemoryMB = s.MemoryLimitMB
	h.Spec.Cache.ExtraArgs = s.ExtraArgs
	h.Spec.Resources = s.Resources
	h.Spec.Placement = v1beta1.PlacementSpec{Affinity: s.Affinity, TopologySpreadConstraints: s.TopologySpreadConstraints}
	h.Status = v1beta1.MemcachedStatus(*m.Status.DeepCopy()) // the same fields in both
	return nil
}

// ConvertFrom converts the hub, v1beta1, to m.
func (m *Memcached) ConvertFrom(src conversion.Hub) error {
	h := src.(*v1beta1.Memcached)
	m.ObjectMeta = *h.ObjectMeta.DeepCopy()
	if n := h.Spec.Cache.MaxConnections; n != 0 {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[AnnotationMaxConnections] = strconv.FormatInt(int64(n), 10)
	}
	s := h.Spec.DeepCopy()
	m.Spec = MemcachedSpec{
		Size: s.Replicas, Image: s.Image, Port: s.Port,
		MemoryLimitMB: s.Cache.MemoryMB, ExtraArgs: s.Cache.ExtraArgs, Resources: s.Resources,
		Affinity: s.Placement.Affinity, TopologySpreadConstraints: s.Placement.TopologySpreadConstraints,
	}
	m.Status = MemcachedStatus(*h.Status.DeepCopy())
	return nil
}

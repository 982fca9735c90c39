package v1alpha1_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/conversiontest"
	"github.com/opkit-dev/opkit/examples/memcached/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
)

// TestConversionRoundTrips: any Memcached read at the other version and
// written back is unchanged, both ways.
func TestConversionRoundTrips(t *testing.T) {
	conversiontest.RoundTrip(t, &v1beta1.Memcached{}, &v1alpha1.Memcached{})
}

// TestConversion: where each v1alpha1 field lands in v1beta1.
func TestConversion(t *testing.T) {
	affinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}}
	tests := []struct {
		name  string
		alpha v1alpha1.Memcached
		beta  v1beta1.Memcached
	}{
		{
			name: "every field",
			alpha: v1alpha1.Memcached{
				ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: map[string]string{"team": "a"}},
				Spec: v1alpha1.MemcachedSpec{Size: 3, Image: "memcached:1.6.38", Port: 11311, MemoryLimitMB: 128, ExtraArgs: []string{"-v"},
					Affinity: affinity, TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1}}},
				Status: v1alpha1.MemcachedStatus{ReadyReplicas: 3, ObservedGeneration: 2},
			},
			beta: v1beta1.Memcached{
				ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: map[string]string{"team": "a"}},
				Spec: v1beta1.MemcachedSpec{Replicas: 3, Image: "memcached:1.6.38", Port: 11311,
					Cache:     v1beta1.CacheSpec{MemoryMB: 128, ExtraArgs: []string{"-v"}},
					Placement: v1beta1.PlacementSpec{Affinity: affinity, TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1}}}},
				Status: v1beta1.MemcachedStatus{ReadyReplicas: 3, ObservedGeneration: 2},
			},
		},
		{
			name:  "empty",
			alpha: v1alpha1.Memcached{},
			beta:  v1beta1.Memcached{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var beta v1beta1.Memcached
			if err := tt.alpha.DeepCopy().ConvertTo(&beta); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.beta, beta); diff != "" {
				t.Errorf("v1alpha1 -> v1beta1 (-want +got):\n%s", diff)
			}
			var alpha v1alpha1.Memcached
			if err := alpha.ConvertFrom(tt.beta.DeepCopy()); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.alpha, alpha); diff != "" {
				t.Errorf("v1beta1 -> v1alpha1 (-want +got):\n%s", diff)
			}
		})
	}
}

package controller

import (
	"testing"

	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
)

// TestWarnings: an image without a tag or digest, or tagged latest, is
// warned about at admission; a pinned one is not.
func TestWarnings(t *testing.T) {
	tests := []struct {
		image string
		warn  bool
	}{
		{"memcached:1.6", false},
		{"docker.io/library/memcached:1.6.38", false},
		{"registry:5000/memcached:1.6", false},
		{"memcached@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", false},
		{"memcached", true},
		{"memcached:latest", true},
		{"registry:5000/memcached", true},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			m := &v1beta1.Memcached{Spec: v1beta1.MemcachedSpec{Image: tt.image}}
			got := (&Hooks{}).Warnings(t.Context(), nil, m)
			if (len(got) > 0) != tt.warn {
				t.Errorf("Warnings(%q) = %q, want a warning: %v", tt.image, got, tt.warn)
			}
		})
	}
}

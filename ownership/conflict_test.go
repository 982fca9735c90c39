package ownership_test

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/ownership"
)

func TestIsConflict(t *testing.T) {
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns"}}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"another error", errors.New("boom"), false},
		{"not controlled", &ownership.NotControlledError{Object: obj}, true},
		{"controlled by another", &ownership.AlreadyControlledError{Object: obj, Owner: metav1.OwnerReference{Kind: "Widget", Name: "w"}}, true},
		{"wrapped", fmt.Errorf("applying: %w", &ownership.NotControlledError{Object: obj}), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ownership.IsConflict(tt.err); got != tt.want {
				t.Errorf("IsConflict(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

package nsgoing_test

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/opkit-dev/opkit/internal/nsgoing"
)

func TestDeletingAndTerminating(t *testing.T) {
	now := metav1.Now()
	gr := schema.GroupResource{Resource: "namespaces"}
	tests := []struct {
		name                  string
		ns                    *corev1.Namespace // nil: none
		getErr                error
		deleting, terminating bool
		wantErr               bool
	}{
		{name: "live", ns: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "n"}}},
		{name: "being deleted", ns: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "n", DeletionTimestamp: &now, Finalizers: []string{"x"}}},
			deleting: true, terminating: true},
		// Gone for Deleting; for Terminating, a cache that has not seen it.
		{name: "not found", deleting: true},
		{name: "forbidden", getErr: apierrors.NewForbidden(gr, "n", errors.New("no RBAC"))},
		{name: "unreachable", getErr: errors.New("connection refused"), wantErr: true},
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(scheme)
			if tt.ns != nil {
				b = b.WithObjects(tt.ns)
			}
			c := interceptor.NewClient(b.Build(), interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if tt.getErr != nil {
						return tt.getErr
					}
					return c.Get(ctx, key, obj, opts...)
				},
			})
			d, err := nsgoing.Deleting(t.Context(), c, "n")
			if d != tt.deleting || (err != nil) != tt.wantErr {
				t.Errorf("Deleting = %v, %v; want %v, error %v", d, err, tt.deleting, tt.wantErr)
			}
			term, err := nsgoing.Terminating(t.Context(), c, "n")
			if term != tt.terminating || (err != nil) != tt.wantErr {
				t.Errorf("Terminating = %v, %v; want %v, error %v", term, err, tt.terminating, tt.wantErr)
			}
		})
	}
}

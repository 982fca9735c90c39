package guard

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NamespaceDeleting reports whether namespace ns is being deleted (or
// gone), reading only its metadata through r. Check it in Reconcile and
// do Finalize's work then: with ordered namespace deletion (Kubernetes
// 1.34+) the namespace controller deletes the owner only once its pods are
// gone, which Policy keeps until Release. A reader that may not get
// namespaces (an operator bound to some namespaces only) gets false.
func NamespaceDeleting(ctx context.Context, r client.Reader, ns string) (bool, error) {
	n := &metav1.PartialObjectMetadata{}
	n.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := r.Get(ctx, client.ObjectKey{Name: ns}, n); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case apierrors.IsForbidden(err):
			return false, nil
		}
		return false, fmt.Errorf("reading namespace %s: %w", ns, err)
	}
	return n.DeletionTimestamp != nil, nil
}

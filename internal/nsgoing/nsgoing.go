// Package nsgoing reads whether a namespace is being deleted, for
// package guard's NamespaceDeleting and package reconcile's
// WithNamespaceDeletion.
package nsgoing

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Deleting reports whether namespace ns is being deleted (or gone),
// reading only its metadata through r. A reader that may not get
// namespaces gets false.
func Deleting(ctx context.Context, r client.Reader, ns string) (bool, error) {
	going, found, err := read(ctx, r, ns)
	if err != nil {
		return false, err
	}
	return going || !found, nil
}

// Terminating reports whether namespace ns, where an object exists, is
// being deleted, reading its metadata through r. A namespace r does not
// hold (a cache that has not seen it yet, or whose selector leaves it
// out) is not: the object's existence says the namespace exists.
func Terminating(ctx context.Context, r client.Reader, ns string) (bool, error) {
	going, _, err := read(ctx, r, ns)
	return going, err
}

// read returns whether ns is being deleted, and whether r found it: a
// reader that may not get namespaces takes it as there.
func read(ctx context.Context, r client.Reader, ns string) (deleting, found bool, err error) {
	n := New()
	switch err := r.Get(ctx, client.ObjectKey{Name: ns}, n); {
	case err == nil:
		return n.DeletionTimestamp != nil, true, nil
	case apierrors.IsNotFound(err):
		return false, false, nil
	case apierrors.IsForbidden(err):
		return false, true, nil
	default:
		return false, false, fmt.Errorf("reading namespace %s: %w", ns, err)
	}
}

// New returns an empty Namespace's metadata, for a metadata-only read
// or watch.
func New() *metav1.PartialObjectMetadata {
	n := &metav1.PartialObjectMetadata{}
	n.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return n
}

// NewList returns an empty list of Namespaces' metadata.
func NewList() *metav1.PartialObjectMetadataList {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	return l
}

package guard

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/nsgoing"
)

// NamespaceDeleting reports whether namespace ns is being deleted (or
// gone), reading only its metadata through r, for a controller that does
// Finalize's work itself when its namespace goes; a Reconciler has
// reconcile.WithNamespaceDeletion. A reader that may not get namespaces
// (an operator bound to some namespaces only) gets false.
func NamespaceDeleting(ctx context.Context, r client.Reader, ns string) (bool, error) {
	return nsgoing.Deleting(ctx, r, ns)
}

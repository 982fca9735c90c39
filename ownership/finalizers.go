package ownership

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// EnsureFinalizer adds finalizer to obj on the API server and reports
// whether it had to. obj must have been read from the API server (it needs
// a resourceVersion); on success it holds the server's latest copy, so its
// resourceVersion is fresh for a later status write.
//
//   - obj already lists finalizer: returns (false, nil) without any request,
//     even when obj is being deleted.
//   - obj has a deletionTimestamp: returns an error wrapping ErrBeingDeleted
//     without any request; the API server forbids new finalizers then.
//   - otherwise it sends a JSON merge patch with an optimistic lock. A merge
//     patch replaces the whole finalizers list, so without the lock it would
//     silently drop a finalizer another writer added since obj was read. On a
//     conflict it re-reads the object and retries (client-go
//     retry.DefaultRetry: 5 attempts), re-checking the two cases above on the
//     fresh copy; a lost race to an identical writer returns (false, nil).
//   - the object is gone: returns an error for which apierrors.IsNotFound is
//     true.
//
// Footgun: with a cache-backed client the re-read after a conflict may be
// stale, so all attempts can conflict; the returned Conflict error is safe
// to handle by requeueing. On error obj is unchanged.
func EnsureFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer string) (changed bool, err error) {
	if err := validateFinalizer(finalizer); err != nil {
		return false, err
	}
	if controllerutil.ContainsFinalizer(obj, finalizer) {
		return false, nil
	}
	changed, err = patchWithRetry(ctx, c, obj, func(cur client.Object) (bool, error) {
		if controllerutil.ContainsFinalizer(cur, finalizer) {
			return false, nil
		}
		if cur.GetDeletionTimestamp() != nil {
			return false, fmt.Errorf("%s %s: cannot add finalizer %q: %w", kindOf(cur), describe(cur), finalizer, ErrBeingDeleted)
		}
		controllerutil.AddFinalizer(cur, finalizer)
		return true, nil
	})
	if err != nil {
		return false, fmt.Errorf("adding finalizer %q to %s %s: %w", finalizer, kindOf(obj), describe(obj), err)
	}
	return changed, nil
}

// RemoveFinalizer removes finalizer from obj on the API server and reports
// whether this call removed it. obj must have been read from the API server;
// on success it holds the server's latest copy (the final state of the
// object when removing the last finalizer let the deletion complete).
//
//   - obj does not list finalizer: returns (false, nil) without any request.
//   - otherwise it sends a JSON merge patch with an optimistic lock (see
//     EnsureFinalizer for why) and, on a conflict, re-reads and retries up to
//     5 times; when the fresh copy no longer lists finalizer it returns
//     (false, nil).
//   - the object is gone (NotFound on the patch or on a re-read): returns
//     (false, nil). An object with our finalizer cannot disappear unless
//     someone else removed the finalizer, so the desired state holds and
//     this call changed nothing; obj is then left as it was.
//
// On error obj is unchanged.
func RemoveFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer string) (changed bool, err error) {
	if err := validateFinalizer(finalizer); err != nil {
		return false, err
	}
	if !controllerutil.ContainsFinalizer(obj, finalizer) {
		return false, nil
	}
	changed, err = patchWithRetry(ctx, c, obj, func(cur client.Object) (bool, error) {
		return controllerutil.RemoveFinalizer(cur, finalizer), nil
	})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("removing finalizer %q from %s %s: %w", finalizer, kindOf(obj), describe(obj), err)
	}
	return changed, nil
}

// validateFinalizer checks the name the API server would reject.
func validateFinalizer(name string) error {
	if name == "" {
		return fmt.Errorf("%w: name is empty: use a domain-qualified name such as \"example.com/cleanup\"", ErrInvalidFinalizer)
	}
	if errs := validation.IsQualifiedName(name); len(errs) > 0 {
		return fmt.Errorf("%w %q: %s", ErrInvalidFinalizer, name, strings.Join(errs, "; "))
	}
	return nil
}

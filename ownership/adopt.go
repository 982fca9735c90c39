package ownership

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Adopt makes owner the controller of obj on the API server when obj is an
// orphan that owner's selector matches, and reports whether it did. obj
// must have been read from the API server; on success it holds the server's
// latest copy.
//
// Adopt decides, in this order, without any request:
//
//   - selector is nil, owner has no name or UID, scheme does not know
//     owner's type, or the namespace rules are broken (ErrCrossNamespace,
//     ErrClusterScopedDependent): an error.
//   - owner is being deleted: an error wrapping ErrBeingDeleted. A
//     controller that is going away must not take new dependents.
//   - obj is being deleted: (false, nil).
//   - obj is already controlled by owner (same UID): (false, nil).
//   - obj is controlled by another object: (false, *AlreadyControlledError).
//   - obj's labels do not match selector: (false, nil).
//
// Otherwise it adds a controller reference (as SetControllerReference does)
// with a JSON merge patch carrying an optimistic lock, so that two
// controllers racing to adopt the same orphan cannot both win: the loser
// gets a conflict, re-reads obj and, re-deciding on the fresh copy, returns
// an *AlreadyControlledError. Conflicts are retried up to 5 times
// (client-go retry.DefaultRetry). If obj is gone, Adopt returns (false, nil).
//
// Adopt never releases: an object it controls whose labels stopped matching
// keeps its controller reference. Footguns: labels.Everything() adopts every
// orphan in the namespace; and owner's deletion state is taken from the
// owner you pass, so pass a recent copy (a cached owner may not show a
// deletion that is already under way). On error obj is unchanged.
func Adopt(ctx context.Context, c client.Client, owner client.Object, obj client.Object, selector labels.Selector, scheme *runtime.Scheme) (adopted bool, err error) {
	if selector == nil {
		return false, errors.New("adopting: selector is nil: pass labels.Everything() to adopt regardless of labels")
	}
	ref, err := referenceTo(owner, obj, scheme)
	if err != nil {
		return false, fmt.Errorf("adopting: %w", err)
	}
	if owner.GetDeletionTimestamp() != nil {
		return false, fmt.Errorf("adopting %s %s: owner %s %s: %w", kindOf(obj), describe(obj), kindOf(owner), describe(owner), ErrBeingDeleted)
	}
	ref.Controller = new(true)
	ref.BlockOwnerDeletion = new(true)

	adopted, err = patchWithRetry(ctx, c, obj, func(cur client.Object) (bool, error) {
		if cur.GetDeletionTimestamp() != nil {
			return false, nil
		}
		if ctrl := metav1.GetControllerOfNoCopy(cur); ctrl != nil {
			if sameObject(*ctrl, ref) {
				return false, nil
			}
			return false, &AlreadyControlledError{Object: cur, Owner: *ctrl}
		}
		if !selector.Matches(labels.Set(cur.GetLabels())) {
			return false, nil
		}
		upsert(cur, ref)
		return true, nil
	})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("adopting %s %s: %w", kindOf(obj), describe(obj), err)
	}
	return adopted, nil
}

package ownership

import (
	"context"
	"fmt"
	"reflect"

	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// conflictBackoff is how often and how fast a patch that lost an optimistic
// lock is re-read and retried.
var conflictBackoff = retry.DefaultRetry

// plan inspects and changes cur (a private copy) and reports whether there
// is anything to persist. It is called again on a fresh copy after every
// conflict, so it must decide from cur alone.
type plan func(cur client.Object) (change bool, err error)

// patchWithRetry persists the change plan makes to obj with a JSON merge
// patch carrying obj's resourceVersion (an optimistic lock). On a conflict
// it re-reads the object and asks plan again, up to conflictBackoff.Steps
// times. The first attempt works from obj as given, so a plan that wants no
// change costs no request.
//
// obj is overwritten only on success: with the server's response when a
// patch was sent, or with the re-read object when a re-read showed there was
// nothing left to do. On error obj is unchanged.
func patchWithRetry(ctx context.Context, c client.Client, obj client.Object, p plan) (changed bool, err error) {
	if obj.GetResourceVersion() == "" {
		return false, fmt.Errorf("%s %s has no resourceVersion: read it from the API server first", kindOf(obj), describe(obj))
	}
	cur := obj
	var result client.Object
	reread := false
	err = retry.RetryOnConflict(conflictBackoff, func() error {
		if reread {
			fresh, err := emptyLike(obj)
			if err != nil {
				return err
			}
			// A fresh object, not cur: decoding into a used object can keep
			// fields the new response omits (an emptied finalizer list)
			// with the JSON decoder.
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), fresh); err != nil {
				return err
			}
			cur = fresh
		}
		modified, ok := cur.DeepCopyObject().(client.Object)
		if !ok {
			return fmt.Errorf("deep copy of %T is not a client.Object", cur)
		}
		change, err := p(modified)
		if err != nil {
			return err
		}
		if !change {
			changed, result = false, cur
			return nil
		}
		patch := client.MergeFromWithOptions(cur, client.MergeFromWithOptimisticLock{})
		if err := c.Patch(ctx, modified, patch); err != nil {
			reread = true
			return err
		}
		changed, result = true, modified
		return nil
	})
	if err != nil {
		return false, err
	}
	if result != obj {
		if err := copyInto(obj, result); err != nil {
			return false, err
		}
	}
	return changed, nil
}

// emptyLike returns a new zero object of obj's Go type, carrying obj's GVK
// so that unstructured objects can be read.
func emptyLike(obj client.Object) (client.Object, error) {
	t := reflect.TypeOf(obj)
	if t.Kind() != reflect.Pointer {
		return nil, fmt.Errorf("%T is not a pointer", obj)
	}
	fresh, ok := reflect.New(t.Elem()).Interface().(client.Object)
	if !ok {
		return nil, fmt.Errorf("new %T is not a client.Object", obj)
	}
	fresh.GetObjectKind().SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
	return fresh, nil
}

// copyInto overwrites *dst with *src; both must be pointers to the same type.
// src must not be used afterwards by anyone else.
func copyInto(dst, src client.Object) error {
	dv, sv := reflect.ValueOf(dst), reflect.ValueOf(src)
	if dv.Type() != sv.Type() || dv.Kind() != reflect.Pointer || dv.IsNil() || sv.IsNil() {
		return fmt.Errorf("cannot copy %T into %T", src, dst)
	}
	dv.Elem().Set(sv.Elem())
	return nil
}

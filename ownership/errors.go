package ownership

import (
	"errors"
	"fmt"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrCrossNamespace is returned (wrapped) when a namespaced owner would own
// a dependent in a different namespace. The API server accepts such a
// reference, but the garbage collector treats it as pointing at an absent
// owner and deletes the dependent, so this package refuses to write it.
var ErrCrossNamespace = errors.New("owner and dependent are in different namespaces")

// ErrClusterScopedDependent is returned (wrapped) when a namespaced owner
// would own a cluster-scoped dependent. Cluster-scoped objects may only have
// cluster-scoped owners.
var ErrClusterScopedDependent = errors.New("a cluster-scoped dependent cannot have a namespaced owner")

// ErrOwnerNotPersisted is returned (wrapped) when the owner has no name or no
// UID, which means it was never read from or created on the API server. An
// owner reference without a UID is rejected by the API server.
var ErrOwnerNotPersisted = errors.New("owner has no name or UID: use an owner read from or created on the API server")

// ErrBeingDeleted is returned (wrapped) by EnsureFinalizer when the object
// already has a deletionTimestamp: the API server forbids adding finalizers
// to an object that is being deleted. Adopt returns it when the owner is
// being deleted.
var ErrBeingDeleted = errors.New("object is being deleted")

// ErrInvalidFinalizer is returned (wrapped) when a finalizer name is empty or
// not a qualified name such as "example.com/cleanup".
var ErrInvalidFinalizer = errors.New("invalid finalizer name")

// AlreadyControlledError reports that an object already has a controller
// reference to a different owner. Only one owner reference may have
// controller=true. Callers detect it with errors.As:
//
//	var ace *ownership.AlreadyControlledError
//	if errors.As(err, &ace) { /* ace.Owner is the current controller */ }
type AlreadyControlledError struct {
	// Object is the dependent that is already controlled.
	Object client.Object
	// Owner is the existing controller reference found on Object.
	Owner metav1.OwnerReference
}

// Error implements error.
func (e *AlreadyControlledError) Error() string {
	return fmt.Sprintf("%s %s is already controlled by %s %q (uid %s)",
		kindOf(e.Object), describe(e.Object), e.Owner.Kind, e.Owner.Name, e.Owner.UID)
}

// NotControlledError is returned when an object a controller would manage
// exists without a controller reference: it may be someone else's, or
// hold the data of an earlier owner. Taking it over (adoption) must be
// asked for; report the object to the user otherwise.
type NotControlledError struct {
	// Object is the existing object.
	Object client.Object
}

// Error implements error.
func (e *NotControlledError) Error() string {
	return fmt.Sprintf("%s %s exists and has no controller: refusing to take it over; delete or rename it, or adopt it explicitly",
		kindOf(e.Object), describe(e.Object))
}

// IsConflict reports whether err (or an error it wraps) says that an
// object a controller would manage is not its own: *AlreadyControlledError
// or *NotControlledError. Retrying cannot help until a person deletes or
// renames the object; report it (a condition naming it) and look again
// now and then.
func IsConflict(err error) bool {
	var theirs *AlreadyControlledError
	var notOurs *NotControlledError
	return errors.As(err, &theirs) || errors.As(err, &notOurs)
}

// kindOf names obj's kind for messages: the GVK kind when set (unstructured
// objects, objects built with TypeMeta), else the Go type name.
func kindOf(obj client.Object) string {
	if obj == nil {
		return "<nil>"
	}
	if k := obj.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	t := reflect.TypeOf(obj)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}

// describe renders obj's namespace/name for messages.
func describe(obj client.Object) string {
	if obj == nil {
		return "<nil>"
	}
	if ns := obj.GetNamespace(); ns != "" {
		return fmt.Sprintf("%q", ns+"/"+obj.GetName())
	}
	return fmt.Sprintf("%q", obj.GetName())
}

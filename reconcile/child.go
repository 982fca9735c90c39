package reconcile

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LabelAppliedDigest is the label in which EnsureChild records a digest of
// the configuration it applied to a child. A desired object whose digest
// differs is applied even when the live object carries all its fields: that
// is how a field the caller stopped setting gets removed.
//
// It is a label, not an annotation, because some controllers copy their
// object's annotations to the objects they manage: the Deployment
// controller copies a Deployment's annotations to its ReplicaSets, so a
// digest annotation, which changes with every spec change, cost one more
// ReplicaSet write per change. Children written by an opkit version that
// used an annotation of the same name are applied once more, which removes
// the annotation.
//
// A child created with a POST (WithUncachedReader) carries the digest
// followed by a dash and a digest of which fields the POST set, until an
// update sets other fields, and a mark that those fields have been moved
// after it; read it as opaque.
const LabelAppliedDigest = "opkit.dev/applied-digest"

// ChildWrite tells what EnsureChild, DeleteChild or EvictChild did.
type ChildWrite string

// The operations of EnsureChild, DeleteChild and EvictChild.
const (
	ChildUnchanged ChildWrite = "unchanged"
	ChildCreated   ChildWrite = "created"
	ChildUpdated   ChildWrite = "updated"
	ChildDeleted   ChildWrite = "deleted"
	ChildEvicted   ChildWrite = "evicted"
)

// Children writes the children of a reconciled object: the objects it
// creates and owns by controller reference. A steady-state pass sends no
// request: EnsureChild compares the fields desired sets, and a digest
// label of what it last applied (docs/reconciler.md has the rules).
//
// Footguns: a non-pointer number or bool in desired is always compared,
// even when zero, so set those the server defaults (a Service port's
// targetPort) or the child is applied on every pass; do not strip or copy
// LabelAppliedDigest; write children as the field owner only through
// EnsureChild, and serve their kind from the cache (WithOwns).
type Children struct {
	client     client.Client
	uncached   client.Reader
	scheme     *runtime.Scheme
	fieldOwner string
	applied    appliedChildren
}

// ChildrenOption configures NewChildren.
type ChildrenOption func(*Children)

// WithUncachedReader gives EnsureChild r (the manager's GetAPIReader) to
// read what the cache cannot. Use it whenever the cache may not see every
// object of a child's kind and name: a cache restricted by label or field
// selectors (cache.Options.ByObject) cannot see an object without the
// label, and a forced server-side apply would take that object over.
//
// With it, a child the cache does not hold is created with a POST, which
// fails on an existing object; that object is then read through r and
// refused unless it is the owner's (or adoptable). Without it, creates
// are server-side applies. When the cache strips managedFields
// (cache.TransformStripManagedFields), an update reads the child through r
// (one GET) to move fields a POST set to the field owner's apply, unless
// the child's digest label shows a POST of the very fields the update sets,
// or that EnsureChild moved them already (see Children). It needs the get
// verb, and patch for that move, on the children's kinds.
func WithUncachedReader(r client.Reader) ChildrenOption {
	return func(c *Children) { c.uncached = r }
}

// WithChildrenFieldOwner sets the field manager of EnsureChild's applies
// made outside a Reconciler's pass: in a hand-written reconciler, a test,
// or a command. Within a pass EnsureChild uses the Reconciler's field owner
// (WithFieldOwner) and needs none; if both are set and differ, EnsureChild
// refuses to write (ErrFieldOwnerMismatch), since two managers would each
// own the child's fields.
func WithChildrenFieldOwner(name string) ChildrenOption {
	return func(c *Children) { c.fieldOwner = name }
}

// NewChildren returns a Children writing through c (the manager's client).
// Its applies use the field owner of the Reconciler whose pass calls it
// (see WithFieldOwner): the field owner is said once, on the Reconciler.
// Outside a pass, give one with WithChildrenFieldOwner.
//
// One Children may serve several Reconcilers: each pass applies as its own
// Reconciler's field owner.
func NewChildren(c client.Client, scheme *runtime.Scheme, opts ...ChildrenOption) (*Children, error) {
	if c == nil || scheme == nil {
		return nil, errors.New("reconcile.NewChildren: client and scheme are required")
	}
	ch := &Children{client: c, scheme: scheme}
	for _, o := range opts {
		o(ch)
	}
	if len(ch.fieldOwner) > 128 {
		return nil, fmt.Errorf("reconcile.NewChildren: WithChildrenFieldOwner(%q): the field owner must be at most 128 characters", ch.fieldOwner)
	}
	return ch, nil
}

// fieldOwner returns the field manager of an apply made with ctx.
func (c *Children) fieldOwnerFor(ctx context.Context) (string, error) {
	pass, inPass := FieldOwnerFrom(ctx)
	switch {
	case inPass && c.fieldOwner != "" && c.fieldOwner != pass:
		return "", fmt.Errorf("%w: the Children's is %q (WithChildrenFieldOwner), the Reconciler's %q (WithFieldOwner): drop WithChildrenFieldOwner",
			ErrFieldOwnerMismatch, c.fieldOwner, pass)
	case inPass:
		return pass, nil
	case c.fieldOwner != "":
		return c.fieldOwner, nil
	}
	return "", ErrNoFieldOwner
}

// ErrNoFieldOwner is returned (wrapped) by EnsureChild called outside a
// Reconciler's pass on a Children without WithChildrenFieldOwner: there is
// no field manager to apply as.
var ErrNoFieldOwner = errors.New("no field owner: call EnsureChild from a Reconciler's pass (its ctx carries the field owner) or give NewChildren WithChildrenFieldOwner")

// ErrFieldOwnerMismatch is returned (wrapped) by EnsureChild when the
// Children's own field owner differs from the Reconciler's whose pass
// calls it, and by a Reconciler's passes (not Finalize) once its cache
// showed its own status write without its field owner's managedFields
// entry (KeepManagedFieldsOf of another name): they write nothing then.
var ErrFieldOwnerMismatch = errors.New("two field owners")

// ChildWriteError is the error of a write EnsureChild, DeleteChild or
// EvictChild sent and the API server refused: Write names the write that
// failed (ChildCreated for a create, ChildUpdated for an update,
// ChildDeleted for a delete, ChildEvicted for an eviction). Reach it with errors.As; apierrors'
// predicates (IsConflict, IsForbidden, IsInvalid, ...) see through it.
type ChildWriteError struct {
	// Write is the write that failed.
	Write ChildWrite
	// Kind is the child's kind.
	Kind string
	// Key is the child's namespace and name.
	Key client.ObjectKey
	// Err is the API server's error.
	Err error
}

// Error implements error.
func (e *ChildWriteError) Error() string {
	verb := map[ChildWrite]string{ChildCreated: "creating", ChildUpdated: "updating", ChildDeleted: "deleting", ChildEvicted: "evicting"}[e.Write]
	if verb == "" {
		verb = "writing"
	}
	return fmt.Sprintf("%s %s %s: %v", verb, e.Kind, e.Key, e.Err)
}

// Unwrap returns the API server's error.
func (e *ChildWriteError) Unwrap() error { return e.Err }

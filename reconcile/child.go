package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/csaupgrade"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/opkit-dev/opkit/ownership"
	"github.com/opkit-dev/opkit/shard"
)

// AppliedDigestLabel is the label in which EnsureChild records a digest of
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
const AppliedDigestLabel = "opkit.dev/applied-digest"

// Operation tells what EnsureChild or DeleteChild did.
type Operation string

// The operations of EnsureChild and DeleteChild.
const (
	OperationNone    Operation = "unchanged"
	OperationCreated Operation = "created"
	OperationUpdated Operation = "updated"
	OperationDeleted Operation = "deleted"
)

// Children writes the children of a reconciled object: the objects it
// creates and owns by controller reference.
//
// # How it decides whether to write
//
// EnsureChild reads the child through the client (the manager's cache) and
// writes only when the live object does not already carry every field the
// desired object sets, or when the desired object differs from the one last
// applied (recorded as a digest in the AppliedDigestLabel label),
// so that a field, list item, map key or label you stop setting is removed
// at once. The comparison of fields is apimachinery's
// equality.Semantic.DeepDerivative: nil pointers, nil or empty maps and
// slices, and empty strings in the desired object mean "not mine, don't
// care", so fields the API server defaults (imagePullPolicy,
// terminationMessagePath, a Service's clusterIP, ...) never cause a write;
// maps such as labels are compared as subsets. A steady-state pass therefore
// sends no request.
//
// When a write is needed it is a server-side apply with the field owner and
// forced ownership: the server merges our fields into the live object and
// keeps everything owned by others (defaults, other controllers, kubectl
// label). Fields we set before and no longer set are removed by the server,
// because our field manager owned them.
//
// With WithUncachedReader, a child the cache does not hold is created with
// a plain POST instead (as the field owner): it costs the API server about
// half the CPU of an apply, and it fails on an existing object rather than
// merging into it. Its fields then belong to the POST's managedFields
// entry, where an apply that stops setting one would not remove it. So the
// digest label also records which fields the POST set, with their strings
// and booleans: an update that sets the same fields and changes only
// numbers outside lists (a Deployment's replicas) is one apply. Before the
// first other update, the POST's fields are moved to the field owner's
// apply entry (one JSON patch, client-go's csaupgrade), so that removal
// keeps working, also of what the server defaulted from a value the update
// changes (a RollingUpdate Deployment's rollingUpdate, refused next to
// Recreate). The label then records the move, and every later update is
// one apply.
//
// Trade-offs and footguns:
//   - A non-pointer number or bool in the desired object is always compared,
//     even when zero. Set such fields explicitly when the server defaults
//     them (for example a Service port's targetPort), or the child is
//     re-applied on every pass.
//   - The field comparison alone is a subset test: a shorter list, a map
//     without a key, or a nil pointer in the desired object would all match
//     the live object. Removals are noticed through the digest label
//     instead, which covers everything EnsureChild applied; do not strip it
//     or copy it between objects.
//   - The child type must be served from the cache: declare it with
//     WithOwns (SetupWithManager) or Owns, or every read lists from the
//     cluster.
//   - Write children as the field owner only through EnsureChild. The move
//     of a POSTed child's fields happens once, and the label then says it
//     is done: a PATCH or PUT you send later as the field owner puts its
//     fields in an update entry again, and an apply that stops setting
//     them will not remove them. Send other writes (a label, an owner
//     reference) with a field manager of their own, or none.
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
// calls it.
var ErrFieldOwnerMismatch = errors.New("two field owners for one child")

// ChildWriteError is the error of a write EnsureChild or DeleteChild sent
// and the API server refused: Operation names the write that failed
// (OperationCreated for a create, OperationUpdated for an update,
// OperationDeleted for a delete). Reach it with errors.As; apierrors'
// predicates (IsConflict, IsForbidden, IsInvalid, ...) see through it.
type ChildWriteError struct {
	// Operation is the write that failed.
	Operation Operation
	// Kind is the child's kind.
	Kind string
	// Key is the child's namespace and name.
	Key client.ObjectKey
	// Err is the API server's error.
	Err error
}

// Error implements error.
func (e *ChildWriteError) Error() string {
	verb := map[Operation]string{OperationCreated: "creating", OperationUpdated: "updating", OperationDeleted: "deleting"}[e.Operation]
	if verb == "" {
		verb = "writing"
	}
	return fmt.Sprintf("%s %s %s: %v", verb, e.Kind, e.Key, e.Err)
}

// Unwrap returns the API server's error.
func (e *ChildWriteError) Unwrap() error { return e.Err }

// ChildOption configures one EnsureChild call.
type ChildOption func(*childOptions)

type childOptions struct {
	adopt bool
	// readAs, for an unstructured desired, is the typed object the child
	// is read into, so that the cache serves it from its typed informer.
	readAs client.Object
}

// AdoptOrphan lets EnsureChild take over an existing object with the
// child's name that has no controller (it becomes the owner's child).
// Without it such an object is refused with *ownership.NotControlledError.
// Adopt only what cannot hold someone else's data: a recreated owner
// adopting the orphaned claim of an earlier one would serve that data.
func AdoptOrphan() ChildOption {
	return func(o *childOptions) { o.adopt = true }
}

// EnsureChild makes the child described by desired exist, be controlled by
// owner, and carry every field desired sets. desired must have a name (and
// the owner's namespace, if namespaced) and be of a type registered in the
// scheme. On return desired holds the live object (after a write, the
// server's response; otherwise the cached object).
//
// It refuses, with *ownership.AlreadyControlledError, to touch a child that
// another controller controls, and, with *ownership.NotControlledError, an
// existing object of that name without a controller unless the call passes
// AdoptOrphan. Either refusal writes nothing; report it (a condition
// naming the object) rather than retrying quickly.
//
// Until the cache has seen an apply, EnsureChild remembers it: a call that
// reads the version from before it, with the same desired child, sends
// nothing (and desired is set to what the apply returned).
func (c *Children) EnsureChild(ctx context.Context, owner, desired client.Object, opts ...ChildOption) (Operation, error) {
	var o childOptions
	for _, opt := range opts {
		opt(&o)
	}
	if desired.GetName() == "" {
		return OperationNone, fmt.Errorf("EnsureChild: desired %T has no metadata.name", desired)
	}
	if err := ownership.SetControllerReference(owner, desired, c.scheme); err != nil {
		return OperationNone, fmt.Errorf("EnsureChild %s: %w", desired.GetName(), err)
	}
	gvk, err := apiutil.GVKForObject(desired, c.scheme)
	if err != nil {
		return OperationNone, fmt.Errorf("EnsureChild %s: %w", desired.GetName(), err)
	}

	fieldOwner, err := c.fieldOwnerFor(ctx)
	if err != nil {
		return OperationNone, fmt.Errorf("EnsureChild %s %s: %w", gvk.Kind, desired.GetName(), err)
	}

	// The digest is of the desired object as given (cheap: no conversion);
	// the apply content is built only when a write is needed.
	digest, err := appliedDigest(desired)
	if err != nil {
		return OperationNone, err
	}

	current, err := newLike(desired)
	if err != nil {
		return OperationNone, err
	}
	op := OperationCreated
	key := client.ObjectKeyFromObject(desired)
	ck := childKey{gvk: gvk, key: key}
	var stale []string
	// postShape is what the digest label records besides the digest: the
	// shape of a POSTed child's fields, or movedMark once EnsureChild has
	// moved them to the apply (childshape.go).
	var postShape string
	get := func(r client.Reader) error {
		if o.readAs == nil {
			return r.Get(ctx, key, current)
		}
		return getAs(ctx, r, key, o.readAs, current.(*unstructured.Unstructured), gvk)
	}
	err = get(c.client)
	cached := err == nil
	if apierrors.IsNotFound(err) && c.uncached != nil {
		var created client.Object
		if o.readAs == nil && unseenCreatesFrom(ctx).unseen(ck) {
			// No event of it yet: the cache lags, and the POST's
			// response is current (unseencreates.go).
			created = c.applied.createdAs(ck, digest)
		}
		switch {
		case created != nil:
			current, err = created, nil
		case c.applied.wasCreated(ck):
			// An earlier pass created it and the cache has not seen it
			// yet: read it rather than POST it again (409).
			err = get(c.uncached)
		}
		if apierrors.IsNotFound(err) {
			// Create it with a POST, which the API server refuses for an
			// existing object instead of merging into it; an object
			// merely invisible to the cache is read below.
			created, cerr := c.create(ctx, desired, ck, digest, fieldOwner)
			if !apierrors.IsAlreadyExists(cerr) {
				return created, cerr
			}
			err = get(c.uncached)
		}
	}
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return OperationNone, fmt.Errorf("reading %s %s: %w", gvk.Kind, desired.GetName(), err)
	default:
		ctl := metav1.GetControllerOf(current)
		switch {
		case ctl != nil && ctl.UID != owner.GetUID():
			return OperationNone, &ownership.AlreadyControlledError{Object: current, Owner: *ctl}
		case ctl == nil && !o.adopt:
			return OperationNone, &ownership.NotControlledError{Object: current}
		}
		var liveDigest string
		liveDigest, postShape = parseDigestLabel(current.GetLabels()[AppliedDigestLabel])
		if ownership.IsControlledBy(current, owner) && liveDigest == digest && matches(desired, current) && ofSlot(ctx, current) {
			if cached {
				c.applied.seen(ck, current)
			}
			return OperationNone, copyInto(current, desired)
		}
		if rec, ok := c.applied.lookup(ck, current); ok {
			// The cache has not seen our last apply yet.
			if rec.digest == digest {
				return OperationNone, copyInto(rec.applied.DeepCopyObject().(client.Object), desired)
			}
			stale = rec.staleRVs
		}
		stale = append(stale, current.GetResourceVersion())
		op = OperationUpdated
	}

	u, err := applyContent(desired, gvk.GroupVersion().String(), gvk.Kind)
	if err != nil {
		return OperationNone, err
	}
	if op == OperationUpdated && postShape != movedMark {
		// A POSTed child updated with the shape it was POSTed with
		// keeps its fields in the POST's entry (childshape.go); any
		// other update moves them first, once.
		if postShape != "" {
			if shape, err := fieldsShape(u.Object); err != nil || shape != postShape {
				postShape = ""
			}
		}
		if postShape == "" {
			moved, err := c.upgradeManagedFields(ctx, current, fieldOwner)
			if err != nil {
				return OperationNone, &ChildWriteError{Operation: op, Kind: gvk.Kind, Key: key, Err: err}
			}
			if moved {
				postShape = movedMark
			}
		}
	}
	labels := u.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[AppliedDigestLabel] = digestLabel(digest, postShape)
	stampSlot(ctx, labels)
	u.SetLabels(labels)
	if err := c.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return OperationNone, &ChildWriteError{Operation: op, Kind: gvk.Kind, Key: key, Err: err}
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, desired); err != nil {
		return op, fmt.Errorf("reading applied %s %s: %w", gvk.Kind, desired.GetName(), err)
	}
	c.applied.record(ck, desired, digest, stale)
	return op, nil
}

// ofSlot says whether current carries the shard slot of the pass ctx
// is, if any: one without it is applied, and so labelled.
func ofSlot(ctx context.Context, current client.Object) bool {
	k, v, ok := shard.SlotFrom(ctx)
	return !ok || current.GetLabels()[k] == v
}

// stampSlot labels a child written in a shard member's pass with its
// slot, so that the member's cache sees the child at once.
func stampSlot(ctx context.Context, labels map[string]string) {
	if k, v, ok := shard.SlotFrom(ctx); ok {
		labels[k] = v
	}
}

// create POSTs desired, with the digest label, as fieldOwner, and on
// success makes desired the server's response. An existing object of
// that name is reported with the API server's AlreadyExists error,
// unwrapped, and nothing is written.
func (c *Children) create(ctx context.Context, desired client.Object, ck childKey, digest, fieldOwner string) (Operation, error) {
	obj, ok := desired.DeepCopyObject().(client.Object)
	if !ok {
		return OperationNone, fmt.Errorf("copying %T: not a client.Object", desired)
	}
	content, err := applyContent(desired, ck.gvk.GroupVersion().String(), ck.gvk.Kind)
	if err != nil {
		return OperationNone, err
	}
	shape, err := fieldsShape(content.Object)
	if err != nil {
		return OperationNone, err
	}
	labels := maps.Clone(obj.GetLabels())
	if labels == nil {
		labels = map[string]string{}
	}
	labels[AppliedDigestLabel] = digestLabel(digest, shape)
	stampSlot(ctx, labels)
	obj.SetLabels(labels)
	unseen := unseenCreatesFrom(ctx)
	token := unseen.begin(ck)
	if err := c.client.Create(ctx, obj, client.FieldOwner(fieldOwner)); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return OperationNone, err
		}
		return OperationNone, &ChildWriteError{Operation: OperationCreated, Kind: ck.gvk.Kind, Key: ck.key, Err: err}
	}
	unseen.created(ck, token)
	var response client.Object
	if token != 0 { // only a watched kind's create is ever trusted
		response, _ = obj.DeepCopyObject().(client.Object)
	}
	c.applied.recordCreate(ck, obj.GetUID(), digest, response)
	if err := copyInto(obj, desired); err != nil {
		return OperationCreated, err
	}
	return OperationCreated, nil
}

// upgradeManagedFields makes the fields fieldOwner set by a POST (an
// Update entry of managedFields) part of its apply entry before current is
// applied: fields owned by an update entry are kept when an apply stops
// setting them, so a field the desired child no longer sets would stay.
// It sends a JSON patch of managedFields once per child created by POST,
// before the first update whose shape differs from the POST's
// (childshape.go; client-go's csaupgrade), and reports moved: the apply
// that follows marks the child (movedMark), so that no later update
// comes here. Without an uncached reader EnsureChild never POSTs, and
// there is nothing to upgrade (moved is false). A current without
// managedFields (a cache that strips them) is read again through the
// uncached reader.
func (c *Children) upgradeManagedFields(ctx context.Context, current client.Object, fieldOwner string) (moved bool, err error) {
	if c.uncached == nil {
		return false, nil
	}
	live := current
	if len(current.GetManagedFields()) == 0 {
		fresh, err := newLike(current)
		if err != nil {
			return false, err
		}
		if err := c.uncached.Get(ctx, client.ObjectKeyFromObject(current), fresh); err != nil {
			return false, fmt.Errorf("reading managedFields: %w", err)
		}
		live = fresh
	}
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(live, sets.New(fieldOwner), fieldOwner)
	if err != nil {
		return false, err
	}
	if patch == nil {
		return true, nil
	}
	if err := c.client.Patch(ctx, live, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return false, fmt.Errorf("moving the fields of %s's create to its apply: %w", fieldOwner, err)
	}
	return true, nil
}

// DeleteChild deletes obj (identified by its name and namespace) if it exists
// and owner controls it. It reads through the cache first, so deleting a child
// that is already gone sends no request. An object controlled by another
// owner is left alone and reported with *ownership.AlreadyControlledError,
// one without a controller with *ownership.NotControlledError
// (ownership.IsConflict reports either).
func (c *Children) DeleteChild(ctx context.Context, owner, obj client.Object) (Operation, error) {
	if err := c.client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		if apierrors.IsNotFound(err) {
			return OperationNone, nil
		}
		return OperationNone, fmt.Errorf("reading %s: %w", obj.GetName(), err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return OperationNone, nil
	}
	if !ownership.IsControlledBy(obj, owner) {
		if ctl := metav1.GetControllerOf(obj); ctl != nil {
			return OperationNone, &ownership.AlreadyControlledError{Object: obj, Owner: *ctl}
		}
		return OperationNone, &ownership.NotControlledError{Object: obj}
	}
	if gvk, err := apiutil.GVKForObject(obj, c.scheme); err == nil {
		c.applied.forget(childKey{gvk: gvk, key: client.ObjectKeyFromObject(obj)})
	}
	uid := obj.GetUID()
	err := c.client.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		kind := obj.GetObjectKind().GroupVersionKind().Kind
		if gvk, gerr := apiutil.GVKForObject(obj, c.scheme); gerr == nil {
			kind = gvk.Kind
		}
		return OperationNone, &ChildWriteError{Operation: OperationDeleted, Kind: kind, Key: client.ObjectKeyFromObject(obj), Err: err}
	}
	return OperationDeleted, nil
}

// matches reports whether current carries every field desired sets.
// Metadata is compared for labels, annotations and owner references (each
// of desired's, by UID, must be on current: someone removing a second
// owner that keeps the child from the garbage collector is undone), and
// status not at all.
func matches(desired, current client.Object) bool {
	if !equality.Semantic.DeepDerivative(desired.GetLabels(), current.GetLabels()) ||
		!equality.Semantic.DeepDerivative(desired.GetAnnotations(), current.GetAnnotations()) {
		return false
	}
	for _, want := range desired.GetOwnerReferences() {
		if !slices.ContainsFunc(current.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == want.UID }) {
			return false
		}
	}
	if du, ok := desired.(*unstructured.Unstructured); ok {
		cu, ok := current.(*unstructured.Unstructured)
		if !ok {
			return false
		}
		return equality.Semantic.DeepDerivative(bodyOf(du.Object), bodyOf(cu.Object))
	}
	// Typed objects: DeepDerivative's "unset" rules (nil pointers, empty
	// strings) need the Go types. Compare every top-level field but
	// metadata and status, in place.
	dv, cv := reflect.ValueOf(desired), reflect.ValueOf(current)
	if dv.Kind() != reflect.Pointer || dv.Type() != cv.Type() || dv.Elem().Kind() != reflect.Struct {
		return false
	}
	dv, cv = dv.Elem(), cv.Elem()
	t := dv.Type()
	for i := range t.NumField() {
		switch t.Field(i).Name {
		case "TypeMeta", "ObjectMeta", "Status":
			continue
		}
		if !t.Field(i).IsExported() {
			continue
		}
		if !equality.Semantic.DeepDerivative(dv.Field(i).Interface(), cv.Field(i).Interface()) {
			return false
		}
	}
	return true
}

// newLike returns a new, empty object of obj's type.
func newLike(obj client.Object) (client.Object, error) {
	if _, ok := obj.(*unstructured.Unstructured); ok {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
		return u, nil
	}
	t := reflect.TypeOf(obj)
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("%T is not a pointer to a struct", obj)
	}
	o, ok := reflect.New(t.Elem()).Interface().(client.Object)
	if !ok {
		return nil, fmt.Errorf("%T is not a client.Object", obj)
	}
	return o, nil
}

// bodyOf returns unstructured content without metadata, status and type
// fields.
func bodyOf(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch k {
		case "metadata", "status", "apiVersion", "kind":
		default:
			out[k] = v
		}
	}
	return out
}

// applyContent converts desired into the unstructured content of an apply
// request: no status, no server-set metadata, no nulls, and no digest
// label (a desired object EnsureChild returned carries it; the caller sets
// the new one). desired is left as it was: an unstructured one is copied.
func applyContent(desired client.Object, apiVersion, kind string) (*unstructured.Unstructured, error) {
	var m map[string]any
	if u, ok := desired.(runtime.Unstructured); ok {
		// ToUnstructured would return the content itself, not a copy.
		// Its maps and lists are copied, its other values shared: a
		// hand-built content may hold Go values DeepCopyJSON refuses.
		m = prunedCopy(u.UnstructuredContent()).(map[string]any)
	} else {
		var err error
		if m, err = runtime.DefaultUnstructuredConverter.ToUnstructured(desired); err != nil {
			return nil, fmt.Errorf("converting %s: %w", desired.GetName(), err)
		}
		pruneNulls(m)
	}
	delete(m, "status")
	if meta, ok := m["metadata"].(map[string]any); ok {
		for _, k := range []string{"creationTimestamp", "resourceVersion", "uid", "generation", "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"} {
			delete(meta, k)
		}
		if labels, ok := meta["labels"].(map[string]any); ok {
			if _, tagged := labels[AppliedDigestLabel]; tagged {
				delete(labels, AppliedDigestLabel)
				if len(labels) == 0 {
					delete(meta, "labels")
				}
			}
		}
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	return u, nil
}

// appliedDigest returns a short digest of the desired object, without the
// digest label itself (encoding/json writes struct fields in order and sorts
// map keys, so equal objects give equal digests). The digest is 24 hex
// digits, a valid label value.
func appliedDigest(desired client.Object) (string, error) {
	if labels := desired.GetLabels(); labels != nil {
		if old, ok := labels[AppliedDigestLabel]; ok {
			delete(labels, AppliedDigestLabel)
			defer func() { labels[AppliedDigestLabel] = old }()
		}
	}
	b, err := json.Marshal(desired)
	if err != nil {
		return "", fmt.Errorf("hashing %s: %w", desired.GetName(), err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12]), nil
}

// prunedCopy returns v with its maps and lists copied and their null
// values left out (as pruneNulls); every other value is shared.
func prunedCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			if e != nil {
				out[k] = prunedCopy(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = prunedCopy(e)
		}
		return out
	}
	return v
}

// pruneNulls removes null values, which typed structs produce for unset
// times (creationTimestamp: null) and which apply would otherwise claim.
func pruneNulls(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if e == nil {
				delete(t, k)
				continue
			}
			pruneNulls(e)
		}
	case []any:
		for _, e := range t {
			pruneNulls(e)
		}
	}
}

// copyInto makes dst a copy of src, which must be of the same type.
func copyInto(src, dst client.Object) error {
	sv, dv := reflect.ValueOf(src), reflect.ValueOf(dst)
	if sv.Type() != dv.Type() || sv.Kind() != reflect.Pointer {
		return fmt.Errorf("copying %T into %T: types differ", src, dst)
	}
	dv.Elem().Set(sv.Elem())
	return nil
}

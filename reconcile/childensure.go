package reconcile

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/opkit-dev/opkit/internal/slotctx"
	"github.com/opkit-dev/opkit/ownership"
)

// EnsureOption configures one EnsureChild call.
type EnsureOption func(*childOptions)

type childOptions struct {
	adopt bool
	// readAs, for an unstructured desired, is the typed object the child
	// is read into, so that the cache serves it from its typed informer.
	readAs client.Object
}

// WithOrphanAdoption lets EnsureChild take over an existing object with the
// child's name that has no controller (it becomes the owner's child).
// Without it such an object is refused with *ownership.NotControlledError.
// Adopt only what cannot hold someone else's data: a recreated owner
// adopting the orphaned claim of an earlier one would serve that data.
func WithOrphanAdoption() EnsureOption {
	return func(o *childOptions) { o.adopt = true }
}

// EnsureChild makes the child described by desired exist, be controlled by
// owner, and carry every field desired sets, writing only when it does
// not (docs/reconciler.md, "How EnsureChild decides"). desired must have a
// name (and the owner's namespace, if namespaced) and be of a type
// registered in the scheme. On return desired holds the live object.
//
// It refuses, with *ownership.AlreadyControlledError, a child another
// controller controls, and, with *ownership.NotControlledError, an
// existing object of that name without a controller unless the call
// passes WithOrphanAdoption. Either refusal writes nothing: report it (a
// condition naming the object) rather than retrying quickly.
func (c *Children) EnsureChild(ctx context.Context, owner, desired client.Object, opts ...EnsureOption) (ChildWrite, error) {
	w, err := c.newChildWrite(ctx, owner, desired, opts)
	if err != nil {
		return ChildUnchanged, err
	}
	current, cached, err := w.read(ctx)
	if current == nil && err == nil && c.uncached != nil {
		// Create it with a POST, which the API server refuses for an
		// existing object instead of merging into it; an object merely
		// invisible to the cache is read below.
		op, cerr := c.create(ctx, desired, w.ck, w.digest, w.fieldOwner)
		if !apierrors.IsAlreadyExists(cerr) {
			return op, cerr
		}
		current, err = w.get(ctx, c.uncached)
	}
	if err != nil {
		return ChildUnchanged, fmt.Errorf("reading %s %s: %w", w.gvk.Kind, desired.GetName(), err)
	}
	p, err := w.decide(ctx, current, cached)
	if err != nil {
		return ChildUnchanged, err
	}
	if p.op == ChildUnchanged {
		return ChildUnchanged, copyInto(p.live, desired)
	}
	return w.apply(ctx, p)
}

// ensureCall is one EnsureChild call's child and what it compares it by.
type ensureCall struct {
	c              *Children
	owner, desired client.Object
	opts           childOptions
	gvk            schema.GroupVersionKind
	ck             childKey
	// digest is of the desired object as given (cheap: no conversion);
	// the apply content is built only when a write is needed.
	digest     string
	fieldOwner string
}

func (c *Children) newChildWrite(ctx context.Context, owner, desired client.Object, opts []EnsureOption) (*ensureCall, error) {
	w := &ensureCall{c: c, owner: owner, desired: desired}
	for _, opt := range opts {
		opt(&w.opts)
	}
	if desired.GetName() == "" {
		return nil, fmt.Errorf("reconcile.EnsureChild: desired %T has no metadata.name", desired)
	}
	if err := ownership.SetControllerReference(owner, desired, c.scheme); err != nil {
		return nil, fmt.Errorf("reconcile.EnsureChild %s: %w", desired.GetName(), err)
	}
	var err error
	if w.gvk, err = apiutil.GVKForObject(desired, c.scheme); err != nil {
		return nil, fmt.Errorf("reconcile.EnsureChild %s: %w", desired.GetName(), err)
	}
	if w.fieldOwner, err = c.fieldOwnerFor(ctx); err != nil {
		return nil, fmt.Errorf("reconcile.EnsureChild %s %s: %w", w.gvk.Kind, desired.GetName(), err)
	}
	if w.digest, err = appliedDigest(desired); err != nil {
		return nil, err
	}
	w.ck = childKey{gvk: w.gvk, key: client.ObjectKeyFromObject(desired)}
	return w, nil
}

// get reads the child through r, or nil if r has none.
func (w *ensureCall) get(ctx context.Context, r client.Reader) (client.Object, error) {
	current, err := newLike(w.desired)
	if err != nil {
		return nil, err
	}
	if w.opts.readAs == nil {
		err = r.Get(ctx, w.ck.key, current)
	} else {
		err = getAs(ctx, r, w.ck.key, w.opts.readAs, current.(*unstructured.Unstructured), w.gvk)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return current, err
}

// read reads the child from the cache, or nil if there is none. With an
// uncached reader, a child the cache has not seen since a pass created it
// is the POST's response or read from the API server.
func (w *ensureCall) read(ctx context.Context) (current client.Object, cached bool, err error) {
	current, err = w.get(ctx, w.c.client)
	if current != nil || err != nil || w.c.uncached == nil {
		return current, current != nil, err
	}
	if w.opts.readAs == nil && unseenCreatesFrom(ctx).unseen(w.ck) {
		// No event of it yet: the cache lags, and the POST's response is
		// current (childunseen.go).
		if created := w.c.applied.createdAs(w.ck, w.digest); created != nil {
			return created, false, nil
		}
	}
	if w.c.applied.wasCreated(w.ck) {
		// An earlier pass created it and the cache has not seen it yet:
		// read it rather than POST it again (409).
		current, err = w.get(ctx, w.c.uncached)
		return current, false, err
	}
	return nil, false, nil
}

// childPlan is what EnsureChild decided to write.
type childPlan struct {
	// op is ChildUnchanged when live is the desired child already.
	op   ChildWrite
	live client.Object
	// current is the child an update changes; stale the resourceVersions
	// the cache may still serve of it.
	current client.Object
	stale   []string
	// postShape is what the digest label records besides the digest: the
	// shape of a POSTed child's fields, or movedMark once EnsureChild has
	// moved them to the apply (childshape.go).
	postShape string
}

// decide says what makes current (nil: none) the desired child: nothing,
// a create, or an update. It writes nothing.
func (w *ensureCall) decide(ctx context.Context, current client.Object, cached bool) (childPlan, error) {
	if current == nil {
		return childPlan{op: ChildCreated}, nil
	}
	ctl := metav1.GetControllerOf(current)
	switch {
	case ctl != nil && ctl.UID != w.owner.GetUID():
		return childPlan{}, &ownership.AlreadyControlledError{Object: current, Owner: *ctl}
	case ctl == nil && !w.opts.adopt:
		return childPlan{}, &ownership.NotControlledError{Object: current}
	}
	liveDigest, postShape := parseDigestLabel(current.GetLabels()[LabelAppliedDigest])
	if ownership.IsControlledBy(current, w.owner) && liveDigest == w.digest && matches(w.desired, current) && ofSlot(ctx, current) {
		if cached {
			w.c.applied.seen(w.ck, current)
		}
		return childPlan{op: ChildUnchanged, live: current}, nil
	}
	var stale []string
	if rec, ok := w.c.applied.lookup(w.ck, current); ok {
		// The cache has not seen our last apply yet.
		if rec.digest == w.digest {
			return childPlan{op: ChildUnchanged, live: rec.applied.DeepCopyObject().(client.Object)}, nil
		}
		stale = rec.staleRVs
	}
	return childPlan{op: ChildUpdated, current: current, stale: append(stale, current.GetResourceVersion()), postShape: postShape}, nil
}

// apply writes p with a server-side apply and makes desired the server's
// response.
func (w *ensureCall) apply(ctx context.Context, p childPlan) (ChildWrite, error) {
	u, err := applyContent(w.desired, w.gvk.GroupVersion().String(), w.gvk.Kind)
	if err != nil {
		return ChildUnchanged, err
	}
	if p.op == ChildUpdated && p.postShape != movedMark {
		// A POSTed child updated with the shape it was POSTed with keeps
		// its fields in the POST's entry (childshape.go); any other update
		// moves them first, once.
		if p.postShape != "" {
			if shape, err := fieldsShape(u.Object); err != nil || shape != p.postShape {
				p.postShape = ""
			}
		}
		if p.postShape == "" {
			moved, err := w.c.upgradeManagedFields(ctx, p.current, w.fieldOwner)
			if err != nil {
				return ChildUnchanged, &ChildWriteError{Write: p.op, Kind: w.gvk.Kind, Key: w.ck.key, Err: err}
			}
			if moved {
				p.postShape = movedMark
			}
		}
	}
	labels := u.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelAppliedDigest] = digestLabel(w.digest, p.postShape)
	stampSlot(ctx, labels)
	u.SetLabels(labels)
	if err := w.c.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner(w.fieldOwner), client.ForceOwnership); err != nil {
		return ChildUnchanged, &ChildWriteError{Write: p.op, Kind: w.gvk.Kind, Key: w.ck.key, Err: err}
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, w.desired); err != nil {
		return p.op, fmt.Errorf("reading applied %s %s: %w", w.gvk.Kind, w.desired.GetName(), err)
	}
	w.c.applied.record(w.ck, w.desired, w.digest, p.stale)
	return p.op, nil
}

// ofSlot says whether current carries the shard slot of the pass ctx
// is, if any: one without it is applied, and so labelled.
func ofSlot(ctx context.Context, current client.Object) bool {
	k, v, ok := slotctx.From(ctx)
	return !ok || current.GetLabels()[k] == v
}

// stampSlot labels a child written in a shard member's pass with its
// slot, so that the member's cache sees the child at once.
func stampSlot(ctx context.Context, labels map[string]string) {
	if k, v, ok := slotctx.From(ctx); ok {
		labels[k] = v
	}
}

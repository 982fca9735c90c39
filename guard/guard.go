package guard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/opkit-dev/opkit/ownership"
)

const (
	// LabelGuard marks a guard: Policy reads guards by it.
	LabelGuard = "opkit.dev/guard"
	// LabelHeldBy is the label on a held child: the UID of its guard.
	LabelHeldBy = "opkit.dev/held-by"
	// AnnotationOwnerKind is the annotation on a guard naming its owner's
	// kind.group: guards of two kinds sharing a label key are told apart.
	AnnotationOwnerKind = "opkit.dev/guard-owner-kind"
	// Finalizer keeps a guard through its namespace's deletion until
	// Release. Removing it by hand lets the namespace go without the
	// owner's final work: the documented way out.
	Finalizer = "opkit.dev/guard"
)

// ErrNameTooLong is returned for an owner whose guard name would exceed
// the 253 characters of an object name.
var ErrNameTooLong = errors.New("guard name too long")

// Guard makes, reads and releases the guards of one owner kind.
type Guard struct {
	client client.Client
	owner  client.Object
	gvk    schema.GroupVersionKind
	kind   schema.GroupKind
	label  string
}

// Option configures a Guard.
type Option func(*Guard)

// WithLabel sets the label key recording a guard's owner UID. The default
// is "<owner group>/guard-of"; the guards found are those with this key.
func WithLabel(key string) Option { return func(g *Guard) { g.label = key } }

// New returns a Guard for owners of owner's type, which c's scheme must
// know. With a manager's client, select the cache's ConfigMaps by the key
// of Label (cache.Options.ByObject): otherwise it caches every ConfigMap
// of the cluster.
func New(c client.Client, owner client.Object, opts ...Option) (*Guard, error) {
	if c == nil {
		return nil, errors.New("guard.New: the client is required")
	}
	gvk, err := apiutil.GVKForObject(owner, c.Scheme())
	if err != nil {
		return nil, fmt.Errorf("guard.New: %w", err)
	}
	g := &Guard{client: c, owner: owner, gvk: gvk, kind: gvk.GroupKind(), label: gvk.Group + "/guard-of"}
	if gvk.Group == "" {
		g.label = "opkit.dev/guard-of"
	}
	for _, o := range opts {
		o(g)
	}
	if errs := validation.IsQualifiedName(g.label); len(errs) > 0 {
		return nil, fmt.Errorf("guard.New: label key %q: %v", g.label, errs)
	}
	return g, nil
}

// Label is the label key on every guard whose value is its owner's UID.
func (g *Guard) Label() string { return g.label }

// Name returns the name of owner's guard: "<owner>-guard".
func Name(owner client.Object) string { return owner.GetName() + "-guard" }

// Ensure returns owner's guard, creating it if none exists. A guard made
// before this package (no LabelGuard or Finalizer) gets them; a guard
// carries its owner's shard slot labels (package shard), so that a
// sharded cache shows it where it shows the owner. A ConfigMap
// of the guard's name that guards nothing of owner is refused with
// *ownership.NotControlledError; create no child of owner then.
func (g *Guard) Ensure(ctx context.Context, owner client.Object) (*corev1.ConfigMap, error) {
	cm, err := g.Get(ctx, owner)
	if err != nil {
		return nil, err
	}
	if cm == nil {
		if cm, err = g.create(ctx, owner); err != nil {
			return nil, err
		}
	}
	slots := slotLabels(owner)
	if cm.Labels[LabelGuard] != "true" || !hasFinalizer(cm) || !sameSlots(cm, slots) {
		patch := client.MergeFromWithOptions(cm.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if cm.Labels == nil {
			cm.Labels = map[string]string{}
		}
		cm.Labels[LabelGuard] = "true"
		for k := range cm.Labels {
			if strings.HasPrefix(k, slotLabelPrefix) {
				delete(cm.Labels, k)
			}
		}
		maps.Copy(cm.Labels, slots)
		if !hasFinalizer(cm) && cm.DeletionTimestamp == nil {
			cm.Finalizers = append(cm.Finalizers, Finalizer)
		}
		if err := g.client.Patch(ctx, cm, patch); err != nil {
			return nil, fmt.Errorf("updating the guard of %s: %w", owner.GetName(), err)
		}
	}
	if err := g.ensureMarker(ctx, owner, cm); err != nil {
		return nil, err
	}
	return cm, nil
}

func (g *Guard) create(ctx context.Context, owner client.Object) (*corev1.ConfigMap, error) {
	name := Name(owner)
	if len(name) > validation.DNS1123SubdomainMaxLength {
		return nil, fmt.Errorf("%s %s: %w; shorten the name to at most %d characters", g.kind.Kind, owner.GetName(), ErrNameTooLong, validation.DNS1123SubdomainMaxLength-len("-guard"))
	}
	labels := map[string]string{g.label: string(owner.GetUID()), LabelGuard: "true"}
	maps.Copy(labels, slotLabels(owner))
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: owner.GetNamespace(),
			Labels:      labels,
			Annotations: map[string]string{AnnotationOwnerKind: g.kind.String()},
			Finalizers:  []string{Finalizer}},
		Data: map[string]string{"README": fmt.Sprintf("This ConfigMap keeps the data of %s %s (its claims, pods and what else it holds) "+
			"until its operator has done its final work, whatever deletes it. The operator deletes this ConfigMap then. "+
			"Removing its finalizer %s by hand lets the data go first.", g.kind.Kind, owner.GetName(), Finalizer)},
	}
	if err := g.client.Create(ctx, cm); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating the guard of %s: %w (not in the cache yet; retry)", owner.GetName(), err)
		}
		return nil, fmt.Errorf("creating the guard of %s: %w", owner.GetName(), err)
	}
	return cm, nil
}

// Get returns owner's guard, or nil if there is none. A ConfigMap of the
// guard's name that is not owner's guard is refused with
// *ownership.NotControlledError.
func (g *Guard) Get(ctx context.Context, owner client.Object) (*corev1.ConfigMap, error) {
	var cm corev1.ConfigMap
	err := g.client.Get(ctx, client.ObjectKey{Namespace: owner.GetNamespace(), Name: Name(owner)}, &cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the guard of %s: %w", owner.GetName(), err)
	}
	if !g.guards(&cm, owner) {
		return nil, &ownership.NotControlledError{Object: &cm}
	}
	return &cm, nil
}

// guards reports whether cm is owner's guard.
func (g *Guard) guards(cm *corev1.ConfigMap, owner client.Object) bool {
	return cm.Labels[g.label] == string(owner.GetUID()) && g.ofKind(cm)
}

// ofKind reports whether cm guards owners of g's kind; a guard made before
// AnnotationOwnerKind is taken by its label key alone.
func (g *Guard) ofKind(cm *corev1.ConfigMap) bool {
	k, ok := cm.Annotations[AnnotationOwnerKind]
	return !ok || k == g.kind.String()
}

// Release deletes owner's guard, if it has one: the garbage collector then
// deletes the held children whose other owners are gone or going, unless
// the owner was deleted with orphan propagation (kubectl delete
// --cascade=orphan): then they stay, without the guard. Call it last in
// Finalize. A ConfigMap of the guard's name that is not owner's guard is
// left alone.
func (g *Guard) Release(ctx context.Context, owner client.Object) error {
	cm, err := g.Get(ctx, owner)
	if ownership.IsConflict(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if cm == nil {
		// The cache may not show the guard yet: dropping the marker of a
		// guard that is there would have it released as after any
		// deletion, its children with it.
		if cm, err = g.readGuard(ctx, owner.GetNamespace(), Name(owner), owner.GetUID()); err != nil {
			return err
		}
	}
	_, err = g.releaseAs(ctx, cm, owner.GetNamespace(), Name(owner), owner.GetUID(), owner.GetFinalizers())
	return err
}

// releaseAs releases guard cm (nil: gone already), named guard in ns, of
// the owner of UID uid and finalizers, as the owner was deleted (with
// orphan propagation after an orphan deletion), then deletes the owner's
// marker. It reports whether the children were orphaned.
func (g *Guard) releaseAs(ctx context.Context, cm *corev1.ConfigMap, ns, guard string, uid types.UID, finalizers []string) (bool, error) {
	orphan, marker, err := g.orphaned(ctx, ns, guard, uid, finalizers)
	if err != nil {
		return false, err
	}
	if cm != nil {
		if err := g.release(ctx, cm, orphan); err != nil {
			return false, err
		}
	}
	return orphan, g.dropMarker(ctx, marker)
}

// release deletes guard cm, leaving its children to their other owners
// if orphan.
func (g *Guard) release(ctx context.Context, cm *corev1.ConfigMap, orphan bool) error {
	// The finalizer first: a delete first would change the resourceVersion
	// the finalizer patch is locked on.
	if _, err := ownership.RemoveFinalizer(ctx, g.client, cm, Finalizer); err != nil {
		return fmt.Errorf("releasing guard %s: %w", cm.Name, err)
	}
	uid := cm.UID
	policy := metav1.DeletePropagationBackground
	if orphan {
		policy = metav1.DeletePropagationOrphan
	}
	err := g.client.Delete(ctx, cm, client.Preconditions{UID: &uid}, client.PropagationPolicy(policy))
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting guard %s: %w", cm.Name, err)
	}
	return nil
}

func hasFinalizer(cm *corev1.ConfigMap) bool { return slices.Contains(cm.Finalizers, Finalizer) }

// slotLabelPrefix begins the label keys package shard puts on an object to
// name its slot (Ring.SlotLabel). A guard carries its owner's, so that
// under sharding the replica holding the owner caches its guard too; a
// test keeps the prefix shard's.
const slotLabelPrefix = "slot.shard.opkit.dev/"

// slotLabels are owner's slot labels.
func slotLabels(owner client.Object) map[string]string {
	out := map[string]string{}
	for k, v := range owner.GetLabels() {
		if strings.HasPrefix(k, slotLabelPrefix) {
			out[k] = v
		}
	}
	return out
}

// sameSlots reports whether cm carries exactly slots' slot labels.
func sameSlots(cm *corev1.ConfigMap, slots map[string]string) bool {
	n := 0
	for k, v := range cm.Labels {
		if strings.HasPrefix(k, slotLabelPrefix) {
			if slots[k] != v {
				return false
			}
			n++
		}
	}
	return n == len(slots)
}

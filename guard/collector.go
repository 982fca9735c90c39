package guard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Collector releases guards whose owner is gone without its finalizer
// having run (removed by hand while the operator was down, say): such a
// guard would hold the children, and a namespace being deleted, for good.
// A guard whose owner exists, deleting or not, is left to the owner's
// finalizer.
type Collector struct {
	guard     *Guard
	apiReader client.Reader
}

// NewCollector returns a Collector of g's guards. apiReader (the manager's
// GetAPIReader) reads owners uncached: an owner created a moment ago must
// not pass for gone.
func NewCollector(g *Guard, apiReader client.Reader) (*Collector, error) {
	if g == nil || apiReader == nil {
		return nil, errors.New("guard.NewCollector: the guard and the API reader are required")
	}
	return &Collector{guard: g, apiReader: apiReader}, nil
}

// Reconcile releases the guard named by req if its owner is gone (not
// found, or found with another UID: a new owner of the same name), and
// deletes a cascade marker (AnnotationMarker) left by a gone owner once
// its guard is released.
func (c *Collector) Reconcile(ctx context.Context, req crreconcile.Request) (crreconcile.Result, error) {
	var cm corev1.ConfigMap
	if err := c.guard.client.Get(ctx, req.NamespacedName, &cm); err != nil {
		return crreconcile.Result{}, client.IgnoreNotFound(err)
	}
	uid, ok := cm.Labels[c.guard.label]
	isMarker := strings.HasSuffix(cm.Name, "-guard-cascade")
	guardName := strings.TrimSuffix(cm.Name, "-cascade")
	if !ok || !c.guard.ofKind(&cm) || !strings.HasSuffix(guardName, "-guard") {
		return crreconcile.Result{}, nil
	}
	owner := &metav1.PartialObjectMetadata{}
	owner.SetGroupVersionKind(c.guard.gvk)
	err := c.apiReader.Get(ctx, types.NamespacedName{Namespace: cm.Namespace, Name: strings.TrimSuffix(guardName, "-guard")}, owner)
	switch {
	case err == nil && string(owner.UID) == uid:
		return crreconcile.Result{}, nil
	case err != nil && !apierrors.IsNotFound(err):
		return crreconcile.Result{}, fmt.Errorf("reading the owner of %s: %w", cm.Name, err)
	}
	if isMarker {
		return c.dropMarker(ctx, &cm, guardName, uid)
	}
	orphan, err := c.guard.releaseAs(ctx, &cm, cm.Namespace, cm.Name, types.UID(uid), nil)
	if err != nil {
		return crreconcile.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("released the guard of a deleted owner", "guard", cm.Name, "kind", c.guard.kind.String(),
		"ownerUID", uid, "childrenOrphaned", orphan)
	return crreconcile.Result{}, nil
}

// dropMarker deletes marker, whose owner of UID uid is gone, once the
// guard named guardName of that owner is: the guard's release reads it.
func (c *Collector) dropMarker(ctx context.Context, marker *corev1.ConfigMap, guardName, uid string) (crreconcile.Result, error) {
	var cm corev1.ConfigMap
	err := c.guard.client.Get(ctx, types.NamespacedName{Namespace: marker.Namespace, Name: guardName}, &cm)
	if client.IgnoreNotFound(err) != nil {
		return crreconcile.Result{}, fmt.Errorf("reading guard %s: %w", guardName, err)
	}
	if err == nil && cm.Labels[c.guard.label] == uid {
		return crreconcile.Result{RequeueAfter: 10 * time.Second}, nil
	}
	return crreconcile.Result{}, c.guard.dropMarker(ctx, marker)
}

// SetupWithManager runs the collector in mgr: on every guard of g's label
// when it starts, and on an owner's guard when the owner is deleted.
func (c *Collector) SetupWithManager(mgr ctrl.Manager) error {
	label := c.guard.label
	isGuard := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := o.GetLabels()[label]
		return ok
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(strings.ToLower(c.guard.kind.Kind)+"-guard").
		For(&corev1.ConfigMap{}, builder.WithPredicates(isGuard)).
		Watches(c.guard.owner.DeepCopyObject().(client.Object), guardOfOwner(), builder.WithPredicates(deletions())).
		Complete(c)
}

func guardOfOwner() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []crreconcile.Request {
		return []crreconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: Name(o)}}}
	})
}

func deletions() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
	}
}

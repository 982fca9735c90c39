package reconcile

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Lazy is a Reconciler built on first use, for a reconciler type that must
// keep working as a plain struct literal: a kubebuilder-scaffolded
// reconciler, whose own tests build it as
//
//	&MemcachedReconciler{Client: k8sClient, Scheme: k8sClient.Scheme()}
//
// and call its Reconcile method. Add a Lazy field and make Reconcile one
// line:
//
//	type MemcachedReconciler struct {
//		client.Client
//		Scheme *runtime.Scheme
//		opkit  reconcile.Lazy[*cachev1alpha1.Memcached]
//	}
//
//	func (r *MemcachedReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
//		return r.opkit.Reconcile(ctx, req, r.Client, r.Scheme, &memcachedHooks{client: r.Client})
//	}
//
// The zero value is ready to use. It must not be copied after first use
// (it holds a sync.Once), so keep the reconciler a pointer, as the scaffold
// does.
//
// Footguns:
//   - The Reconciler is built with New from the arguments of the first call;
//     later calls' arguments are ignored, so pass the same ones every time.
//   - Built this way the Reconciler has no event recorder unless opts has
//     WithEventRecorder, and the controller watching the kind is the
//     scaffold's: add builder.WithPredicates(reconcile.DefaultPredicate()) to
//     its For, or every status write of the Reconciler costs one more
//     (writeless) pass.
//   - If New fails (invalid options, a type not in the scheme), every call
//     returns that error.
type Lazy[T Object] struct {
	once sync.Once
	r    *Reconciler[T]
	err  error
}

// Reconcile builds the Reconciler with New(c, scheme, hooks, opts...) on the
// first call and runs one pass for req.
func (l *Lazy[T]) Reconcile(ctx context.Context, req crreconcile.Request, c client.Client, scheme *runtime.Scheme, hooks Hooks[T], opts ...Option) (ctrl.Result, error) {
	r, err := l.Get(c, scheme, hooks, opts...)
	if err != nil {
		return ctrl.Result{}, err
	}
	return r.Reconcile(ctx, req)
}

// Get returns the Reconciler, building it with New(c, scheme, hooks,
// opts...) on the first call.
func (l *Lazy[T]) Get(c client.Client, scheme *runtime.Scheme, hooks Hooks[T], opts ...Option) (*Reconciler[T], error) {
	l.once.Do(func() { l.r, l.err = New(c, scheme, hooks, opts...) })
	return l.r, l.err
}

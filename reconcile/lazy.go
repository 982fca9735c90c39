package reconcile

import (
	"context"
	"sync"

	ctrl "sigs.k8s.io/controller-runtime"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Lazy is a Reconciler built on first use, for a reconciler type that must
// keep working as a plain struct literal: a kubebuilder-scaffolded
// reconciler, whose own tests build it as
//
//	&MemcachedReconciler{Client: k8sClient, Scheme: k8sClient.Scheme()}
//
// and call its Reconcile method. Add a Lazy field, keep the struct and its
// Reconcile method, and make Reconcile one line:
//
//	type MemcachedReconciler struct {
//		client.Client
//		Scheme *runtime.Scheme
//		opkit  reconcile.Lazy[*cachev1alpha1.Memcached]
//	}
//
//	func (r *MemcachedReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
//		return r.opkit.Reconcile(ctx, req, r.newReconciler)
//	}
//
// where newReconciler builds the Reconciler with New from the struct's
// fields. docs/kubebuilder.md ports a scaffolded project this way.
//
// The zero value is ready to use. It must not be copied after first use
// (it holds a sync.Once), so keep the reconciler a pointer, as the scaffold
// does.
//
// Footguns:
//   - build runs once, on the first call, with the struct's fields as they
//     are then; a build error is returned by that call and every later one.
//   - A Reconciler from New has no event recorder unless build passes
//     WithEventRecorder, and the controller that calls Reconcile is the
//     scaffold's own builder: give its For
//     builder.WithPredicates(reconcile.DefaultPredicate()), or every status
//     write of the Reconciler costs one more (writeless) pass.
type Lazy[T Object] struct {
	once sync.Once
	r    *Reconciler[T]
	err  error
}

// Reconcile runs one pass for req with the Reconciler build returns,
// calling build on the first call only.
func (l *Lazy[T]) Reconcile(ctx context.Context, req crreconcile.Request, build func() (*Reconciler[T], error)) (ctrl.Result, error) {
	r, err := l.Get(build)
	if err != nil {
		return ctrl.Result{}, err
	}
	return r.Reconcile(ctx, req)
}

// Get returns the Reconciler, calling build on the first call only.
func (l *Lazy[T]) Get(build func() (*Reconciler[T], error)) (*Reconciler[T], error) {
	l.once.Do(func() { l.r, l.err = build() })
	return l.r, l.err
}

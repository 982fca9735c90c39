package reconcile

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/ownership"
	"github.com/opkit-dev/opkit/statusutil"
)

// Object is what a Reconciler manages: a Kubernetes object whose status has
// conditions and an observedGeneration. A CRD type satisfies it with four
// one-line methods (see the package example).
//
// Footgun: default status.observedGeneration to -1 in the CRD (the marker
// +kubebuilder:default={"observedGeneration":-1} on the Status field, as
// Flux's kinds do). Without it, an object no pass has written yet has
// neither conditions nor observedGeneration, which kstatus (Flux and kpt
// health checks, kubectl-style waits) reads as Current: a health check
// passes before the operator has seen the object.
type Object interface {
	client.Object
	statusutil.Setter
	statusutil.ObservedGenerationSetter
}

// Hooks is the domain logic of one kind. Reconcile drives the world toward
// obj's spec and records what it saw in obj's status, in memory only: the
// Reconciler writes the status afterwards, once, and only if it changed.
//
// Reconcile must not write obj itself (no Update, Patch or Status().Update of
// obj): such a write races the Reconciler's own and wastes a request. Writing
// children is what it is for.
type Hooks[T Object] interface {
	Reconcile(ctx context.Context, obj T) Result
}

// Finalizer is implemented by Hooks that must clean up before their object is
// deleted. When the hooks implement it, the Reconciler adds its finalizer to
// every live object and calls Finalize once the object is being deleted; the
// finalizer is removed when Finalize returns Done. Any other result keeps
// it, RequeueAfter included: Finalize is called again after the delay.
//
// Finalize must be idempotent: after a failure, or a crash after it succeeded
// but before the finalizer was removed, it runs again. Children that carry a
// controller reference are deleted by the garbage collector and need no
// Finalize; use it for things outside the cluster or not owned by reference.
type Finalizer[T Object] interface {
	Finalize(ctx context.Context, obj T) Result
}

// Defaulter is implemented by Hooks that fill in defaults before Validate and
// Reconcile. In a pass, defaults go to the in-memory copy only, never to the
// stored spec; served by package webhook, the same method defaults objects
// at admission (creates and spec changes), where they are stored. Its shape is controller-runtime's
// admission.Defaulter[T], so one type serves both. An error fails the pass
// with Retry.
type Defaulter[T Object] interface {
	Default(ctx context.Context, obj T) error
}

// Validator is implemented by Hooks with semantic checks that the CRD schema
// and CEL rules cannot express. A non-empty list stalls the object:
// Stalled=True with reason InvalidSpec and a message naming each field, no
// retries, and Reconcile is not called. The next spec change is validated
// afresh. Package webhook runs it at admission too, on create and on every
// update that changes more than metadata.
type Validator[T Object] interface {
	Validate(ctx context.Context, obj T) field.ErrorList
}

// AdmissionValidator is implemented by Hooks with checks only admission
// runs, on create (old is nil) and on each spec update: rules on a change
// (an immutable field, an allowed transition; only admission sees the old
// object), and fields a pass sets aside rather than stall on. Package
// webhook calls it; a pass does not.
type AdmissionValidator[T Object] interface {
	ValidateAdmission(ctx context.Context, old, obj T) field.ErrorList
}

// Warner is implemented by Hooks that warn at admission about a spec that
// is valid but unwise (a deprecated field). old is nil on create. The
// warnings reach the user's kubectl; a pass does not call it.
type Warner[T Object] interface {
	Warnings(ctx context.Context, old, obj T) []string
}

// Condition reasons set by the Reconciler.
const (
	ReasonInvalidSpec     = "InvalidSpec"
	ReasonReconcileFailed = "ReconcileFailed"
	ReasonRetrying        = "RetryingAfterError"
	ReasonFinalizing      = "Finalizing"
)

// Reconciler runs the whole lifecycle of one kind: fetch, deletion and
// finalizer flow, the author's hooks, conditions derived from the outcome, and
// a single status write per pass. It implements controller-runtime's
// reconcile.Reconciler; build one with New or SetupWithManager.
type Reconciler[T Object] struct {
	client   client.Client
	hooks    Hooks[T]
	gvk      schema.GroupVersionKind
	newObj   func() T
	opts     options
	recorder events.EventRecorder
	// namespaces reads namespaces (WithNamespaceDeletion), or is nil.
	namespaces client.Reader
	metrics    *metrics
	writes     ownWrites
	progress   progressDeferrals
	// cache, set by SetupWithManager, shows whether the informer already
	// holds a write when the pass records it (see recordWrites).
	cache client.Reader
	pass  *pass
}

var _ crreconcile.Reconciler = &Reconciler[Object]{}

// New returns a Reconciler for T, the pointer type of a registered kind (e.g.
// *v1alpha1.Memcached). c should be the manager's client: reads come from its
// cache, so a steady-state pass sends no request at all.
func New[T Object](c client.Client, scheme *runtime.Scheme, hooks Hooks[T], opts ...Option) (*Reconciler[T], error) {
	return build(c, scheme, hooks, nil, func(o *options) error {
		for _, opt := range opts {
			opt.applyToReconciler(o)
		}
		return nil
	})
}

// build is New with a source of the default event recorder, called with the
// controller name once the options are resolved, and a configure func that
// applies the caller's options to the defaults.
func build[T Object](c client.Client, scheme *runtime.Scheme, hooks Hooks[T], defaultRecorder func(name string) events.EventRecorder, configure func(*options) error) (*Reconciler[T], error) {
	if c == nil || scheme == nil || hooks == nil {
		return nil, errors.New("reconcile.New: client, scheme and hooks are required")
	}
	newObj, err := constructor[T]()
	if err != nil {
		return nil, err
	}
	if err := checkCapabilities(hooks); err != nil {
		return nil, err
	}
	gvk, err := apiutil.GVKForObject(newObj(), scheme)
	if err != nil {
		return nil, fmt.Errorf("reconcile.New: %w (register the type with the scheme)", err)
	}
	o := defaultOptions(gvk)
	if err := configure(&o); err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	m, err := metricsFor(o.name)
	if err != nil {
		return nil, err
	}
	var rec events.EventRecorder = discardRecorder{}
	switch {
	case o.recorder != nil:
		rec = o.recorder
	case defaultRecorder != nil:
		rec = defaultRecorder(o.name)
	}
	r := &Reconciler[T]{client: c, hooks: hooks, gvk: gvk, newObj: newObj, opts: o, recorder: rec, metrics: m, pass: &pass{fieldOwner: o.fieldOwner},
		writes: ownWrites{owner: o.fieldOwner}}
	if o.namespaceDeletion {
		r.namespaces = c
		r.recorder = DropEventsInGoingNamespaces(rec, c)
	}
	return r, nil
}

// constructor returns a func allocating a new T, which must be a pointer to a
// struct (the usual *MyKind).
func constructor[T Object]() (func() T, error) {
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("reconcile.New: type parameter %v must be a pointer to a struct, such as *v1.MyKind", t)
	}
	elem := t.Elem()
	return func() T { return reflect.New(elem).Interface().(T) }, nil
}

// Name returns the controller name used for metrics and events.
func (r *Reconciler[T]) Name() string { return r.opts.name }

// FieldOwner returns the server-side-apply field manager of the
// Reconciler's writes (WithFieldOwner, default "opkit-<kind>"). During a
// pass, FieldOwnerFrom(ctx) returns the same, and Children applies as it.
func (r *Reconciler[T]) FieldOwner() string { return r.opts.fieldOwner }

// FinalizerName returns the finalizer the Reconciler adds when the hooks
// implement Finalizer.
func (r *Reconciler[T]) FinalizerName() string { return r.opts.finalizer }

// Reconcile runs one pass for the object named by req. It implements
// controller-runtime's reconcile.Reconciler.
func (r *Reconciler[T]) Reconcile(ctx context.Context, req crreconcile.Request) (ctrl.Result, error) {
	ctx = withPass(ctx, r.pass)
	obj := r.newObj()
	if err := r.client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			// Deleted and finalized: nothing left to do, and nothing wrong.
			r.writes.forget(req.NamespacedName)
			r.progress.forget(req.NamespacedName)
			r.metrics.outcome("not_found")
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting %s %s: %w", r.gvk.Kind, req.NamespacedName, err)
	}
	// Versions this pass's writes supersede, for read-your-writes.
	readRV := obj.GetResourceVersion()
	stale := append(r.writes.overlay(req.NamespacedName, obj, r.opts.finalizer), readRV)
	before := obj.DeepCopyObject().(T)

	going, err := r.namespaceGoing(ctx, obj)
	if err != nil {
		return ctrl.Result{}, err
	}
	if going || !obj.GetDeletionTimestamp().IsZero() {
		ctx = context.WithValue(ctx, namespaceGoingKey{}, going)
		res, err := r.finalize(ctx, before, obj)
		r.recordWrites(ctx, req.NamespacedName, obj, readRV, stale)
		return res, err
	}
	// Not in Finalize: conditions dropped from a deleting object harm no
	// one, and its deletion must not wait for the operator's fix.
	if m := r.writes.strippedOwner(); m != "" {
		return ctrl.Result{}, fmt.Errorf("%w: the cache keeps no managedFields entry of %q, the Reconciler's (WithFieldOwner), in what its own status write left; "+
			"a status write would drop the conditions it owns: give KeepManagedFieldsOf the Reconciler's field owner, or drop the transform", ErrFieldOwnerMismatch, m)
	}
	if IsPaused(obj) {
		return ctrl.Result{}, r.pause(ctx, req.NamespacedName, before, obj, readRV, stale)
	}

	if _, ok := r.hooks.(Finalizer[T]); ok {
		readVersion := obj.GetResourceVersion()
		_, err := ownership.EnsureFinalizer(ctx, r.client, obj, r.opts.finalizer)
		if err != nil {
			switch {
			case apierrors.IsNotFound(err):
				r.metrics.outcome("not_found")
				return ctrl.Result{}, nil
			case errors.Is(err, ownership.ErrBeingDeleted):
				// Deleted since we read it; the deletion event brings us back.
				return ctrl.Result{}, nil
			}
			return ctrl.Result{}, fmt.Errorf("adding finalizer %s: %w", r.opts.finalizer, err)
		}
		if obj.GetResourceVersion() != readVersion {
			// obj is the server's copy now, re-read on a conflict (with
			// the finalizer there already or not): what others wrote
			// meanwhile is where the pass starts, not a change of its own
			// to apply.
			before = obj.DeepCopyObject().(T)
		}
		stale = append(stale, obj.GetResourceVersion())
	}

	resumed := statusutil.Remove(obj, ConditionPaused)
	res := r.run(ctx, obj)
	r.setConditions(obj, res)
	if after, ok := r.deferProgress(req.NamespacedName, before, obj, res); ok {
		// Nothing to tell readers yet: observedGeneration is behind, so
		// they see the object in progress. No events either.
		r.metrics.statusWrite("deferred")
		r.metrics.outcome(res.kind.String())
		// Remember only what was written (a finalizer, perhaps), not the
		// deferred status: a pass on a stale read must see the real one.
		copyStatus(before, obj)
		r.recordWrites(ctx, req.NamespacedName, obj, readRV, stale)
		return ctrl.Result{RequeueAfter: after}, nil
	}
	if resumed {
		r.recorder.Eventf(obj, nil, "Normal", EventResumed, "Pause", "annotation %s removed: reconciling again", AnnotationPaused)
	}
	out, err := r.finish(ctx, before, obj, res)
	r.recordWrites(ctx, req.NamespacedName, obj, readRV, stale)
	return out, err
}

// run calls the author's hooks: Default, Validate, Reconcile.
func (r *Reconciler[T]) run(ctx context.Context, obj T) Result {
	if d, ok := r.hooks.(Defaulter[T]); ok {
		if err := d.Default(ctx, obj); err != nil {
			return Retry(fmt.Errorf("defaulting: %w", err))
		}
	}
	if v, ok := r.hooks.(Validator[T]); ok {
		if errs := v.Validate(ctx, obj); len(errs) > 0 {
			return Result{kind: OutcomeTerminal, reason: ReasonInvalidSpec, err: errs.ToAggregate(), invalid: true}
		}
	}
	return r.hooks.Reconcile(ctx, obj)
}

// finalize runs the deletion flow: Finalize while our finalizer is present,
// then remove it.
func (r *Reconciler[T]) finalize(ctx context.Context, before, obj T) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(obj, r.opts.finalizer) {
		// Not ours to hold up (or already released): the API server and the
		// garbage collector finish the deletion.
		return ctrl.Result{}, nil
	}
	// Deletion is not paused.
	statusutil.Remove(obj, ConditionPaused)
	res := Done()
	if f, ok := r.hooks.(Finalizer[T]); ok {
		res = f.Finalize(ctx, obj)
	}
	if res.kind != OutcomeDone {
		// Say why deletion is held up, once, then retry or wait. A
		// RequeueAfter is work still under way (an operation's poll merged
		// with RequeueBy): nothing would look again once the finalizer went.
		r.setFinalizingConditions(obj, res)
		return r.finish(ctx, before, obj, res)
	}
	if _, err := ownership.RemoveFinalizer(ctx, r.client, obj, r.opts.finalizer); err != nil {
		if apierrors.IsNotFound(err) {
			r.metrics.outcome("finalized")
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("removing finalizer %s: %w", r.opts.finalizer, err)
	}
	r.metrics.outcome("finalized")
	return ctrl.Result{}, nil
}

// setConditions derives Ready, Reconciling and Stalled from the outcome of a
// normal pass, and observedGeneration when the pass acted on this
// generation.
func (r *Reconciler[T]) setConditions(obj T, res Result) {
	switch res.kind {
	case OutcomeDone, OutcomeRequeueAfter:
		statusutil.ClearReconciling(obj)
		statusutil.ClearStalled(obj)
	case OutcomeWaiting:
		statusutil.MarkReconciling(obj, res.reason, res.message)
	case OutcomeRetry:
		statusutil.MarkReconciling(obj, ReasonRetrying, res.Message())
	case OutcomeTerminal:
		statusutil.MarkStalled(obj, res.reason, res.Message())
	}
	if res.kind == OutcomeRetry {
		// The error is the most useful thing Ready can say. Set directly,
		// not over the summary: Ready passing through Unknown would move
		// its lastTransitionTime, and so write the status, on every retry.
		statusutil.MarkFalse(obj, statusutil.ConditionReady, ReasonReconcileFailed, res.Message())
	} else {
		statusutil.SetSummary(obj, r.opts.summary...)
		// The pass acted on this generation; a retry has not, yet.
		statusutil.SetObservedGeneration(obj)
	}
}

// setFinalizingConditions reports why deletion is held up.
func (r *Reconciler[T]) setFinalizingConditions(obj T, res Result) {
	switch res.kind {
	case OutcomeTerminal:
		statusutil.MarkStalled(obj, res.reason, res.Message())
	case OutcomeWaiting:
		statusutil.MarkReconciling(obj, res.reason, res.message)
	default:
		statusutil.MarkReconciling(obj, ReasonFinalizing, finalizingMessage(res))
	}
	statusutil.MarkFalse(obj, statusutil.ConditionReady, ReasonFinalizing,
		"deletion is waiting for cleanup: "+finalizingMessage(res))
}

// finalizingMessage says why res holds the deletion up. A RequeueAfter's
// delay is left out: merged from a schedule it differs on every pass, and
// the status would be written each time.
func finalizingMessage(res Result) string {
	if res.kind == OutcomeRequeueAfter {
		return "cleanup under way; Finalize looks again later"
	}
	return res.Message()
}

// finish writes the status, records events and metrics, and converts the
// outcome for controller-runtime.
func (r *Reconciler[T]) finish(ctx context.Context, before, obj T, res Result) (ctrl.Result, error) {
	if err := r.writeStatusCounted(ctx, before, obj); err != nil {
		return ctrl.Result{}, err
	}
	r.recordEvents(before, obj, res)
	outcome := res.kind.String()
	if res.invalid {
		outcome = "invalid"
	}
	r.metrics.outcome(outcome)

	switch res.kind {
	case OutcomeRequeueAfter, OutcomeWaiting:
		return ctrl.Result{RequeueAfter: res.after}, nil
	case OutcomeRetry:
		return ctrl.Result{}, res.err
	case OutcomeTerminal:
		if res.after > 0 {
			// Stalled, but looked at again (RecheckAfter): controller-
			// runtime drops a requeue returned with an error, and the
			// failure is in status and an event already.
			return ctrl.Result{RequeueAfter: res.after}, nil
		}
		if res.invalid {
			// A user error, surfaced in status and an event: not a
			// controller error to log on every change.
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, crreconcile.TerminalError(res.err)
	}
	return ctrl.Result{}, nil
}

// writeStatusCounted is writeStatus with its outcome counted in
// MetricStatusWrites.
func (r *Reconciler[T]) writeStatusCounted(ctx context.Context, before, obj T) error {
	written, err := r.writeStatus(ctx, before, obj)
	switch {
	case err != nil:
		r.metrics.statusWrite("failed")
		return err
	case written:
		r.metrics.statusWrite("written")
	default:
		r.metrics.statusWrite("skipped")
	}
	return nil
}

// recordEvents emits events for transitions of Ready and Stalled, and for a
// failure whose message differs from the last one, so that a steady state or
// a repeated error does not produce an event per pass. Becoming Ready (for
// the first time, or again) is a transition and gets a Normal event, unless
// WithReadyEvents(ReadyEventsOnRecovery) keeps it for recoveries only.
func (r *Reconciler[T]) recordEvents(before, after T, res Result) {
	const action = "Reconcile"
	oldReady, newReady := statusutil.Get(before, statusutil.ConditionReady), statusutil.Get(after, statusutil.ConditionReady)
	oldStalled := statusutil.IsTrue(before, statusutil.ConditionStalled)
	switch {
	case res.kind == OutcomeTerminal && (!oldStalled || conditionMessage(oldReady) != res.Message()):
		r.recorder.Eventf(after, nil, "Warning", res.reason, action, "%s", res.Message())
	case res.kind == OutcomeRetry && conditionMessage(oldReady) != res.Message():
		r.recorder.Eventf(after, nil, "Warning", ReasonReconcileFailed, action, "%s", res.Message())
	case newReady != nil && newReady.Status == metav1.ConditionTrue && (oldReady == nil || oldReady.Status != metav1.ConditionTrue):
		recovered := oldReady != nil && oldReady.Status == metav1.ConditionFalse
		if recovered || r.opts.readyEvents == ReadyEventsAlways {
			r.recorder.Eventf(after, nil, "Normal", "Ready", action, "%s", readyNote(newReady))
		}
	case newReady != nil && newReady.Status == metav1.ConditionFalse && oldReady != nil && oldReady.Status == metav1.ConditionTrue:
		r.recorder.Eventf(after, nil, "Warning", newReady.Reason, action, "%s", readyNote(newReady))
	}
}

func conditionMessage(c *metav1.Condition) string {
	if c == nil {
		return ""
	}
	return c.Message
}

func readyNote(c *metav1.Condition) string {
	if c.Message != "" {
		return c.Message
	}
	return "Ready is " + string(c.Status) + ": " + c.Reason
}

// discardRecorder drops events; used when no recorder is configured.
type discardRecorder struct{}

func (discardRecorder) Eventf(runtime.Object, runtime.Object, string, string, string, string, ...any) {
}

// recordWrites records the pass's writes, then settles the record
// against the cache: the informer stores an object before it calls the
// handlers, so an event that beat the record shows here, and one after it
// finds the record (writesSeen).
func (r *Reconciler[T]) recordWrites(ctx context.Context, key types.NamespacedName, obj T, readRV string, stale []string) {
	r.writes.record(key, obj, readRV, stale)
	r.settle(ctx, key)
}

// settle drops what the Reconciler keeps of key once the informer's
// store, which only moves forward, makes it moot: the write record once
// the store holds the writes; it and a deferred status write once the
// store holds no such object (a deletion, or a move to another shard,
// which reaches no pass that would forget them).
func (r *Reconciler[T]) settle(ctx context.Context, key types.NamespacedName) {
	if r.cache == nil || !r.writes.has(key) && !r.progress.has(key) {
		return
	}
	cur := r.newObj()
	err := r.cache.Get(ctx, key, cur, &client.GetOptions{UnsafeDisableDeepCopy: ptr.To(true)})
	switch {
	case err == nil:
		r.writes.seen(key, cur)
	case apierrors.IsNotFound(err):
		r.writes.forget(key)
		r.progress.forget(key)
	}
}

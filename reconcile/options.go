package reconcile

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/opkit-dev/opkit/statusutil"
)

// Option configures a Reconciler. Every Option is accepted by New and by
// SetupWithManager.
type Option interface {
	SetupOption
	applyToReconciler(*options)
}

// SetupOption configures SetupWithManager: every Option, and the options
// that shape the controller SetupWithManager registers (WithOwns,
// WithWatches, WithRawSource, WithPredicates, WithMaxConcurrentReconciles,
// WithSkipNameValidation, WithControllerOptions). New builds no
// controller, so passing one of those to New does not compile. With New, give the same
// settings to the builder (ctrl.NewControllerManagedBy) that runs the
// Reconciler.
//
// To share a list of Options between New and SetupWithManager, keep it as
// []Option and copy it into a []SetupOption, since Go does not convert one
// slice type into the other.
type SetupOption interface {
	applyToSetup(*setupOptions)
}

// reconcilerOption is an Option: it sets a field of the Reconciler's
// options, wherever it is given.
type reconcilerOption func(*options)

func (f reconcilerOption) applyToReconciler(o *options) { f(o) }
func (f reconcilerOption) applyToSetup(o *setupOptions) { f(&o.options) }

// setupOnlyOption is a SetupOption that shapes the controller.
type setupOnlyOption func(*setupOptions)

func (f setupOnlyOption) applyToSetup(o *setupOptions) { f(o) }

// options are the settings of a Reconciler.
type options struct {
	name       string
	finalizer  string
	fieldOwner string
	recorder   events.EventRecorder
	summary    []statusutil.SummaryOption
	// progressDelay defers the first Waiting status of a generation.
	progressDelay time.Duration
	readyEvents   ReadyEvents
	// namespaceDeletion is WithNamespaceDeletion.
	namespaceDeletion bool
}

// setupOptions are the settings of SetupWithManager: the Reconciler's, and
// the controller's.
type setupOptions struct {
	options
	owns          []client.Object
	watches       []watch
	predicates    []predicate.Predicate
	maxConcurrent int
	// skipNameCheck is nil unless WithSkipNameValidation is given, so
	// that the manager's Controller.SkipNameValidation applies.
	skipNameCheck *bool
	controller    controller.Options
	rawSources    []source.Source
	shard         Sharding
}

func defaultOptions(gvk schema.GroupVersionKind) options {
	kind := strings.ToLower(gvk.Kind)
	group := gvk.Group
	if group == "" {
		group = "core"
	}
	return options{
		name:       kind,
		finalizer:  group + "/" + kind + "-cleanup",
		fieldOwner: "opkit-" + kind,
	}
}

func (o *options) validate() error {
	var errs []error
	if o.name == "" {
		errs = append(errs, errors.New("WithName: the controller name must not be empty"))
	}
	if msgs := validation.IsQualifiedName(o.finalizer); len(msgs) > 0 || !strings.Contains(o.finalizer, "/") {
		errs = append(errs, fmt.Errorf("WithFinalizer(%q): a finalizer must be a domain-qualified name such as example.com/cleanup: %s", o.finalizer, strings.Join(msgs, "; ")))
	}
	if o.fieldOwner == "" || len(o.fieldOwner) > 128 {
		errs = append(errs, fmt.Errorf("WithFieldOwner(%q): the field owner must be 1 to 128 characters", o.fieldOwner))
	}
	if o.readyEvents != ReadyEventsAlways && o.readyEvents != ReadyEventsOnRecovery {
		errs = append(errs, fmt.Errorf("WithReadyEvents(%d): use ReadyEventsAlways or ReadyEventsOnRecovery", o.readyEvents))
	}
	if o.progressDelay < 0 {
		errs = append(errs, fmt.Errorf("WithProgressDelay(%s): must be 0 (the default) or more", o.progressDelay))
	}
	if len(errs) > 0 {
		return fmt.Errorf("reconcile: invalid options: %w", errors.Join(errs...))
	}
	return nil
}

func (o *setupOptions) validate() error {
	if o.maxConcurrent < 0 {
		return fmt.Errorf("reconcile: invalid options: WithMaxConcurrentReconciles(%d): must be 0 (the default) or more", o.maxConcurrent)
	}
	if o.controller.Reconciler != nil {
		return errors.New("reconcile: invalid options: WithControllerOptions: Reconciler must be unset; the controller runs the Reconciler SetupWithManager builds")
	}
	return nil
}

// WithProgressDelay defers, by up to d, the status write of a pass that
// ends Waiting on a generation the status has not reported yet
// (status.observedGeneration behind metadata.generation): a new object, or
// a spec change. If a pass within d reaches Done, the generation costs one
// status write (Ready) instead of two (Reconciling, then Ready). If the
// object is still waiting after d, its status is written then: the pass is
// requeued for it. Until then readers see status.observedGeneration behind
// metadata.generation, which kstatus and `kubectl wait` read as in
// progress. Retry and Terminal results are always written at once, and so
// is any status once the generation has been reported. The default, 0,
// writes every changed status at once.
//
// Footgun: the status a deferred pass computed is dropped, not kept, so use
// it only when Reconcile derives the status from the world on every pass
// rather than keeping state in it.
func WithProgressDelay(d time.Duration) Option {
	return reconcilerOption(func(o *options) { o.progressDelay = d })
}

// ReadyEvents says when the Reconciler records its Normal "Ready" event.
type ReadyEvents int

const (
	// ReadyEventsAlways (the default) records the event whenever Ready
	// becomes True: a new object's first Ready, a change rolled out, and a
	// recovery from Ready=False.
	ReadyEventsAlways ReadyEvents = iota
	// ReadyEventsOnRecovery records it only when Ready becomes True from
	// False, that is when a failure, a stall or a degradation has ended. A
	// new object becoming Ready (Ready absent or Unknown before) gets no
	// event: its status says so, and an operator that creates objects in
	// bursts saves one event write per object. Failures, stalls and Ready
	// turning False keep their Warning events either way.
	ReadyEventsOnRecovery
)

// WithReadyEvents sets when the Normal "Ready" event is recorded (default
// ReadyEventsAlways).
func WithReadyEvents(w ReadyEvents) Option {
	return reconcilerOption(func(o *options) { o.readyEvents = w })
}

// WithName sets the controller name, used in metrics labels, as the events'
// reporting controller, and by SetupWithManager as the controller's name.
// The default is the kind in lower case.
func WithName(name string) Option {
	return reconcilerOption(func(o *options) { o.name = name })
}

// WithFinalizer sets the finalizer added when the hooks implement Finalizer.
// The default is "<group>/<kind>-cleanup".
//
// Footgun: renaming the finalizer of a released operator strands objects
// that carry the old name; remove the old one in Finalize first.
func WithFinalizer(name string) Option {
	return reconcilerOption(func(o *options) { o.finalizer = name })
}

// WithFieldOwner sets the server-side-apply field manager of the status
// writes, and of the children the hooks write with a Children during a pass
// (see Children). The default is "opkit-<kind>"; Reconciler.FieldOwner
// returns the one in use.
//
// Footgun: changing it leaves the old manager owning fields, which it then
// never removes.
func WithFieldOwner(name string) Option {
	return reconcilerOption(func(o *options) { o.fieldOwner = name })
}

// WithEventRecorder sets the events.k8s.io recorder. SetupWithManager uses
// the manager's recorder by default; New records no events without it.
func WithEventRecorder(r events.EventRecorder) Option {
	return reconcilerOption(func(o *options) { o.recorder = r })
}

// WithSummary says how Ready summarises the conditions the hooks set, as
// statusutil.SetSummary takes it: statusutil.WithConditions (True is good,
// e.g. Available), statusutil.WithNegativePolarityConditions (True is
// bad, e.g. Degraded), statusutil.WithReadyReason.
func WithSummary(opts ...statusutil.SummaryOption) Option {
	return reconcilerOption(func(o *options) { o.summary = append(o.summary, opts...) })
}

// WithOwns makes SetupWithManager watch these child types and reconcile
// their controller when they change. Resyncs of a child (updates that
// change nothing) are dropped: they would cost a pass per child every
// resync period.
func WithOwns(objs ...client.Object) SetupOption {
	return setupOnlyOption(func(o *setupOptions) { o.owns = append(o.owns, objs...) })
}

// watch is one WithWatches registration.
type watch struct {
	obj     client.Object
	handler handler.EventHandler
	opts    []builder.WatchesOption
}

// WithWatches makes SetupWithManager watch another kind that is not owned by
// controller reference, mapping its events to requests with h (usually
// handler.EnqueueRequestsFromMapFunc). Pass builder.OnlyMetadata to cache
// only the objects' metadata, e.g. for pods whose names or labels are all a
// controller needs.
func WithWatches(obj client.Object, h handler.EventHandler, opts ...builder.WatchesOption) SetupOption {
	return setupOnlyOption(func(o *setupOptions) {
		o.watches = append(o.watches, watch{obj: obj, handler: h, opts: opts})
	})
}

// WithPredicates replaces SetupWithManager's default predicates for the
// reconciled kind (see SetupWithManager).
func WithPredicates(ps ...predicate.Predicate) SetupOption {
	return setupOnlyOption(func(o *setupOptions) { o.predicates = append(o.predicates, ps...) })
}

// WithMaxConcurrentReconciles sets how many objects SetupWithManager's
// controller reconciles at once (default 1; different objects only, the
// work queue never runs one object twice at the same time).
func WithMaxConcurrentReconciles(n int) SetupOption {
	return setupOnlyOption(func(o *setupOptions) { o.maxConcurrent = n })
}

// WithSkipNameValidation lets several controllers with the same name be set
// up in one process, which controller-runtime refuses by default. Meant for
// tests. Without it the manager's Controller.SkipNameValidation applies.
func WithSkipNameValidation() SetupOption {
	return setupOnlyOption(func(o *setupOptions) { o.skipNameCheck = ptr.To(true) })
}

// WithControllerOptions gives the controller SetupWithManager registers
// controller-runtime's options: a rate limiter, a queue, a log
// constructor, a reconciliation timeout, and whatever later minors add.
// WithMaxConcurrentReconciles and WithSkipNameValidation, when given, win
// over the same fields here. Leave Reconciler unset: the controller runs
// the Reconciler SetupWithManager builds.
func WithControllerOptions(opts controller.Options) SetupOption {
	return setupOnlyOption(func(o *setupOptions) { o.controller = opts })
}

// WithRawSource adds a source of requests of its own (a channel of
// generic events, a source with its own cache) to the controller
// SetupWithManager registers, as the builder's WatchesRawSource does.
func WithRawSource(src source.Source) SetupOption {
	return setupOnlyOption(func(o *setupOptions) { o.rawSources = append(o.rawSources, src) })
}

// Sharding spreads a Reconciler's objects over replicas; shard.For
// returns one. Package reconcile knows sharding only by this interface.
type Sharding interface {
	// Setup adds to mgr what sharding obj's kind needs, with owned the
	// kinds the Reconciler writes children of (those carrying sel), and
	// returns r passing only the objects this replica holds.
	Setup(mgr ctrl.Manager, obj client.Object, owned []client.Object, sel labels.Selector, r crreconcile.Reconciler) (crreconcile.Reconciler, error)
}

// WithShard spreads the kind's objects over replicas as s says
// (shard.For). The children of WithOwns and WithDependents kinds that
// Children wrote take their owner's slot, and a child written in a pass
// carries the slot label. Run every replica without leader election;
// docs/sharding.md has the cache and RBAC it needs.
func WithShard(s Sharding) SetupOption {
	return setupOnlyOption(func(o *setupOptions) { o.shard = s })
}

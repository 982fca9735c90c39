// Package reconcile provides Reconciler[T], a controller-runtime reconciler
// that owns the whole lifecycle of one kind, so that an operator author writes
// only domain logic.
//
// # What you write
//
// A Hooks implementation with one method, Reconcile, which drives the world
// toward obj's spec (create or update children, call external systems) and
// records what it saw in obj's status in memory. It returns a Result:
//
//	Done()                         the desired state is reached
//	RequeueAfter(d)                reached; look again after d
//	Waiting(reason, message, d)    applied, not reached yet (pods starting)
//	WaitingForChange(reason, msg)  the same, ended by a watch event: no poll
//	Retry(err)                     transient failure: rate-limited backoff
//	Terminal(reason, err)          retrying cannot help: Stalled, no retry
//
// A Result carries its error, so a requeue can never be returned alongside an
// error (controller-runtime ignores the Result in that case).
//
// Optional interfaces on the same value add steps: Finalizer (cleanup before
// deletion), Defaulter (in-memory defaults for the pass) and Validator
// (semantic checks; a failure stalls the object with a message naming the
// field instead of looping on an error). Package webhook serves Default and
// Validate at admission too, with AdmissionValidator and Warner, which only
// admission calls. New refuses hooks with one of these methods on the
// wrong receiver or with another signature (ErrHookSignature), since the
// step would silently never run.
//
// # What the Reconciler does in each pass
//
//  1. Reads the object (through the manager's cache). NotFound ends the pass
//     quietly.
//  2. If the object is being deleted: runs Finalize while the Reconciler's
//     finalizer is present, then removes the finalizer with a patch; an
//     object that vanishes meanwhile counts as done.
//  3. If the object carries AnnotationPaused: records Paused (one status
//     write, then none) and ends the pass; no hook runs.
//  4. Otherwise, when the hooks implement Finalizer, makes sure the
//     finalizer is present (never on an object being deleted).
//  5. Runs Default, Validate and Reconcile.
//  6. Derives Ready, Reconciling and Stalled from the Result (kstatus
//     conventions, through statusutil) and the conditions named with
//     WithConditions / WithNegativePolarityConditions, and sets
//     status.observedGeneration unless the pass failed with Retry.
//  7. Writes the status once, only if it changed, as a server-side apply of
//     the fields this controller owns. Conditions written by other
//     controllers are not sent and so are kept; no resourceVersion is sent, so
//     concurrent writers cause no conflict.
//
// It emits events (events.k8s.io) on transitions, not on every pass: when
// Ready becomes True (for the first time or again) or False, when Stalled is
// set, and when a failure's message changes. WithReadyEvents
// (ReadyEventsOnRecovery) keeps the Ready event for recoveries from
// Ready=False, saving one event per new object. It counts outcomes and status
// writes in the metrics MetricOutcomes and MetricStatusWrites.
//
// WithProgressDelay trades an early Reconciling status for fewer writes: a
// generation that becomes Ready within the delay gets one status write.
//
// # Children
//
// Children.EnsureChild makes a child exist, be controlled by the object, and
// carry the fields you set, writing only when one of your fields differs, so
// that server-defaulted fields do not cause a write on every pass; see
// Children for the comparison rules and their trade-offs.
// Children.DeleteChild removes a child you no longer want. Children
// applies as the field owner of the Reconciler whose pass calls it (it
// reads it from the pass's ctx, see FieldOwnerFrom), so the field owner is
// said once, with WithFieldOwner. A write the API server refuses comes back
// as a *ChildWriteError naming the operation that failed.
//
// # Declared children
//
// A Workflow declares a kind's children once, each a Dependent: how it is
// built, what it depends on, when it is ready, when it is wanted. Its
// Reconcile applies them in dependency order, holds a child back until
// what it depends on is ready (WaitingForChange: the child's watch event
// ends the wait), deletes an unwanted child, and sets each dependent's
// Condition. WithDependents registers the watches. Steady state costs no
// write: it is EnsureChild and DeleteChild underneath.
//
// # Options
//
// New and SetupWithManager take the Reconciler's options (Option: name,
// finalizer, field owner, conditions, events, progress delay).
// SetupWithManager also takes the options of the controller it registers
// (SetupOption: WithOwns, WithWatches, WithRawSource, WithPredicates,
// WithMaxConcurrentReconciles, WithSkipNameValidation, and
// WithControllerOptions for every controller-runtime controller option);
// New builds no controller and does not compile with those.
//
// # Requirements on the kind
//
// T is the pointer type of a registered kind with a status subresource. Its
// status must expose conditions and observedGeneration through the four
// methods of Object, and the conditions list must be a map list keyed by type
// (+listType=map, +listMapKey=type), or other controllers' conditions are
// replaced by the apply. SetupWithManager checks the CRD's published schema
// for these and fails with ErrStatusSchema, naming the CRD and the fix, when
// it was not regenerated after adding them. Do not strip metadata.managedFields from the kind in
// a cache transform: the Reconciler reads them to know which conditions it
// owns. KeepManagedFieldsOf(fieldOwner) keeps only its own entries, which
// saves the memory of every other writer's.
//
// # RBAC
//
// A Reconciler reads its kind through the cache (get, list, watch),
// merge-patches its finalizer (patch), server-side applies the status
// subresource (patch) and emits events through events.k8s.io (create,
// patch); children whose owner reference blocks the owner's deletion need
// update on the kind's finalizers subresource (the
// OwnerReferencesPermissionEnforcement admission plugin checks it).
// EnsureChild applies and reads children (create, patch, get, list, watch)
// and DeleteChild deletes them (delete).
// For a kind widgets.example.com with ConfigMap children, as kubebuilder
// markers for controller-gen's rbac generator:
//
//	// +kubebuilder:rbac:groups=example.com,resources=widgets,verbs=get;list;watch;patch
//	// +kubebuilder:rbac:groups=example.com,resources=widgets/status,verbs=get;patch
//	// +kubebuilder:rbac:groups=example.com,resources=widgets/finalizers,verbs=update
//	// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
//	// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch;delete
//
// # Newer controller-runtime pieces
//
// opkit supports controller-runtime v0.24 and v0.25 (README, Compatibility),
// so it uses nothing that only v0.25 has. How its own pieces relate to the
// newer ones:
//
//   - Read-your-writes. v0.25's experimental consistent client
//     (client.CacheOptions.EnableReadYourWritesConsistency) makes a cached
//     read wait until the informer has seen the client's last write. The
//     Reconciler does not wait: it remembers the status (with its
//     managedFields) and finalizers it wrote, and overlays them on a read
//     that is older, so a pass never blocks on a slow watch and never
//     drops a condition; Children does the same for the children it
//     applied. With the consistent client on, reads are already fresh and
//     the overlays find nothing to add: the two combine safely.
//   - The priority queue (controller.Options.UsePriorityQueue, on by
//     default in v0.24 and v0.25). The Reconciler only returns results the
//     queue understands (RequeueAfter for waits, an error for retries), and
//     its tests run with it on.
//   - Reconciliation timeouts (controller.Options.ReconciliationTimeout):
//     the pass's ctx carries the deadline to the hooks and to the status
//     write; a pass that runs out of time writes no status and is retried.
//   - Warm-up (EnableWarmup) concerns the controller's sources, not the
//     Reconciler, and works with either.
//
// # The package name
//
// The package is named reconcile, like controller-runtime's pkg/reconcile,
// on purpose: it is what an operator uses instead of writing a
// controller-runtime reconcile.Reconciler by hand, and in a controller's
// code its names (reconcile.New, reconcile.Result, reconcile.Done) read as
// what they are. Go resolves
// imports per file, so a scaffolded test that imports controller-runtime's
// package as reconcile compiles next to a controller file that imports this
// one (docs/kubebuilder.md does exactly that). In a file that needs both,
// import controller-runtime's as crreconcile, or use ctrl.Request and
// ctrl.Result, which kubebuilder's scaffold already uses in Reconcile's
// signature.
//
// # Footguns
//
//   - Reconcile must not write its own object; set status fields in memory
//     and let the Reconciler write them once.
//   - Finalize must be idempotent; it runs again after any failure.
//   - SetupWithManager's default predicates drop status-only updates and
//     resyncs of the kind. A controller that reacts to another controller's
//     status on its own object needs WithPredicates.
package reconcile

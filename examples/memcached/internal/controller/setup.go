package controller

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/shard"
	"github.com/opkit-dev/opkit/statusutil"
	"github.com/opkit-dev/opkit/webhook"
)

// Name is the controller's name: metrics label, events' reporting
// controller, log name.
const Name = "memcached"

// Options tune the controller.
type Options struct {
	// MaxConcurrentReconciles is how many Memcacheds are reconciled at once
	// (default 1).
	MaxConcurrentReconciles int
	// ProgressDelay is reconcile.WithProgressDelay: a new Memcached (or a
	// spec change) that is Ready within it gets one status write instead
	// of two; a slower rollout shows its progress after it (default 0:
	// at once).
	ProgressDelay time.Duration
	// ReadyEvents is reconcile.WithReadyEvents: whether a Memcached
	// becoming Ready for the first time gets a Normal Ready event (default
	// reconcile.ReadyEventsAlways), or only one recovering from
	// Ready=False does (reconcile.ReadyEventsOnRecovery: one event write
	// fewer per new Memcached).
	ReadyEvents reconcile.ReadyEvents
	// Webhooks also serves the hooks' Validate and Warnings as the
	// Memcached validating webhook (webhook.SetupWithManager), and with
	// Shard the ring's slot-labelling webhook (Ring.SetupWebhookWithManager).
	Webhooks bool
	// SkipNameValidation allows several controllers named Name in one
	// process (tests).
	SkipNameValidation bool
	// Shard, when set, spreads the Memcacheds over the replicas of its
	// ring (reconcile.WithShard). Build the cache with ShardCache.
	Shard *Shard
}

// Shard is this replica's place among the replicas sharing the Memcacheds.
type Shard struct {
	Ring     shard.Ring
	Identity string
}

// ShardCache returns the manager's NewCache for sh's replica: it caches
// the Memcacheds of the slots it holds, their children, and their pods,
// which carry the slot from the pod template; each kind as the cache
// options select it.
func ShardCache(sh Shard) cache.NewCacheFunc {
	return sh.Ring.NewCache(sh.Identity, &v1beta1.Memcached{}, &appsv1.Deployment{}, &corev1.Service{},
		&policyv1.PodDisruptionBudget{}, &corev1.Pod{})
}

// CacheOptions restricts the manager's cache to what the operator reads:
// Deployments, Services, PodDisruptionBudgets and Pods labelled
// app.kubernetes.io/managed-by=opkit-memcached, without managedFields or
// what else the operator does not read (transforms.go), and Memcacheds
// with only the operator's own managedFields entries
// (reconcile.KeepManagedFieldsOf: the Reconciler reads which conditions it
// owns from them). namespaces, when not empty, restricts every cached kind
// to those namespaces.
func CacheOptions(namespaces []string) cache.Options {
	managed := labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedBy})
	selected := func(transform toolscache.TransformFunc) cache.ByObject {
		return cache.ByObject{Label: managed, Transform: transform}
	}
	opts := cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&appsv1.Deployment{}:            selected(trimDeployment),
			&corev1.Service{}:               selected(trimService),
			&policyv1.PodDisruptionBudget{}: selected(stripManagedFields),
			&corev1.Pod{}:                   selected(trimPodMetadata),
			&v1beta1.Memcached{}:            {Transform: reconcile.KeepManagedFieldsOf(ManagedBy)},
		},
	}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}

// SetupWithManager registers the Memcached controller with mgr, whose scheme
// must know v1beta1 (and v1alpha1, to convert), and whose cache should be
// built with CacheOptions.
//
// It watches Memcacheds (with reconcile.DefaultPredicate), the children it
// owns, and the metadata of the Memcacheds' pods, whose creation and deletion
// change status.nodes.
func SetupWithManager(mgr ctrl.Manager, o Options) (*reconcile.Reconciler[*v1beta1.Memcached], error) {
	rec := mgr.GetEventRecorder(Name)
	hooks, err := NewHooks(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetScheme(), rec)
	if err != nil {
		return nil, err
	}
	if err := indexPods(mgr.GetCache()); err != nil {
		return nil, fmt.Errorf("indexing pods by %s: %w", LabelInstance, err)
	}
	hooks.podIndexed = true
	var opts []reconcile.SetupOption
	for _, o := range ReconcilerOptions(rec) {
		opts = append(opts, o)
	}
	opts = append(opts,
		reconcile.WithDependents(hooks.children),
		reconcile.WithWatches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podOwner),
			builder.OnlyMetadata, builder.WithPredicates(podMembershipChanged())),
		reconcile.WithMaxConcurrentReconciles(o.MaxConcurrentReconciles),
		reconcile.WithProgressDelay(o.ProgressDelay),
		reconcile.WithReadyEvents(o.ReadyEvents))
	if o.SkipNameValidation {
		opts = append(opts, reconcile.WithSkipNameValidation())
	}
	if o.Shard != nil {
		opts = append(opts, reconcile.WithShard(shard.For(o.Shard.Ring)))
	}
	r, err := reconcile.SetupWithManager[*v1beta1.Memcached](mgr, hooks, opts...)
	if err != nil {
		return nil, fmt.Errorf("setting up the %s controller: %w", Name, err)
	}
	if o.Webhooks {
		if err := webhook.SetupWithManager[*v1beta1.Memcached](mgr, hooks); err != nil {
			return nil, err
		}
		if o.Shard != nil {
			if err := o.Shard.Ring.SetupWebhookWithManager(mgr); err != nil {
				return nil, err
			}
		}
	}
	return r, nil
}

// ReconcilerOptions are the reconcile options of the Memcached Reconciler:
// its name, field owner, the conditions Ready summarises and the event
// recorder. Tests building a Reconciler with reconcile.New use them too.
func ReconcilerOptions(rec events.EventRecorder) []reconcile.Option {
	opts := []reconcile.Option{
		reconcile.WithName(Name),
		reconcile.WithFieldOwner(ManagedBy),
		reconcile.WithSummary(statusutil.WithConditions(v1beta1.ConditionAvailable),
			statusutil.WithNegativePolarityConditions(v1beta1.ConditionDegraded)),
	}
	if rec != nil {
		opts = append(opts, reconcile.WithEventRecorder(rec))
	}
	return opts
}

// podInstanceIndex indexes the cached pod metadata by the Memcached that
// owns the pod (its instance label), so that a pass lists only its pods.
const podInstanceIndex = "memcached.cache.opkit.dev/instance"

// indexPods adds podInstanceIndex to c's pod metadata informer, under the
// name and keys that client.MatchingFields reads in one namespace.
// FieldIndexer.IndexField would also index every pod under a cluster-wide
// key, which the operator never lists: 324 of the index's 641 bytes per
// pod (BenchmarkPodIndex).
func indexPods(c cache.Cache) error {
	inf, err := c.GetInformer(context.Background(), podMetadata(), cache.BlockUntilSynced(false))
	if err != nil {
		return err
	}
	return inf.AddIndexers(toolscache.Indexers{"field:" + podInstanceIndex: podInstanceKeys})
}

// podInstanceKeys is the podInstanceIndex function: "<namespace>/<instance
// label>" of a pod managed by this operator, the key controller-runtime's
// cache reader looks up for a field in a namespace.
func podInstanceKeys(obj any) ([]string, error) {
	pod, ok := obj.(client.Object)
	if !ok {
		return nil, fmt.Errorf("indexing %T: not an object", obj)
	}
	instance := podInstance(pod)
	if len(instance) == 0 {
		return nil, nil
	}
	return []string{pod.GetNamespace() + "/" + instance[0]}, nil
}

// podMetadata is the metadata-only pod the controller watches and indexes.
func podMetadata() *metav1.PartialObjectMetadata {
	p := &metav1.PartialObjectMetadata{}
	p.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	return p
}

// podInstance is the podInstanceIndex function: the instance label of a
// pod managed by this operator.
func podInstance(pod client.Object) []string {
	l := pod.GetLabels()
	if l[LabelManagedBy] != ManagedBy || l[LabelInstance] == "" {
		return nil
	}
	return []string{l[LabelInstance]}
}

// podOwner maps a pod to the Memcached named by its instance label.
func podOwner(_ context.Context, pod client.Object) []crreconcile.Request {
	instance := podInstance(pod)
	if len(instance) == 0 {
		return nil
	}
	return []crreconcile.Request{{NamespacedName: types.NamespacedName{Namespace: pod.GetNamespace(), Name: instance[0]}}}
}

// podMembershipChanged passes the pod events that change status.nodes:
// creation, deletion and the start of deletion.
func podMembershipChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

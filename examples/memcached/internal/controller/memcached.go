package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/shard"
	"github.com/opkit-dev/opkit/statusutil"
)

// Condition reasons set by the hooks.
const (
	ReasonRollingOut       = "RollingOut"
	ReasonRolloutComplete  = "RolloutComplete"
	ReasonAllAvailable     = "AllReplicasAvailable"
	ReasonUnavailable      = "ReplicasUnavailable"
	ReasonScaledToZero     = "ScaledToZero"
	ReasonAsExpected       = "AsExpected"
	ReasonDeadlineExceeded = "ProgressDeadlineExceeded"
	ReasonReplicaFailure   = "ReplicaFailure"
	// ReasonChildConflict (Reconciling=True): an object with a child's name
	// exists and is not the Memcached's (no controller, or another one);
	// nothing is written to it. Delete or rename it, and the next pass
	// (within reconcile.ChildConflictRequeue) goes on.
	ReasonChildConflict     = reconcile.ReasonChildConflict
	EventReasonScaled       = "Scaled"
	EventReasonRollingOut   = "RollingOut"
	actionScale, actionRoll = "Scale", "RollOut"
)

// Hooks is the Memcached domain logic, implementing reconcile.Hooks and
// reconcile.Validator.
//
// It implements no reconcile.Finalizer: a Memcached has nothing outside the
// cluster to clean up, and its children carry controller references, so
// the garbage collector removes them. A finalizer would cost a write per
// new Memcached and hold every deletion until the operator runs. A
// Memcached created by an earlier version, which added the finalizer, is
// released by the Reconciler when it is deleted.
type Hooks struct {
	reader   client.Reader
	children *reconcile.Workflow[*v1beta1.Memcached]
	recorder events.EventRecorder
	// podIndexed is set when reader's cache has the podInstanceIndex
	// index on pod metadata (SetupWithManager registers it).
	podIndexed bool
}

var (
	_ reconcile.Hooks[*v1beta1.Memcached]     = &Hooks{}
	_ reconcile.Validator[*v1beta1.Memcached] = &Hooks{}
)

// NewHooks returns the hooks, reading and writing through c (the manager's
// client, so that reads come from its cache) and recording events with
// recorder (nil records none).
//
// apiReader (the manager's GetAPIReader) confirms that a child the cache
// does not hold does not exist before it is created: the cache sees only
// objects with the operator's labels (CacheOptions). nil trusts c.
func NewHooks(c client.Client, apiReader client.Reader, scheme *runtime.Scheme, recorder events.EventRecorder) (*Hooks, error) {
	var opts []reconcile.ChildrenOption
	if apiReader != nil {
		opts = append(opts, reconcile.WithUncachedReader(apiReader))
	}
	children, err := reconcile.NewChildren(c, scheme, opts...)
	if err != nil {
		return nil, err
	}
	if recorder == nil {
		recorder = discardRecorder{}
	}
	h := &Hooks{reader: c, recorder: recorder}
	h.children, err = reconcile.NewWorkflow[*v1beta1.Memcached](children,
		&reconcile.Dependent[*v1beta1.Memcached, *appsv1.Deployment]{
			Name:       "Deployment",
			Build:      buildDeployment,
			Applied:    h.deploymentApplied,
			Ready:      rolledOut,
			WaitReason: ReasonRollingOut,
		},
		&reconcile.Dependent[*v1beta1.Memcached, *corev1.Service]{Name: "Service", Build: built(desiredService)},
		// A budget of one pod would block every drain.
		&reconcile.Dependent[*v1beta1.Memcached, *policyv1.PodDisruptionBudget]{
			Name:   "PodDisruptionBudget",
			Build:  built(desiredPDB),
			Wanted: func(m *v1beta1.Memcached) bool { return m.Spec.Replicas > 1 },
		})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// buildDeployment is desiredDeployment, its pod template labelled with
// the pass's shard slot, if any, so that the member caches the pods.
func buildDeployment(ctx context.Context, m *v1beta1.Memcached) (*appsv1.Deployment, error) {
	d := desiredDeployment(m)
	if k, v, ok := shard.SlotFrom(ctx); ok {
		d.Spec.Template.Labels[k] = v
	}
	return d, nil
}

// built adapts a desired-child func to Dependent.Build.
func built[C any](f func(*v1beta1.Memcached) C) func(context.Context, *v1beta1.Memcached) (C, error) {
	return func(_ context.Context, m *v1beta1.Memcached) (C, error) { return f(m), nil }
}

// +kubebuilder:webhook:path=/validate-cache-opkit-dev-v1beta1-memcached,mutating=false,failurePolicy=fail,sideEffects=None,groups=cache.opkit.dev,resources=memcacheds,verbs=create;update,versions=v1beta1,name=vmemcached.cache.opkit.dev,admissionReviewVersions=v1,timeoutSeconds=5

// Validate checks what the CRD schema does not: cache.memoryMB must be below
// the container's memory limit (or memcached is OOM-killed when its cache
// fills), and resource requests must not exceed their limits (the pods would
// be rejected by the ReplicaSet controller, far from the Memcached). It
// runs at admission too (--webhook-port), as the webhook above.
func (h *Hooks) Validate(_ context.Context, m *v1beta1.Memcached) field.ErrorList {
	var errs field.ErrorList
	res := m.Spec.Resources
	if limit, ok := res.Limits[corev1.ResourceMemory]; ok {
		items := resource.NewQuantity(int64(m.Spec.Cache.MemoryMB)<<20, resource.BinarySI)
		if limit.Cmp(*items) <= 0 {
			errs = append(errs, field.Invalid(field.NewPath("spec", "cache", "memoryMB"), m.Spec.Cache.MemoryMB,
				fmt.Sprintf("must be less than spec.resources.limits.memory (%s): memcached needs memory beyond its item cache", limit.String())))
		}
	}
	path := field.NewPath("spec", "resources", "requests")
	for _, name := range slices.Sorted(func(yield func(corev1.ResourceName) bool) {
		for k := range res.Requests {
			if !yield(k) {
				return
			}
		}
	}) {
		req, limit := res.Requests[name], res.Limits[name]
		if _, ok := res.Limits[name]; ok && req.Cmp(limit) > 0 {
			errs = append(errs, field.Invalid(path.Key(string(name)), req.String(),
				fmt.Sprintf("must not exceed spec.resources.limits[%s] (%s)", name, limit.String())))
		}
	}
	return errs
}

// Warnings warns at admission of an image with no tag, or tagged latest:
// a pod rescheduled later may pull another memcached than its peers run.
func (h *Hooks) Warnings(_ context.Context, _, m *v1beta1.Memcached) []string {
	image := m.Spec.Image
	if strings.Contains(image, "@") {
		return nil
	}
	_, tag, tagged := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":")
	if !tagged || tag == "latest" {
		return []string{fmt.Sprintf("spec.image %q does not pin a version: pin a tag or digest, or pods may run different memcached releases", image)}
	}
	return nil
}

// Reconcile applies m's children, records its pods and the Deployment's
// progress in m's status, and waits while a rollout is under way.
func (h *Hooks) Reconcile(ctx context.Context, m *v1beta1.Memcached) reconcile.Result {
	m.Status.Selector = labels.SelectorFromSet(selectorLabels(m)).String()
	res := h.children.Reconcile(ctx, m)
	if k := res.Outcome(); k == reconcile.OutcomeRetry || res.Reason() == ReasonChildConflict {
		return res
	}
	nodes, err := h.podNames(ctx, m)
	if err != nil {
		return reconcile.Retry(err)
	}
	m.Status.Nodes = nodes
	if res.Reason() == ReasonRollingOut && statusutil.IsTrue(m, v1beta1.ConditionDegraded) {
		// Stuck: Ready=False says why; a Deployment change brings us back.
		return reconcile.Done()
	}
	// The Deployment is owned, so every step of its rollout (and its
	// failure) is a watch event and a pass: no poll while waiting.
	return res
}

// deploymentApplied records the Deployment's progress in m's status, and
// events when the apply scaled it or rolled out a new pod template.
func (h *Hooks) deploymentApplied(ctx context.Context, m *v1beta1.Memcached, live, old *appsv1.Deployment, op reconcile.ChildWrite) {
	observeDeployment(m, live)
	if op != reconcile.ChildUpdated || old == nil {
		return
	}
	ctrl.LoggerFrom(ctx).Info("updated the Deployment", "memcached", klog.KObj(m), "deployment", klog.KObj(live))
	if oldSize := ptr32(old.Spec.Replicas); oldSize != m.Spec.Replicas {
		h.recorder.Eventf(m, live, corev1.EventTypeNormal, EventReasonScaled, actionScale,
			"scaling from %d to %d pods", oldSize, m.Spec.Replicas)
	}
	if !equality.Semantic.DeepDerivative(desiredDeployment(m).Spec.Template, old.Spec.Template) {
		h.recorder.Eventf(m, live, corev1.EventTypeNormal, EventReasonRollingOut, actionRoll,
			"rolling out a new pod template (image %s)", m.Spec.Image)
	}
}

// podNames lists m's pods that are not being deleted, sorted, from the
// cache's metadata-only view of pods.
func (h *Hooks) podNames(ctx context.Context, m *v1beta1.Memcached) ([]string, error) {
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	// With the index, a pass reads only m's pods; a label selector would
	// scan every pod of the namespace, which makes a pass O(pods) and the
	// passes of a namespace of N Memcacheds O(N²).
	var match client.ListOption = client.MatchingLabels(selectorLabels(m))
	if h.podIndexed {
		match = client.MatchingFields{podInstanceIndex: m.Name}
	}
	if err := h.reader.List(ctx, pods, client.InNamespace(m.Namespace), match); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	var names []string
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp.IsZero() {
			names = append(names, pods.Items[i].Name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// observeDeployment sets readyReplicas, Available, Progressing and Degraded
// from dep.
func observeDeployment(m *v1beta1.Memcached, dep *appsv1.Deployment) {
	size, st := m.Spec.Replicas, dep.Status
	m.Status.ReadyReplicas = st.ReadyReplicas
	current := st.ObservedGeneration >= dep.Generation

	switch {
	case !current:
		statusutil.MarkUnknown(m, v1beta1.ConditionAvailable, ReasonRollingOut, "the Deployment has not observed the latest spec yet")
	case size == 0 && st.Replicas == 0:
		statusutil.MarkTrue(m, v1beta1.ConditionAvailable, ReasonScaledToZero, "spec.replicas is 0: no pod runs")
	case st.AvailableReplicas >= size:
		statusutil.MarkTrue(m, v1beta1.ConditionAvailable, ReasonAllAvailable, "")
	default:
		statusutil.MarkFalse(m, v1beta1.ConditionAvailable, ReasonUnavailable,
			fmt.Sprintf("%d of %d pods available", st.AvailableReplicas, size))
	}

	switch c := deploymentCondition(dep, appsv1.DeploymentProgressing); {
	case c != nil && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded":
		statusutil.MarkTrue(m, v1beta1.ConditionDegraded, ReasonDeadlineExceeded, c.Message)
	default:
		if f := deploymentCondition(dep, appsv1.DeploymentReplicaFailure); f != nil && f.Status == corev1.ConditionTrue {
			statusutil.MarkTrue(m, v1beta1.ConditionDegraded, ReasonReplicaFailure, f.Message)
		} else {
			statusutil.MarkFalse(m, v1beta1.ConditionDegraded, ReasonAsExpected, "")
		}
	}

	if ok, msg := rolledOut(dep); ok {
		statusutil.MarkFalse(m, v1beta1.ConditionProgressing, ReasonRolloutComplete, "")
	} else {
		statusutil.MarkTrue(m, v1beta1.ConditionProgressing, ReasonRollingOut, msg)
	}
}

// rolledOut reports whether dep runs its spec on every replica, and if
// not, how far it got.
func rolledOut(dep *appsv1.Deployment) (bool, string) {
	size, st := ptr32(dep.Spec.Replicas), dep.Status
	if st.ObservedGeneration >= dep.Generation && st.UpdatedReplicas == size && st.Replicas == size && st.AvailableReplicas == size {
		return true, ""
	}
	return false, fmt.Sprintf("%d of %d pods updated, %d available", st.UpdatedReplicas, size, st.AvailableReplicas)
}

func deploymentCondition(d *appsv1.Deployment, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == t {
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

func ptr32(p *int32) int32 {
	if p == nil {
		return 1 // the API server's default for Deployment replicas
	}
	return *p
}

// discardRecorder drops events.
type discardRecorder struct{}

func (discardRecorder) Eventf(runtime.Object, runtime.Object, string, string, string, string, ...any) {
}

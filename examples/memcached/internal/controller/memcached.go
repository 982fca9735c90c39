package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

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

	"github.com/opkit-dev/opkit/examples/memcached/api/v1alpha1"
	"github.com/opkit-dev/opkit/ownership"
	"github.com/opkit-dev/opkit/reconcile"
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
	// (within childConflictRequeue) goes on.
	ReasonChildConflict     = "ChildConflict"
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
	children *reconcile.Children
	recorder events.EventRecorder
	// podIndexed is set when reader's cache has the podInstanceIndex
	// index on pod metadata (SetupWithManager registers it).
	podIndexed bool
}

var (
	_ reconcile.Hooks[*v1alpha1.Memcached]     = &Hooks{}
	_ reconcile.Validator[*v1alpha1.Memcached] = &Hooks{}
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
	return &Hooks{reader: c, children: children, recorder: recorder}, nil
}

// Validate checks what the CRD schema does not: memoryLimitMB must be below
// the container's memory limit (or memcached is OOM-killed when its cache
// fills), and resource requests must not exceed their limits (the pods would
// be rejected by the ReplicaSet controller, far from the Memcached).
func (h *Hooks) Validate(_ context.Context, m *v1alpha1.Memcached) field.ErrorList {
	var errs field.ErrorList
	res := m.Spec.Resources
	if limit, ok := res.Limits[corev1.ResourceMemory]; ok {
		items := resource.NewQuantity(int64(m.Spec.MemoryLimitMB)<<20, resource.BinarySI)
		if limit.Cmp(*items) <= 0 {
			errs = append(errs, field.Invalid(field.NewPath("spec", "memoryLimitMB"), m.Spec.MemoryLimitMB,
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

// Reconcile applies m's children, records its pods and the Deployment's
// progress in m's status, and waits while a rollout is under way.
func (h *Hooks) Reconcile(ctx context.Context, m *v1alpha1.Memcached) reconcile.Result {
	log := ctrl.LoggerFrom(ctx).WithValues("memcached", klog.KObj(m))
	m.Status.Selector = labels.SelectorFromSet(selectorLabels(m)).String()

	dep, err := h.ensureDeployment(ctx, m)
	if err != nil {
		return childError(err)
	}
	if op, err := h.children.EnsureChild(ctx, m, desiredService(m)); err != nil {
		return childError(fmt.Errorf("applying the Service: %w", err))
	} else if op != reconcile.OperationNone {
		log.V(1).Info("applied the Service", "operation", op)
	}
	if err := h.ensurePDB(ctx, m); err != nil {
		return childError(err)
	}
	nodes, err := h.podNames(ctx, m)
	if err != nil {
		return reconcile.Retry(err)
	}
	m.Status.Nodes = nodes
	return observeDeployment(m, dep)
}

// childConflictRequeue is how often a Memcached blocked by an object that
// is not its own looks again: the cache does not see an unlabelled object
// go, so no watch event would.
const childConflictRequeue = 30 * time.Second

// childError is the result of a failed child write: a conflict with an
// object that is not the Memcached's waits with ReasonChildConflict (a
// person must act), anything else is retried.
func childError(err error) reconcile.Result {
	if ownership.IsConflict(err) {
		return reconcile.Waiting(ReasonChildConflict, err.Error(), childConflictRequeue)
	}
	return reconcile.Retry(err)
}

// ensureDeployment applies the Deployment and records events when the apply
// scales it or rolls out a new pod template.
func (h *Hooks) ensureDeployment(ctx context.Context, m *v1alpha1.Memcached) (*appsv1.Deployment, error) {
	desired := desiredDeployment(m)
	var old appsv1.Deployment
	existed := true
	if err := h.reader.Get(ctx, client.ObjectKeyFromObject(desired), &old); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("reading the Deployment: %w", err)
		}
		existed = false
	}
	// Decide before EnsureChild overwrites desired with the live object.
	templateChanged := existed && !equality.Semantic.DeepDerivative(desired.Spec.Template, old.Spec.Template)
	op, err := h.children.EnsureChild(ctx, m, desired)
	if err != nil {
		return nil, fmt.Errorf("applying the Deployment: %w", err)
	}
	if op != reconcile.OperationUpdated {
		return desired, nil
	}
	ctrl.LoggerFrom(ctx).Info("updated the Deployment", "memcached", klog.KObj(m), "deployment", klog.KObj(desired))
	if oldSize := ptr32(old.Spec.Replicas); oldSize != m.Spec.Size {
		h.recorder.Eventf(m, desired, corev1.EventTypeNormal, EventReasonScaled, actionScale,
			"scaling from %d to %d pods", oldSize, m.Spec.Size)
	}
	if templateChanged {
		h.recorder.Eventf(m, desired, corev1.EventTypeNormal, EventReasonRollingOut, actionRoll,
			"rolling out a new pod template (image %s)", m.Spec.Image)
	}
	return desired, nil
}

// ensurePDB applies the PodDisruptionBudget when m has more than one pod and
// deletes it otherwise (a budget of one pod would block every drain).
func (h *Hooks) ensurePDB(ctx context.Context, m *v1alpha1.Memcached) error {
	pdb := desiredPDB(m)
	if m.Spec.Size > 1 {
		if _, err := h.children.EnsureChild(ctx, m, pdb); err != nil {
			return fmt.Errorf("applying the PodDisruptionBudget: %w", err)
		}
		return nil
	}
	op, err := h.children.DeleteChild(ctx, m, &policyv1.PodDisruptionBudget{ObjectMeta: pdb.ObjectMeta})
	if err != nil {
		return fmt.Errorf("deleting the PodDisruptionBudget: %w", err)
	}
	if op == reconcile.OperationDeleted {
		ctrl.LoggerFrom(ctx).Info("deleted the PodDisruptionBudget", "memcached", klog.KObj(m))
	}
	return nil
}

// podNames lists m's pods that are not being deleted, sorted, from the
// cache's metadata-only view of pods.
func (h *Hooks) podNames(ctx context.Context, m *v1alpha1.Memcached) ([]string, error) {
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
// from dep, and returns Waiting while dep has not rolled out m's spec.
func observeDeployment(m *v1alpha1.Memcached, dep *appsv1.Deployment) reconcile.Result {
	size, st := m.Spec.Size, dep.Status
	m.Status.ReadyReplicas = st.ReadyReplicas
	current := st.ObservedGeneration >= dep.Generation

	switch {
	case !current:
		statusutil.MarkUnknown(m, v1alpha1.ConditionAvailable, ReasonRollingOut, "the Deployment has not observed the latest spec yet")
	case size == 0 && st.Replicas == 0:
		statusutil.MarkTrue(m, v1alpha1.ConditionAvailable, ReasonScaledToZero, "spec.size is 0: no pod runs")
	case st.AvailableReplicas >= size:
		statusutil.MarkTrue(m, v1alpha1.ConditionAvailable, ReasonAllAvailable, "")
	default:
		statusutil.MarkFalse(m, v1alpha1.ConditionAvailable, ReasonUnavailable,
			fmt.Sprintf("%d of %d pods available", st.AvailableReplicas, size))
	}

	switch c := deploymentCondition(dep, appsv1.DeploymentProgressing); {
	case c != nil && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded":
		statusutil.MarkTrue(m, v1alpha1.ConditionDegraded, ReasonDeadlineExceeded, c.Message)
	default:
		if f := deploymentCondition(dep, appsv1.DeploymentReplicaFailure); f != nil && f.Status == corev1.ConditionTrue {
			statusutil.MarkTrue(m, v1alpha1.ConditionDegraded, ReasonReplicaFailure, f.Message)
		} else {
			statusutil.MarkFalse(m, v1alpha1.ConditionDegraded, ReasonAsExpected, "")
		}
	}

	rolledOut := current && st.UpdatedReplicas == size && st.Replicas == size && st.AvailableReplicas == size
	if rolledOut {
		statusutil.MarkFalse(m, v1alpha1.ConditionProgressing, ReasonRolloutComplete, "")
		return reconcile.Done()
	}
	msg := fmt.Sprintf("%d of %d pods updated, %d available", st.UpdatedReplicas, size, st.AvailableReplicas)
	statusutil.MarkTrue(m, v1alpha1.ConditionProgressing, ReasonRollingOut, msg)
	if statusutil.IsTrue(m, v1alpha1.ConditionDegraded) {
		// Stuck: Ready=False says why; a Deployment change brings us back.
		return reconcile.Done()
	}
	// The Deployment is owned, so every step of its rollout (and its
	// failure) is a watch event and a pass: no poll while waiting.
	return reconcile.WaitingForChange(ReasonRollingOut, msg)
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

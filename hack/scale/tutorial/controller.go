package main

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

const (
	finalizer     = "cache.opkit.dev/tutorial-finalizer"
	typeAvailable = "Available"
	typeReady     = "Ready"
	defaultImage  = "memcached:1.6"
)

// memcachedReconciler reconciles Memcacheds the tutorial's way.
type memcachedReconciler struct {
	client.Client
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
}

// Reconcile: status initialised, finalizer by Update, children by
// CreateOrUpdate, status written by Update on every pass.
func (r *memcachedReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	m := &memcached{}
	if err := r.Get(ctx, req.NamespacedName, m); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}

	// Let the user know the object was seen before anything else.
	if len(m.Status.Conditions) == 0 {
		meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: typeAvailable, Status: metav1.ConditionUnknown, Reason: "Reconciling", Message: "Starting reconciliation"})
		if err := r.Status().Update(ctx, m); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Get(ctx, req.NamespacedName, m); err != nil {
			return ctrl.Result{}, err
		}
	}

	if !controllerutil.ContainsFinalizer(m, finalizer) && m.DeletionTimestamp.IsZero() {
		controllerutil.AddFinalizer(m, finalizer)
		if err := r.Update(ctx, m); err != nil {
			return ctrl.Result{}, err
		}
	}
	if !m.DeletionTimestamp.IsZero() {
		if controllerutil.ContainsFinalizer(m, finalizer) {
			r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, "Deleting", "Finalize", "Custom resource %s is being deleted", m.Name)
			controllerutil.RemoveFinalizer(m, finalizer)
			if err := r.Update(ctx, m); err != nil {
				return ctrl.Result{}, err
			}
		}
		return ctrl.Result{}, nil
	}

	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, dep, func() error {
		r.mutateDeployment(m, dep)
		return ctrl.SetControllerReference(m, dep, r.Scheme)
	}); err != nil {
		return ctrl.Result{}, fmt.Errorf("deployment: %w", err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, svc, func() error {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
		svc.Spec.Selector = selectorFor(m.Name)
		svc.Spec.Ports = []corev1.ServicePort{{Name: "memcache", Port: 11211, TargetPort: intstr.FromString("memcache"), Protocol: corev1.ProtocolTCP}}
		return ctrl.SetControllerReference(m, svc, r.Scheme)
	}); err != nil {
		return ctrl.Result{}, fmt.Errorf("service: %w", err)
	}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace}}
	if m.Spec.Replicas > 1 {
		if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, pdb, func() error {
			pdb.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(1))
			pdb.Spec.Selector = &metav1.LabelSelector{MatchLabels: selectorFor(m.Name)}
			return ctrl.SetControllerReference(m, pdb, r.Scheme)
		}); err != nil {
			return ctrl.Result{}, fmt.Errorf("pdb: %w", err)
		}
	} else if err := r.Get(ctx, client.ObjectKeyFromObject(pdb), pdb); err == nil {
		if err := r.Delete(ctx, pdb); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("pdb: %w", err)
		}
	} else if !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("pdb: %w", err)
	}

	// Status on every pass.
	st := dep.Status
	rolledOut := st.ObservedGeneration >= dep.Generation && st.UpdatedReplicas == m.Spec.Replicas &&
		st.Replicas == m.Spec.Replicas && st.AvailableReplicas == m.Spec.Replicas
	status, reason, msg := metav1.ConditionFalse, "RollingOut", fmt.Sprintf("%d of %d pods available", st.AvailableReplicas, m.Spec.Replicas)
	if rolledOut {
		status, reason, msg = metav1.ConditionTrue, "Available", fmt.Sprintf("%d pods available", m.Spec.Replicas)
	}
	for _, t := range []string{typeAvailable, typeReady} {
		meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: m.Generation})
	}
	m.Status.ObservedGeneration = m.Generation
	m.Status.ReadyReplicas = st.ReadyReplicas
	if err := r.Status().Update(ctx, m); err != nil {
		return ctrl.Result{}, err
	}
	logger.V(1).Info("reconciled", "ready", rolledOut)
	return ctrl.Result{}, nil
}

// mutateDeployment sets the fields the operator owns on dep, every
// defaulted one included, so that CreateOrUpdate does not update on every
// pass.
func (r *memcachedReconciler) mutateDeployment(m *memcached, dep *appsv1.Deployment) {
	labels := labelsFor(m.Name)
	image := m.Spec.Image
	if image == "" {
		image = defaultImage
	}
	probe := func(delay int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("memcache")}},
			InitialDelaySeconds: delay, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3,
		}
	}
	dep.Labels = labels
	dep.Spec.Replicas = ptr.To(m.Spec.Replicas)
	dep.Spec.RevisionHistoryLimit = ptr.To[int32](2)
	dep.Spec.Selector = &metav1.LabelSelector{MatchLabels: selectorFor(m.Name)}
	dep.Spec.Template.Labels = labels
	spec := &dep.Spec.Template.Spec
	spec.AutomountServiceAccountToken = ptr.To(false)
	spec.EnableServiceLinks = ptr.To(false)
	spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](11211),
		RunAsGroup:     ptr.To[int64](11211),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if len(spec.Containers) != 1 {
		spec.Containers = []corev1.Container{{}}
	}
	c := &spec.Containers[0]
	c.Name = "memcached"
	c.Image = image
	c.Command = []string{"memcached"}
	c.Args = []string{"-p", "11211", "-m", "64"}
	c.Ports = []corev1.ContainerPort{{Name: "memcache", ContainerPort: 11211, Protocol: corev1.ProtocolTCP}}
	c.ReadinessProbe = probe(0)
	c.LivenessProbe = probe(10)
	c.SecurityContext = &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// selectorFor selects the pods of the Memcached name.
func selectorFor(name string) map[string]string {
	return map[string]string{"app.kubernetes.io/name": "memcached-tutorial", "app.kubernetes.io/instance": name}
}

// labelsFor are the labels of the Memcached name's Deployment and pods: as
// many as examples/memcached gives its children, so that both operators'
// pods are the same size (the benchmark checks it).
func labelsFor(name string) map[string]string {
	l := selectorFor(name)
	l["app.kubernetes.io/managed-by"] = "scale-tutorial"
	return l
}

// setupWithManager registers the controller: Memcacheds and the children
// it owns.
func (r *memcachedReconciler) setupWithManager(mgr ctrl.Manager, workers int) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&memcached{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Named("memcached-tutorial").
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(r)
}

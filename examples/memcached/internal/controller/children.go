package controller

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
)

// Labels on every child and pod. The operator's cache only holds objects
// labelled app.kubernetes.io/managed-by=opkit-memcached.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"

	// ManagedBy is the value of LabelManagedBy, and the field owner of
	// every write.
	ManagedBy = "opkit-memcached"
)

// PortName names the memcached port in the pods and the Service.
const PortName = "memcache"

// The memcache user and group of the official memcached image.
const memcacheUID = 11211

// selectorLabels are the labels selecting m's pods. They are the
// Deployment's selector, which is immutable: never change them.
func selectorLabels(m *v1beta1.Memcached) map[string]string {
	return map[string]string{
		LabelName:     "memcached",
		LabelInstance: m.Name,
	}
}

// childLabels are the labels of m's children and pods.
func childLabels(m *v1beta1.Memcached) map[string]string {
	l := selectorLabels(m)
	l[LabelManagedBy] = ManagedBy
	return l
}

// args is memcached's command line: the port and memory limit from the
// spec, then the extra arguments.
func args(m *v1beta1.Memcached) []string {
	a := []string{
		"-p", strconv.Itoa(int(m.Spec.Port)),
		"-m", strconv.Itoa(int(m.Spec.Cache.MemoryMB)),
	}
	return append(a, m.Spec.Cache.ExtraArgs...)
}

// desiredDeployment is the Deployment running m's pods. Every spec field
// ends up in it, so that any spec change rolls out.
//
// Numbers the API server would default (probe periods and thresholds) are
// set explicitly: reconcile.Children compares them even when zero.
func desiredDeployment(m *v1beta1.Memcached) *appsv1.Deployment {
	probe := func(initialDelay int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(PortName)}},
			InitialDelaySeconds: initialDelay,
			TimeoutSeconds:      1,
			PeriodSeconds:       10,
			SuccessThreshold:    1,
			FailureThreshold:    3,
		}
	}
	var spread []corev1.TopologySpreadConstraint
	for _, c := range m.Spec.Placement.TopologySpreadConstraints {
		c = *c.DeepCopy()
		if c.LabelSelector == nil {
			// The obvious intent: spread this Memcached's pods.
			c.LabelSelector = &metav1.LabelSelector{MatchLabels: selectorLabels(m)}
		}
		spread = append(spread, c)
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: childLabels(m)},
		Spec: appsv1.DeploymentSpec{
			Replicas:             ptr.To(m.Spec.Replicas),
			Selector:             &metav1.LabelSelector{MatchLabels: selectorLabels(m)},
			RevisionHistoryLimit: ptr.To[int32](2),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: childLabels(m)},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To[int64](memcacheUID),
						RunAsGroup:     ptr.To[int64](memcacheUID),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:    "memcached",
						Image:   m.Spec.Image,
						Command: []string{"memcached"},
						Args:    args(m),
						Ports: []corev1.ContainerPort{{
							Name: PortName, ContainerPort: m.Spec.Port, Protocol: corev1.ProtocolTCP,
						}},
						Resources:      *m.Spec.Resources.DeepCopy(),
						ReadinessProbe: probe(0),
						LivenessProbe:  probe(10),
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							RunAsNonRoot:             ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
					Affinity:                  m.Spec.Placement.Affinity.DeepCopy(),
					TopologySpreadConstraints: spread,
				},
			},
		},
	}
}

// desiredService is the headless Service giving m's pods DNS names.
// TargetPort and Protocol are set because the server defaults them.
func desiredService(m *v1beta1.Memcached) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: childLabels(m)},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  selectorLabels(m),
			Ports: []corev1.ServicePort{{
				Name:       PortName,
				Port:       m.Spec.Port,
				TargetPort: intstr.FromString(PortName),
				Protocol:   corev1.ProtocolTCP,
			}},
		},
	}
}

// desiredPDB is the PodDisruptionBudget allowing one of m's pods to be
// evicted at a time. It exists only when m has more than one pod.
func desiredPDB(m *v1beta1.Memcached) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: childLabels(m)},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: selectorLabels(m)},
		},
	}
}

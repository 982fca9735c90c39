package main

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/opkit-dev/opkit/reconcile"
)

// opkitDeployment is the Deployment examples/memcached creates for a
// Memcached of size 1 with the CRD's defaults (its desiredDeployment), with
// the digest label its library adds.
func opkitDeployment(ns, name string) *appsv1.Deployment {
	labels := map[string]string{"app.kubernetes.io/name": "memcached", "app.kubernetes.io/instance": name, "app.kubernetes.io/managed-by": "opkit-memcached"}
	probe := func(delay int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("memcache")}},
			InitialDelaySeconds: delay, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3,
		}
	}
	withDigest := map[string]string{reconcile.AppliedDigestLabel: "0123456789abcdef01234567"}
	for k, v := range labels {
		withDigest[k] = v
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: withDigest},
		Spec: appsv1.DeploymentSpec{
			Replicas:             ptr.To[int32](1),
			Selector:             &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "memcached", "app.kubernetes.io/instance": name}},
			RevisionHistoryLimit: ptr.To[int32](2),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](11211), RunAsGroup: ptr.To[int64](11211),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:           "memcached",
						Image:          "memcached:1.6",
						Command:        []string{"memcached"},
						Args:           []string{"-p", "11211", "-m", "64"},
						Ports:          []corev1.ContainerPort{{Name: "memcache", ContainerPort: 11211, Protocol: corev1.ProtocolTCP}},
						ReadinessProbe: probe(0),
						LivenessProbe:  probe(10),
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), RunAsNonRoot: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
}

// TestDirectChildrenAreOpkits: the direct and floor contenders create the
// Deployment the operator creates, up to the labels' values (and the
// operator's digest label).
func TestDirectChildrenAreOpkits(t *testing.T) {
	if err := sameChildren(contDirect, opkitDeployment("scale-opkit", "mc-00000"), newDeployment("scale-direct", "mc-00000")); err != nil {
		t.Error(err)
	}
}

func TestSameChildren(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(d *appsv1.Deployment)
		want   string // in the error; "" for none
	}{
		{name: "same", change: func(*appsv1.Deployment) {}},
		{name: "other label values", change: func(d *appsv1.Deployment) {
			d.Labels["app.kubernetes.io/name"] = "other"
			d.Spec.Template.Labels["app.kubernetes.io/name"] = "other"
			d.Spec.Selector.MatchLabels["app.kubernetes.io/name"] = "other"
		}},
		{name: "no digest label", change: func(d *appsv1.Deployment) { delete(d.Labels, reconcile.AppliedDigestLabel) }},
		{name: "no security context", change: func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].SecurityContext = nil }, want: "SecurityContext"},
		{name: "a label fewer on the pods", change: func(d *appsv1.Deployment) {
			delete(d.Spec.Template.Labels, "app.kubernetes.io/managed-by")
		}, want: "TemplateLabels"},
		{name: "a selector key more", change: func(d *appsv1.Deployment) {
			d.Spec.Selector.MatchLabels["app.kubernetes.io/managed-by"] = "x"
		}, want: "SelectorKeys"},
		{name: "other probe", change: func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].ReadinessProbe.PeriodSeconds = 5 }, want: "PeriodSeconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			other := opkitDeployment("scale-direct", "mc-00000")
			tc.change(other)
			err := sameChildren(contDirect, opkitDeployment("scale-opkit", "mc-00000"), other)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("want no error, got %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "newDeployment")):
				t.Errorf("want an error naming %q and newDeployment, got %v", tc.want, err)
			}
		})
	}
}

package controller

import (
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
)

const dataDir = "/var/lib/etcd"

// DefaultStorageSize is the claim size when spec.storage sets none.
var DefaultStorageSize = resource.MustParse("1Gi")

func selectorLabels(c *v1alpha1.EtcdCluster) map[string]string {
	return map[string]string{LabelCluster: c.Name}
}

func persistent(c *v1alpha1.EtcdCluster) bool { return !c.Spec.Storage.Ephemeral }

// headlessService gives every member a DNS name, ready or not.
func headlessService(c *v1alpha1.EtcdCluster) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: c.Namespace, Labels: selectorLabels(c)},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 selectorLabels(c),
			Ports: []corev1.ServicePort{
				{Name: "client", Port: ClientPort, TargetPort: intstr.FromInt32(ClientPort), Protocol: corev1.ProtocolTCP},
				{Name: "peer", Port: PeerPort, TargetPort: intstr.FromInt32(PeerPort), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// clientService is what applications use; it selects ready members only.
func clientService(c *v1alpha1.EtcdCluster) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name + "-client", Namespace: c.Namespace, Labels: selectorLabels(c)},
		Spec: corev1.ServiceSpec{
			Selector: selectorLabels(c),
			Ports: []corev1.ServicePort{
				{Name: "client", Port: ClientPort, TargetPort: intstr.FromInt32(ClientPort), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// podDisruptionBudget keeps a quorum of members through voluntary
// disruptions (node drains).
func podDisruptionBudget(c *v1alpha1.EtcdCluster) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: c.Namespace, Labels: selectorLabels(c)},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(int32(membership.Quorum(int(c.Spec.Size))))),
			Selector:     &metav1.LabelSelector{MatchLabels: selectorLabels(c)},
		},
	}
}

func dataClaim(c *v1alpha1.EtcdCluster, member string) *corev1.PersistentVolumeClaim {
	size := DefaultStorageSize
	if c.Spec.Storage.Size != nil {
		size = *c.Spec.Storage.Size
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: dataClaimName(member), Namespace: c.Namespace,
			Labels: map[string]string{LabelCluster: c.Name, LabelMember: member}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: c.Spec.Storage.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
}

// memberPod is the pod of one member. initialCluster and state are etcd's
// --initial-cluster and --initial-cluster-state; they are only read when the
// member's data directory is empty.
func memberPod(c *v1alpha1.EtcdCluster, member, version, initialCluster, state string) *corev1.Pod {
	labels := map[string]string{}
	maps.Copy(labels, c.Spec.PodTemplate.Labels)
	maps.Copy(labels, map[string]string{LabelCluster: c.Name, LabelMember: member, LabelVersion: version})
	annotations := map[string]string{}
	maps.Copy(annotations, c.Spec.PodTemplate.Annotations)
	annotations[AnnotationClusterToken] = c.Status.ClusterToken

	volume := corev1.Volume{Name: "data"}
	if persistent(c) {
		volume.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: dataClaimName(member)}
	} else {
		volume.EmptyDir = &corev1.EmptyDirVolumeSource{}
	}
	repo := c.Spec.Repository
	if repo == "" {
		repo = "gcr.io/etcd-development/etcd"
	}
	clientURL := InClusterClientURL(c, member)
	args := []string{
		"--name=" + member,
		"--data-dir=" + dataDir,
		fmt.Sprintf("--listen-peer-urls=http://0.0.0.0:%d", PeerPort),
		fmt.Sprintf("--listen-client-urls=http://0.0.0.0:%d", ClientPort),
		"--initial-advertise-peer-urls=" + PeerURL(c, member),
		"--advertise-client-urls=" + clientURL,
		"--initial-cluster=" + initialCluster,
		"--initial-cluster-state=" + state,
		"--initial-cluster-token=" + c.Status.ClusterToken,
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: member, Namespace: c.Namespace, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			Hostname:          member,
			Subdomain:         c.Name,
			RestartPolicy:     corev1.RestartPolicyAlways,
			NodeSelector:      c.Spec.PodTemplate.NodeSelector,
			Tolerations:       c.Spec.PodTemplate.Tolerations,
			PriorityClassName: c.Spec.PodTemplate.PriorityClassName,
			Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
					Weight: 100,
					PodAffinityTerm: corev1.PodAffinityTerm{
						TopologyKey:   corev1.LabelHostname,
						LabelSelector: &metav1.LabelSelector{MatchLabels: selectorLabels(c)},
					},
				}},
			}},
			Containers: []corev1.Container{{
				Name:      "etcd",
				Image:     fmt.Sprintf("%s:v%s", repo, strings.TrimPrefix(version, "v")),
				Command:   []string{"etcd"},
				Args:      args,
				Resources: c.Spec.PodTemplate.Resources,
				Ports: []corev1.ContainerPort{
					{Name: "client", ContainerPort: ClientPort, Protocol: corev1.ProtocolTCP},
					{Name: "peer", ContainerPort: PeerPort, Protocol: corev1.ProtocolTCP},
				},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/readyz", Port: intstr.FromInt32(ClientPort)}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: dataDir}},
			}},
			Volumes: []corev1.Volume{volume},
		},
	}
}

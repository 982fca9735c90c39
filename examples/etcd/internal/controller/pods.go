package controller

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
	"github.com/opkit-dev/opkit/examples/etcd/internal/seedrestore"
)

const dataDir = "/var/lib/etcd"

// The init containers of a seed pod restored physically (see
// ClusterHooks.RestoreImage and package internal/seedrestore), in order.
const (
	// InitContainerFetch runs the operator's fetch-backup: the backup
	// from its store into the data volume, verified.
	InitContainerFetch = "fetch-backup"
	// InitContainerRestore runs the cluster's etcdutl snapshot restore.
	InitContainerRestore = "restore"
	// InitContainerFinish runs the operator's finish-restore: the restored
	// member into the data directory.
	InitContainerFinish = "finish-restore"
)

// Annotations of a seed pod restored physically.
const (
	// AnnotationRestoreBackup names the EtcdBackup restored.
	AnnotationRestoreBackup = "etcd.opkit.dev/restore-backup"
	// AnnotationRestoreRevision is the backup's etcd revision, which the
	// restored member must hold before status.restored is set.
	AnnotationRestoreRevision = "etcd.opkit.dev/restore-revision"
)

// Where the fetch-backup init container finds the backup store.
const (
	// BackupStoreMountRoot is where a PVC store's claim is mounted, at
	// <root>/<namespace>/<pvcName>, as in the operator (--backup-root).
	BackupStoreMountRoot = "/backups"
	// S3SecretMountPath is where an S3 store's Secret is mounted.
	S3SecretMountPath = "/etc/opkit/backup-store"
	backupStoreVolume = "backup-store"
)

// seedRestore is what the init containers of a seed pod restored
// physically, or of a member restarted by a rebuild, need.
type seedRestore struct {
	// image is the operator's image.
	image string
	// source is the backup to restore; nil for a rebuild.
	source *restoreSource
	// rebuild is the token of the rebuild (rebuildToken) that restores
	// the member on its own data.
	rebuild string
}

// DefaultStorageSize is the claim size when spec.storage sets none.
var DefaultStorageSize = resource.MustParse("1Gi")

func selectorLabels(c *v1alpha1.EtcdCluster) map[string]string {
	return map[string]string{LabelCluster: c.Name}
}

func persistent(c *v1alpha1.EtcdCluster) bool { return !c.Spec.Storage.Ephemeral }

// serving reports whether clients may reach c's members: not while a
// backup is being restored into its seed.
func serving(c *v1alpha1.EtcdCluster) bool { return !restorePending(c) }

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

// clientService is what applications use: it selects serving members
// (LabelServing), and of those the Ready ones receive traffic.
func clientService(c *v1alpha1.EtcdCluster) *corev1.Service {
	selector := selectorLabels(c)
	selector[LabelServing] = "true"
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name + "-client", Namespace: c.Namespace, Labels: selectorLabels(c)},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports: []corev1.ServicePort{
				{Name: "client", Port: ClientPort, TargetPort: intstr.FromInt32(ClientPort), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// podDisruptionBudget keeps a quorum of the voting members through
// voluntary disruptions (node drains). It counts etcd's members, not
// spec.size: during a scale-down or a rollout they differ. Learners count
// towards the quorum but are not selected, so none can be evicted in a
// voter's place; it allows no eviction while one catches up. While step
// removes a voter, whose pod stays selected until it is deleted, it also
// keeps a quorum of the members after the removal.
func podDisruptionBudget(c *v1alpha1.EtcdCluster, obs *observation, step membership.Step) *policyv1.PodDisruptionBudget {
	members := len(c.Status.Members)
	if obs.planned.Reached {
		members = len(obs.planned.Members)
	}
	minAvailable := membership.Quorum(members)
	if step.Action == membership.ActionRemove && isVoter(obs, step.ID) {
		minAvailable = max(minAvailable, membership.Quorum(members-1)+1)
	}
	selector := selectorLabels(c)
	selector[LabelVoter] = "true"
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: c.Namespace, Labels: selectorLabels(c)},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(int32(minAvailable))),
			Selector:     &metav1.LabelSelector{MatchLabels: selector},
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
// member's data directory is empty. With restore, the pod is the seed of a
// physical restore: init containers create its data directory from the
// backup before etcd starts.
func memberPod(c *v1alpha1.EtcdCluster, member, version, initialCluster, state string, restore *seedRestore) *corev1.Pod {
	labels := map[string]string{}
	for k, v := range c.Spec.PodTemplate.Labels {
		if !reservedLabel(k) { // admission refuses them; objects stored before may have them
			labels[k] = v
		}
	}
	maps.Copy(labels, map[string]string{LabelCluster: c.Name, LabelMember: member, LabelVersion: version})
	if serving(c) {
		labels[LabelServing] = "true"
	}
	annotations := map[string]string{}
	maps.Copy(annotations, c.Spec.PodTemplate.Annotations)
	annotations[AnnotationClusterToken] = c.Status.ClusterToken
	annotations[AnnotationPodRevision] = PodRevision(c)

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
	image := fmt.Sprintf("%s:v%s", repo, strings.TrimPrefix(version, "v"))
	clientURL := InClusterClientURL(c, member)
	args := []string{
		"--name=" + member,
		"--data-dir=" + dataDir,
		fmt.Sprintf("--listen-peer-urls=%s://0.0.0.0:%d", scheme(c), PeerPort),
		fmt.Sprintf("--listen-client-urls=%s://0.0.0.0:%d", scheme(c), ClientPort),
		"--initial-advertise-peer-urls=" + PeerURL(c, member),
		"--advertise-client-urls=" + clientURL,
		"--initial-cluster=" + initialCluster,
		"--initial-cluster-state=" + state,
		"--initial-cluster-token=" + c.Status.ClusterToken,
	}
	args = append(args, specFlags(c)...)
	pod := &corev1.Pod{
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
				Image:     image,
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
	if tlsEnabled(c) {
		addTLS(c, pod)
	}
	switch {
	case restore == nil:
	case restore.rebuild != "":
		addRebuildInitContainers(c, pod, member, image, restore)
	default:
		addRestoreInitContainers(c, pod, member, image, initialCluster, restore)
	}
	return pod
}

// addTLS makes the etcd container of pod serve its peers and clients over
// TLS with the operator's copy of the certificates (status.tls), requiring
// client certificates on both ports, and probes it on the plain HTTP
// metrics port. The copy is immutable: the kubelet never changes what a
// running member reads, members move to new certificates by restarting.
func addTLS(c *v1alpha1.EtcdCluster, pod *corev1.Pod) {
	peer, server := tlsMountRoot+"/peer", tlsMountRoot+"/server"
	ctr := &pod.Spec.Containers[0]
	ctr.Args = append(ctr.Args,
		"--peer-cert-file="+peer+"/"+corev1.TLSCertKey,
		"--peer-key-file="+peer+"/"+corev1.TLSPrivateKeyKey,
		"--peer-trusted-ca-file="+peer+"/"+caKey,
		"--peer-client-cert-auth",
		"--cert-file="+server+"/"+corev1.TLSCertKey,
		"--key-file="+server+"/"+corev1.TLSPrivateKeyKey,
		"--trusted-ca-file="+server+"/"+caKey,
		"--client-cert-auth",
		fmt.Sprintf("--listen-metrics-urls=http://0.0.0.0:%d", MetricsPort),
	)
	ctr.Ports = append(ctr.Ports, corev1.ContainerPort{Name: "metrics", ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP})
	ctr.ReadinessProbe.HTTPGet.Port = intstr.FromInt32(MetricsPort)
	var items []corev1.KeyToPath
	for _, role := range []string{peerRole.name, serverRole.name} {
		for _, from := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, caKey} {
			items = append(items, corev1.KeyToPath{Key: copyKeys[role][from], Path: role + "/" + from})
		}
	}
	var name string
	if c.Status.TLS != nil {
		name = c.Status.TLS.SecretName
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: tlsVolume, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: name, Items: items, DefaultMode: ptr.To[int32](0o400)}}})
	ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: tlsVolume, MountPath: tlsMountRoot, ReadOnly: true})
}

// tlsVolume is the member pod's volume of the copy.
const tlsVolume = "tls"

// addRestoreInitContainers makes pod the seed of a physical restore: the
// operator's fetch-backup stages the backup in the data volume, the
// cluster's etcdutl restores it into a member data directory with the
// member's identity, and the operator's finish-restore moves it where etcd
// reads it. All three are no-ops on a restarted pod whose member has data
// (see package internal/seedrestore).
func addRestoreInitContainers(c *v1alpha1.EtcdCluster, pod *corev1.Pod, member, etcdImage, initialCluster string, r *seedRestore) {
	src := r.source
	pod.Annotations[AnnotationRestoreBackup] = src.name
	pod.Annotations[AnnotationRestoreRevision] = strconv.FormatInt(src.revision, 10)
	fetchArgs := []string{
		seedrestore.CommandFetch,
		"--" + seedrestore.FlagDataDir + "=" + dataDir,
		"--" + seedrestore.FlagBackupID + "=" + src.id,
		"--" + seedrestore.FlagPrefix + "=" + src.prefix,
	}
	store := corev1.Volume{Name: backupStoreVolume}
	var storeMount corev1.VolumeMount
	if ref := src.ref; ref.S3SecretName != "" {
		store.Secret = &corev1.SecretVolumeSource{SecretName: ref.S3SecretName}
		storeMount = corev1.VolumeMount{Name: backupStoreVolume, MountPath: S3SecretMountPath, ReadOnly: true}
		fetchArgs = append(fetchArgs, "--"+seedrestore.FlagS3SecretDir+"="+S3SecretMountPath)
	} else {
		store.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ref.PVCName, ReadOnly: true}
		mountPath := BackupStoreMountRoot + "/" + c.Namespace + "/" + ref.PVCName
		storeMount = corev1.VolumeMount{Name: backupStoreVolume, MountPath: mountPath, ReadOnly: true}
		fetchArgs = append(fetchArgs, "--"+seedrestore.FlagStoreDir+"="+mountPath)
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, store)
	pod.Spec.InitContainers = restoreSteps(c, r, etcdImage,
		corev1.Container{Name: InitContainerFetch, Args: fetchArgs, VolumeMounts: []corev1.VolumeMount{storeMount}},
		seedrestore.RestoreArgs(dataDir, member, initialCluster, c.Status.ClusterToken, PeerURL(c, member), canBumpRevision(pod.Labels[LabelVersion])),
		[]string{seedrestore.CommandFinish, "--" + seedrestore.FlagDataDir + "=" + dataDir})
}

// restoreSteps are the init containers of a restore into a member's data
// directory: stage, of the operator's image (given its name, args and
// mounts besides the data), etcdutl with restoreArgs, of the cluster's
// etcd image, and finish-restore with finishArgs. The operator's steps run
// as root, as etcd does in its image, to write the data volume etcdutl
// writes.
func restoreSteps(c *v1alpha1.EtcdCluster, r *seedRestore, etcdImage string, stage corev1.Container, restoreArgs, finishArgs []string) []corev1.Container {
	dataMount := corev1.VolumeMount{Name: "data", MountPath: dataDir}
	root := &corev1.SecurityContext{RunAsUser: ptr.To[int64](0), RunAsNonRoot: ptr.To(false)}
	resources := c.Spec.PodTemplate.Resources
	stage.Image, stage.Resources, stage.SecurityContext = r.image, resources, root
	stage.VolumeMounts = append([]corev1.VolumeMount{dataMount}, stage.VolumeMounts...)
	stage.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	return []corev1.Container{
		stage,
		{
			Name:                     InitContainerRestore,
			Image:                    etcdImage,
			Command:                  []string{"etcdutl"},
			Args:                     restoreArgs,
			Resources:                resources,
			VolumeMounts:             []corev1.VolumeMount{dataMount},
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		},
		{
			Name:                     InitContainerFinish,
			Image:                    r.image,
			Args:                     finishArgs,
			Resources:                resources,
			VolumeMounts:             []corev1.VolumeMount{dataMount},
			SecurityContext:          root,
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		},
	}
}

// canBumpRevision reports whether etcdutl of version restores with
// --bump-revision: 3.5.10 and later.
func canBumpRevision(version string) bool { return !lessVersion(version, "3.5.10") }

// revisionBump is how far the seed restored physically among obs's pods
// moved the revision on; 0 if none did.
func revisionBump(obs *observation) int64 {
	for _, pod := range obs.pods {
		if restoredPhysically(pod) && canBumpRevision(pod.Labels[LabelVersion]) {
			return seedrestore.RevisionBump
		}
	}
	return 0
}

// restoredPhysically reports whether pod is the seed of a physical
// restore.
func restoredPhysically(pod *corev1.Pod) bool {
	return pod != nil && pod.Annotations[AnnotationRestoreBackup] != ""
}

// podReady reports the pod's Ready condition.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

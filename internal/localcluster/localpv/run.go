package localpv

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

// Run runs the provisioning controller for p under provisionerName until ctx
// ends. It does not use leader election: every node runs its own process,
// and each acts only on its own node's claims and volumes. Run returns an
// error only for bad arguments.
func Run(ctx context.Context, cs kubernetes.Interface, provisionerName string, p *Provisioner) error {
	if cs == nil || p == nil || provisionerName == "" {
		return errors.New("localpv.Run: client, provisioner name and provisioner are required")
	}
	controller.NewProvisionController(ctx, cs, provisionerName, p, controller.LeaderElection(false)).Run(ctx)
	return nil
}

// StorageClass returns the cluster's default StorageClass, StorageClassName,
// served by provisionerName: volumeBindingMode WaitForFirstConsumer,
// reclaimPolicy Delete. If nodes are given, allowedTopologies restricts it
// to them (kubernetes.io/hostname), so that the scheduler places pods with
// such claims only on nodes that run a provisioner. allowedTopologies may be
// updated in place when nodes come and go (provisioner, reclaimPolicy and
// volumeBindingMode may not).
func StorageClass(provisionerName string, nodes ...string) *storagev1.StorageClass {
	reclaim := corev1.PersistentVolumeReclaimDelete
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{
		TypeMeta: metav1.TypeMeta{APIVersion: storagev1.SchemeGroupVersion.String(), Kind: "StorageClass"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        StorageClassName,
			Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"},
		},
		Provisioner:       provisionerName,
		ReclaimPolicy:     &reclaim,
		VolumeBindingMode: &mode,
	}
	if len(nodes) > 0 {
		sc.AllowedTopologies = []corev1.TopologySelectorTerm{{
			MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{
				Key: corev1.LabelHostname, Values: append([]string(nil), nodes...),
			}},
		}}
	}
	return sc
}

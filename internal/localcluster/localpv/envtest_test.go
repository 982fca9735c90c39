package localpv_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/localcluster/localpv"
	"github.com/opkit-dev/opkit/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// TestControllerProvisionsAndDeletes runs the real provision controller
// (Run) against envtest's API server.
//
// envtest has no kube-controller-manager and no scheduler, so the test plays
// their parts: it sets on the claim the annotations the scheduler
// (volume.kubernetes.io/selected-node) and the PV controller
// (volume.kubernetes.io/storage-provisioner) set, and marks the volume
// Released as the PV controller does once the claim is gone. In a real
// cluster the PV controller also binds the claim to the volume (claim phase
// Bound, spec.volumeName) and the protection controllers remove the
// kubernetes.io/pv[c]-protection finalizers; here the test asserts only what
// the provisioner itself does.
func TestControllerProvisionsAndDeletes(t *testing.T) {
	ctx := t.Context()
	c := env.Client
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	p := newProvisioner(t)

	sc := localpv.StorageClass(localpv.DefaultProvisionerName, node)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "localpv-test"}}
	for _, obj := range []client.Object{sc, ns} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- localpv.Run(runCtx, cs, localpv.DefaultProvisionerName, p) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns.Name, Name: "data-etcd-0",
			Annotations: map[string]string{
				"volume.kubernetes.io/selected-node":       node,
				"volume.kubernetes.io/storage-provisioner": localpv.DefaultProvisionerName,
			},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(localpv.StorageClassName),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse("2Gi"),
			}},
		},
	}
	if err := c.Create(ctx, pvc); err != nil {
		t.Fatalf("creating claim: %v", err)
	}

	pvName := "pvc-" + string(pvc.UID) // the library's volume name
	pv := &corev1.PersistentVolume{}
	if err := poll(ctx, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Name: pvName}, pv)
		return err == nil, client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatalf("waiting for PersistentVolume %s: %v", pvName, err)
	}
	dir := filepath.Join(p.Root(), ns.Name+"-"+pvc.Name+"-"+pvName)
	type summary struct {
		ProvisionedBy, StorageClass, Path, Node, Capacity string
		Claim                                             corev1.ObjectReference
		Reclaim                                           corev1.PersistentVolumeReclaimPolicy
	}
	got := summary{
		ProvisionedBy: pv.Annotations["pv.kubernetes.io/provisioned-by"],
		StorageClass:  pv.Spec.StorageClassName,
		Node:          pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values[0],
		Capacity:      pv.Spec.Capacity.Storage().String(),
		Reclaim:       pv.Spec.PersistentVolumeReclaimPolicy,
	}
	if pv.Spec.HostPath != nil {
		got.Path = pv.Spec.HostPath.Path
	}
	if pv.Spec.ClaimRef != nil {
		got.Claim = corev1.ObjectReference{Namespace: pv.Spec.ClaimRef.Namespace, Name: pv.Spec.ClaimRef.Name, UID: pv.Spec.ClaimRef.UID}
	}
	want := summary{
		ProvisionedBy: localpv.DefaultProvisionerName,
		StorageClass:  localpv.StorageClassName,
		Path:          dir,
		Node:          node,
		Capacity:      "2Gi",
		Claim:         corev1.ObjectReference{Namespace: ns.Name, Name: pvc.Name, UID: pvc.UID},
		Reclaim:       corev1.PersistentVolumeReclaimDelete,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("provisioned PersistentVolume mismatch (-want +got):\n%s", diff)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("volume directory %s: %v", dir, err)
	}

	// The claim goes; the PV controller would then mark the volume Released.
	if err := c.Delete(ctx, pvc); err != nil {
		t.Fatalf("deleting claim: %v", err)
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKey{Name: pvName}, pv); err != nil {
			return err
		}
		pv.Status.Phase = corev1.VolumeReleased
		return c.Status().Update(ctx, pv)
	}); err != nil {
		t.Fatalf("marking volume Released: %v", err)
	}
	// The provisioner removes the directory and deletes the volume (which
	// the kubernetes.io/pv-protection finalizer, removed by
	// kube-controller-manager in a real cluster, may keep visible).
	if err := poll(ctx, func(ctx context.Context) (bool, error) {
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		err := c.Get(ctx, client.ObjectKey{Name: pvName}, pv)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && pv.DeletionTimestamp != nil, err
	}); err != nil {
		t.Fatalf("waiting for the directory and PersistentVolume %s to go: %v", pvName, err)
	}
}

// poll calls cond every 100ms until it returns true or an error, or 30s pass.
func poll(ctx context.Context, cond wait.ConditionWithContextFunc) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, cond)
}

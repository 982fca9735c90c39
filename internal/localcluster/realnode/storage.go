package realnode

import (
	"context"
	"fmt"
	"path/filepath"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/opkit-dev/opkit/internal/localcluster/localpv"
)

// startProvisioners starts one local-path provisioner per node (volumes
// live on the node that first mounts the claim: WaitForFirstConsumer) and
// creates the default StorageClass, so that a PVC binds with no PV made in
// advance.
func startProvisioners(ctx context.Context, cs kubernetes.Interface, binDir string, nodes []node) error {
	// The class's topology names the real nodes, so the scheduler never
	// puts a pod with such a claim on a fake node.
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.name()
	}
	sc := localpv.StorageClass(localpv.DefaultProvisionerName, names...)
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating StorageClass %s: %w", sc.Name, err)
	}
	for _, n := range nodes {
		d := daemon{
			name: "local-path-provisioner",
			path: filepath.Join(binDir, "local-path-provisioner"),
			args: []string{
				"--kubeconfig", provisionerIdentity.kubeconfig(),
				"--node-name", n.name(),
				"--root", n.dir("volumes"),
			},
			logFile: n.dir("logs", "local-path-provisioner.log"),
		}
		if err := d.start(); err != nil {
			return fmt.Errorf("node %s: %w", n.name(), err)
		}
	}
	return nil
}

package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/opkit-dev/opkit/internal/localcluster/procs"
)

// Spec says which real nodes to start and for which cluster.
type Spec struct {
	// Cluster names the cluster the nodes join; it is recorded as their
	// owner (see Owner).
	Cluster string
	// Nodes is how many real nodes to start (at least 1).
	Nodes int
	// BinDir holds containerd, containerd-shim-runc-v2, ctr, kubelet,
	// kube-proxy, coredns, local-path-provisioner and registry (make
	// node-tools).
	BinDir string
	// PKIDir is the cluster's pki directory (ca.crt, ca.key), whose CA
	// signs the nodes' certificates. The API server must run with
	// KwokctlConfig(PKIDir).
	PKIDir string
	// Kubeconfig is an admin kubeconfig of the cluster, used to create the
	// daemons' roles and the StorageClass and to wait for the nodes. Its
	// server is what the daemons connect to.
	Kubeconfig []byte
	// Images are image tarballs (make images) pushed to the nodes'
	// registry (RegistryAddress), which every node pulls from.
	Images []string
}

// ErrInUse is returned by Up when real nodes already run on this machine:
// only one set runs at a time. Down removes them.
var ErrInUse = errors.New("real nodes already run on this machine")

func ownerPath() string { return filepath.Join(StateDir, "owner") }

// Owner returns the cluster whose real nodes this machine runs (or holds
// leftovers of), and false when there are none.
func Owner() (string, bool) {
	b, err := os.ReadFile(ownerPath())
	if err != nil {
		_, statErr := os.Stat(StateDir)
		return "", statErr == nil
	}
	return strings.TrimSpace(string(b)), true
}

// Up starts the real nodes of spec and waits until they are Ready and
// cluster DNS answers. On failure it leaves what it started for Down, which
// the caller must run (the e2e harness and hack/cluster do).
func Up(ctx context.Context, spec Spec) error {
	if os.Geteuid() != 0 {
		return errNotRoot
	}
	if spec.Nodes < 1 {
		return fmt.Errorf("real nodes: %d nodes asked for, want at least 1", spec.Nodes)
	}
	if owner, ok := Owner(); ok {
		return fmt.Errorf("%w (cluster %q; `make cluster-down` or hack/cluster down removes them)", ErrInUse, owner)
	}
	if err := checkBinaries(spec.BinDir); err != nil {
		return err
	}
	for _, dir := range []string{StateDir, sharedDir("logs"), sharedDir("pki"), RunDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(ownerPath(), []byte(spec.Cluster+"\n"), 0o644); err != nil {
		return err
	}
	restCfg, err := clientcmd.RESTConfigFromKubeConfig(spec.Kubeconfig)
	if err != nil {
		return fmt.Errorf("real nodes: the admin kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	authority, err := loadCA(spec.PKIDir)
	if err != nil {
		return err
	}
	server := restCfg.Host

	if err := setSysctls(ctx); err != nil {
		return err
	}
	nodes := make([]node, spec.Nodes)
	for i := range nodes {
		nodes[i] = node{index: i}
		if err := addBridge(ctx, nodes[i]); err != nil {
			return err
		}
	}
	if err := addGuard(); err != nil {
		return err
	}
	if err := startRegistry(ctx, spec.BinDir); err != nil {
		return err
	}
	if err := pushImages(ctx, spec.Images); err != nil {
		return err
	}
	for _, n := range nodes {
		if err := startContainerd(ctx, n, spec.BinDir); err != nil {
			return fmt.Errorf("node %s: %w", n.name(), err)
		}
		if err := startKubelet(n, spec.BinDir, server, authority); err != nil {
			return err
		}
	}
	for _, id := range []identity{kubeProxyIdentity, coreDNSIdentity, provisionerIdentity} {
		if err := id.create(ctx, cs, authority, server); err != nil {
			return err
		}
	}
	if err := startKubeProxy(spec.BinDir, kubeProxyIdentity.kubeconfig()); err != nil {
		return err
	}
	if err := startCoreDNS(ctx, spec.BinDir); err != nil {
		return err
	}
	if err := startProvisioners(ctx, cs, spec.BinDir, nodes); err != nil {
		return err
	}
	return waitNodesReady(ctx, cs, nodes)
}

// nodeBinaries are what Up runs from BinDir.
var nodeBinaries = []string{"containerd", "containerd-shim-runc-v2", "ctr", "kubelet", "kube-proxy", "coredns", "local-path-provisioner", "registry"}

// ErrMissingBinary is wrapped by errors about a node binary absent from
// the bin directory.
var ErrMissingBinary = errors.New("missing binary: run `make node-tools`")

func checkBinaries(binDir string) error {
	var missing []string
	for _, b := range nodeBinaries {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			missing = append(missing, b)
		}
	}
	for _, b := range []string{"runc", "iptables", "ip"} {
		if _, err := lookPath(b); err != nil {
			missing = append(missing, b+" (system)")
		}
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		missing = append(missing, "/usr/lib/cni/bridge (system)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("real nodes need %s in %s: %w", strings.Join(missing, ", "), binDir, ErrMissingBinary)
	}
	return nil
}

// waitNodesReady waits until every node is registered and Ready.
func waitNodesReady(ctx context.Context, cs kubernetes.Interface, nodes []node) error {
	for _, n := range nodes {
		err := waitFor(ctx, 3*time.Minute, "node "+n.name()+" to be Ready", func() error {
			if len(procs.With("--root-dir="+n.dir("kubelet"))) == 0 {
				return &exitedError{fmt.Errorf("the kubelet exited; the end of its log:\n%s", tail(n.dir("logs", "kubelet.log"), 3000))}
			}
			got, err := cs.CoreV1().Nodes().Get(ctx, n.name(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range got.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					return nil
				}
				if c.Type == corev1.NodeReady {
					return fmt.Errorf("condition Ready is %s: %s", c.Status, c.Message)
				}
			}
			return errors.New("no Ready condition yet")
		})
		if err != nil {
			return fmt.Errorf("%w (kubelet log: %s)", err, n.dir("logs", "kubelet.log"))
		}
	}
	return nil
}

// Command cluster starts and stops opkit's local cluster (see
// internal/localcluster). The Makefile's cluster-up and cluster-down targets
// run it:
//
//	cd hack && go run ./cluster up   --name opkit --nodes 3 --kubeconfig ../.local/kubeconfig
//	cd hack && go run ./cluster up   --name opkit --real-nodes 1 --images ../.local/images
//	cd hack && go run ./cluster down --name opkit --kubeconfig ../.local/kubeconfig
//
// With --real-nodes N (root only) the cluster also gets N real nodes
// (internal/localcluster/realnode): containerd, a kubelet, kube-proxy,
// CoreDNS and a local-path provisioner on this machine, with the image
// tarballs of --images loaded, and no fake nodes unless --nodes asks: those
// are then tainted (fakeNodeTaint), so that only pods that tolerate it
// land on a node that runs nothing. down removes them with the cluster.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/opkit-dev/opkit/internal/localcluster"
	"github.com/opkit-dev/opkit/internal/localcluster/realnode"
	"github.com/opkit-dev/opkit/internal/repo"
)

// defaultName is the cluster name of make's CLUSTER_NAME default.
const defaultName = "opkit"

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "up" && os.Args[1] != "down") {
		fmt.Fprintln(os.Stderr, "usage: cluster up|down [--name NAME] [--nodes N] [--real-nodes N] [--images DIR] [--kubeconfig PATH] [--bin DIR]")
		os.Exit(2)
	}
	verb := os.Args[1]
	fs := flag.NewFlagSet(verb, flag.ExitOnError)
	name := fs.String("name", defaultName, "kwokctl cluster name")
	nodes := fs.Int("nodes", -1, "number of fake (kwok) nodes (default 3, or 0 with --real-nodes)")
	kubeconfig := fs.String("kubeconfig", ".local/kubeconfig", "where to write the cluster's kubeconfig")
	realNodes := fs.Int("real-nodes", 0, "number of real nodes (kubelet + containerd; needs root)")
	images := fs.String("images", ".local/images", "image tarballs to load into the real nodes (make images)")
	bin := fs.String("bin", "", "directory with kwokctl and the cluster binaries (default: the repository's bin/)")
	_ = fs.Parse(os.Args[2:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, verb, *name, *nodes, *realNodes, *images, *kubeconfig, *bin)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, verb, name string, nodes, realNodes int, images, kubeconfig, bin string) error {
	if bin == "" {
		var err error
		if bin, err = repo.BinDir(); err != nil {
			return err
		}
	}
	kubeconfig, err := filepath.Abs(kubeconfig)
	if err != nil {
		return err
	}
	c := &localcluster.Cluster{Name: name, BinDir: bin}
	// Real nodes are one cluster's at a time; an e2e suite holds this lock
	// while its cluster has them.
	if verb == "down" || realNodes > 0 {
		unlock, err := localcluster.LockRealNodes(ctx)
		if err != nil {
			return err
		}
		defer unlock()
	}
	if verb == "down" {
		return down(ctx, c, kubeconfig)
	}
	if realNodes < 0 {
		return fmt.Errorf("--real-nodes=%d: want 0 or more", realNodes)
	}
	if images, err = filepath.Abs(images); err != nil {
		return err
	}
	if nodes < 0 {
		// With real nodes, what a user applies must land on them.
		nodes = 3
		if realNodes > 0 {
			nodes = 0
		}
	}
	return up(ctx, c, nodes, realNodes, images, kubeconfig)
}

func up(ctx context.Context, c *localcluster.Cluster, nodes, realNodes int, images, kubeconfig string) error {
	exists, err := c.Exists(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	owner, hasReal := localcluster.RealNodeOwner()
	switch {
	case exists && realNodes > 0 && (!hasReal || owner != c.Name):
		return fmt.Errorf("cluster %q exists without real nodes, which need a cluster created for them: `make cluster-down` first", c.Name)
	case exists:
		fmt.Printf("cluster %q already exists; reusing it\n", c.Name)
	default:
		if realNodes > 0 && hasReal {
			return fmt.Errorf("real nodes of cluster %q already run on this machine (one cluster at a time): `make cluster-down CLUSTER_NAME=%s` first", owner, owner)
		}
		fmt.Printf("creating cluster %q (kube-apiserver %s, etcd %s, kwok fake nodes)...\n", c.Name, localcluster.KubeVersion, localcluster.EtcdVersion)
		var args []string
		if realNodes > 0 {
			if args, err = c.RealNodeArgs(filepath.Dir(kubeconfig)); err != nil {
				return err
			}
		}
		if err := c.Create(ctx, args...); err != nil {
			return err
		}
		if realNodes > 0 {
			fmt.Printf("starting %d real nodes (containerd, kubelet, kube-proxy, CoreDNS, local-path provisioner, registry)...\n", realNodes)
			if err := c.StartRealNodes(ctx, realNodes, images); err != nil {
				return fmt.Errorf("%w\n(the nodes' logs are in %s until make cluster-down)", err, realnode.StateDir)
			}
		}
	}
	if err := c.ScaleNodes(ctx, nodes); err != nil {
		return err
	}
	cfg, err := c.Kubeconfig(ctx)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(kubeconfig), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfig, cfg, 0o600); err != nil {
		return err
	}
	if realNodes > 0 && nodes > 0 {
		rc, err := clientcmd.RESTConfigFromKubeConfig(cfg)
		if err != nil {
			return err
		}
		if err := taintFakeNodes(ctx, rc); err != nil {
			return err
		}
		fmt.Printf("the fake nodes are tainted %s: pods land on the real nodes unless they tolerate it (kubectl get pods -o wide shows the node)\n", fakeNodeTaint.ToString())
	}
	down := "make cluster-down"
	if c.Name != defaultName {
		down += " CLUSTER_NAME=" + c.Name
	}
	fmt.Printf(`cluster %q is ready with %d fake and %d real nodes (%s).

  export KUBECONFIG=%s PATH=%s:$PATH
  kubectl get nodes
  make run-memcached         # install the Memcached CRD and run its operator against the cluster
  %-26s # stop it and remove its state
`, c.Name, nodes, realNodes, time.Since(start).Round(time.Second), kubeconfig, c.BinDir, down)
	return nil
}

func down(ctx context.Context, c *localcluster.Cluster, kubeconfig string) error {
	exists, err := c.Exists(ctx)
	if err != nil {
		return err
	}
	// Real nodes go first (their kubelets talk to the cluster); leftovers
	// of a cluster that is gone are removed too.
	if owner, ok := localcluster.RealNodeOwner(); ok && (owner == c.Name || !clusterExists(ctx, c.BinDir, owner)) {
		if err := c.StopRealNodes(ctx); err != nil {
			return err
		}
		fmt.Printf("real nodes of cluster %q removed\n", owner)
	}
	if exists {
		if err := c.Delete(ctx); err != nil {
			return err
		}
		fmt.Printf("cluster %q deleted\n", c.Name)
	} else {
		fmt.Printf("cluster %q does not exist\n", c.Name)
	}
	if err := os.Remove(kubeconfig); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// clusterExists reports whether kwokctl knows a cluster of that name.
func clusterExists(ctx context.Context, bin, name string) bool {
	c := &localcluster.Cluster{Name: name, BinDir: bin}
	ok, err := c.Exists(ctx)
	return err == nil && ok
}

// fakeNodeTaint keeps the pods a user applies off kwok's fake nodes in a
// cluster with real ones: a pod there is Running on paper and never runs.
var fakeNodeTaint = corev1.Taint{Key: "opkit.dev/fake-node", Value: "true", Effect: corev1.TaintEffectNoSchedule}

// taintFakeNodes adds fakeNodeTaint to the nodes kwok fakes (label
// type=kwok).
func taintFakeNodes(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
	if err != nil {
		return fmt.Errorf("listing the fake nodes: %w", err)
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&fakeNodeTaint) }) {
			continue
		}
		n.Spec.Taints = append(n.Spec.Taints, fakeNodeTaint)
		if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("tainting fake node %s: %w", n.Name, err)
		}
	}
	return nil
}

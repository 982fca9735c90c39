// Command cluster starts and stops opkit's local cluster (see
// internal/localcluster). The Makefile's cluster-up and cluster-down targets
// run it:
//
//	go run ./hack/cluster up   --name opkit --nodes 3 --kubeconfig .local/kubeconfig
//	go run ./hack/cluster down --name opkit --kubeconfig .local/kubeconfig
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/opkit-dev/opkit/internal/localcluster"
	"github.com/opkit-dev/opkit/internal/repo"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "up" && os.Args[1] != "down") {
		fmt.Fprintln(os.Stderr, "usage: cluster up|down [--name NAME] [--nodes N] [--kubeconfig PATH] [--bin DIR]")
		os.Exit(2)
	}
	verb := os.Args[1]
	fs := flag.NewFlagSet(verb, flag.ExitOnError)
	name := fs.String("name", "opkit", "kwokctl cluster name")
	nodes := fs.Int("nodes", 3, "number of fake (kwok) nodes")
	kubeconfig := fs.String("kubeconfig", ".local/kubeconfig", "where to write the cluster's kubeconfig")
	bin := fs.String("bin", "", "directory with kwokctl and the cluster binaries (default: the repository's bin/)")
	_ = fs.Parse(os.Args[2:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, verb, *name, *nodes, *kubeconfig, *bin)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, verb, name string, nodes int, kubeconfig, bin string) error {
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
	if verb == "down" {
		return down(ctx, c, kubeconfig)
	}
	return up(ctx, c, nodes, kubeconfig)
}

func up(ctx context.Context, c *localcluster.Cluster, nodes int, kubeconfig string) error {
	exists, err := c.Exists(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	if exists {
		fmt.Printf("cluster %q already exists; reusing it\n", c.Name)
	} else {
		fmt.Printf("creating cluster %q (kube-apiserver %s, etcd %s, kwok fake nodes)...\n", c.Name, localcluster.KubeVersion, localcluster.EtcdVersion)
		if err := c.Create(ctx); err != nil {
			return err
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
	fmt.Printf(`cluster %q is ready with %d fake nodes (%s).

  export KUBECONFIG=%s
  kubectl get nodes          # kubectl is in bin/
  make run-memcached         # run the memcached operator against it
  make cluster-down          # stop it and remove its state
`, c.Name, nodes, time.Since(start).Round(time.Second), kubeconfig)
	return nil
}

func down(ctx context.Context, c *localcluster.Cluster, kubeconfig string) error {
	exists, err := c.Exists(ctx)
	if err != nil {
		return err
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

// Command local-path-provisioner provisions PersistentVolumes for claims of
// StorageClasses served by --provisioner-name: a directory under --root on
// node --node-name, exposed as a hostPath volume pinned to that node. See
// package internal/localcluster/localpv.
//
//	local-path-provisioner --kubeconfig PATH --node-name NODE --root DIR \
//		[--provisioner-name opkit.dev/local-path]
//
// It runs until SIGINT or SIGTERM. klog's flags (-v=4 and so on) are accepted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/opkit-dev/opkit/internal/localcluster/localpv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "local-path-provisioner:", err)
		os.Exit(1)
	}
}

func run() error {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster (required)")
	node := flag.String("node-name", "", "the node this process provisions for; must equal its kubernetes.io/hostname label (required)")
	root := flag.String("root", "", "absolute directory the volume directories are created in (required)")
	name := flag.String("provisioner-name", localpv.DefaultProvisionerName, "the provisioner name StorageClasses use")
	klog.InitFlags(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	for _, f := range []struct{ name, value string }{{"--kubeconfig", *kubeconfig}, {"--node-name", *node}, {"--root", *root}, {"--provisioner-name", *name}} {
		if f.value == "" {
			flag.Usage()
			return errors.New(f.name + " is required")
		}
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("loading --kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building client: %w", err)
	}
	p, err := localpv.New(*root, *node)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	klog.InfoS("Starting local-path provisioner", "provisioner", *name, "node", *node, "root", p.Root())
	return localpv.Run(ctx, cs, *name, p)
}

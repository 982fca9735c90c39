package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/opkit-dev/opkit/internal/localcluster/realnode"
)

// WorkDir returns kwokctl's work directory: $KWOK_WORKDIR, or ~/.kwok.
func WorkDir() (string, error) {
	if d := os.Getenv("KWOK_WORKDIR"); d != "" {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".kwok"), nil
}

// PKIDir returns the directory where kwokctl keeps the cluster's CA and
// admin certificate.
func (c *Cluster) PKIDir() (string, error) {
	wd, err := WorkDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(wd, "clusters", c.Name, "pki"), nil
}

// RealNodeArgs writes the kwokctl configuration a cluster with real nodes
// needs (realnode.KwokctlConfig) into dir and returns the `kwokctl create
// cluster` arguments that use it.
func (c *Cluster) RealNodeArgs(dir string) ([]string, error) {
	pki, err := c.PKIDir()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, c.Name+"-realnode.yaml")
	if err := os.WriteFile(path, realnode.KwokctlConfig(pki), 0o644); err != nil {
		return nil, err
	}
	return []string{"--config", path}, nil
}

// StartRealNodes starts n real nodes (kubelet + containerd, see package
// realnode) for the cluster, created with RealNodeArgs, with the image
// tarballs in imagesDir (`make images`) pushed to their registry.
func (c *Cluster) StartRealNodes(ctx context.Context, n int, imagesDir string) error {
	images, err := filepath.Glob(filepath.Join(imagesDir, "*.tar"))
	if err != nil {
		return err
	}
	if len(images) == 0 {
		return fmt.Errorf("no image tarballs in %s: run `make images`", imagesDir)
	}
	pki, err := c.PKIDir()
	if err != nil {
		return err
	}
	kubeconfig, err := c.Kubeconfig(ctx)
	if err != nil {
		return err
	}
	return realnode.Up(ctx, realnode.Spec{
		Cluster:    c.Name,
		Nodes:      n,
		BinDir:     c.BinDir,
		PKIDir:     pki,
		Kubeconfig: kubeconfig,
		Images:     images,
	})
}

// StopRealNodes removes the real nodes of this machine (realnode.Down).
func (c *Cluster) StopRealNodes(ctx context.Context) error {
	return realnode.Down(ctx, c.BinDir)
}

// LockRealNodes takes the machine-wide lock that lets one cluster at a
// time have real nodes (they share the host's network namespace and
// iptables), waiting for it until ctx ends, and returns the func that
// releases it. The lock is released with the process, however it ends.
func LockRealNodes(ctx context.Context) (func(), error) {
	return lockFile(ctx, filepath.Join(os.TempDir(), "opkit-realnode.lock"), "the real nodes of another cluster to go")
}

// RealNodeOwner returns the cluster whose real nodes run on this machine,
// if any.
func RealNodeOwner() (string, bool) { return realnode.Owner() }

// IsOrphan reports whether name is a cluster named after the process that
// made it, prefix+PID (as the e2e harness names them), whose process is
// gone.
func IsOrphan(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return false
	}
	var pid int
	if _, err := fmt.Sscanf(rest, "%d", &pid); err != nil || pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err != nil && !errors.Is(err, syscall.EPERM)
}

package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opkit-dev/opkit/internal/localcluster"
	"github.com/opkit-dev/opkit/internal/localcluster/realnode"
	"github.com/opkit-dev/opkit/internal/repo"
)

// realNodes is the real-node part of a suite's kwok cluster.
type realNodes struct {
	cluster    *localcluster.Cluster
	n          int
	imagesDir  string
	createArgs []string
	unlock     func()
}

// prepareRealNodes takes the machine-wide real-node lock (waiting for
// another suite's nodes to go), removes the leftovers of a killed suite,
// and writes the kwokctl configuration the cluster must be created with.
func prepareRealNodes(c *localcluster.Cluster, n int) (*realNodes, error) {
	images, err := imagesDir()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	unlock, err := localcluster.LockRealNodes(ctx)
	if err != nil {
		return nil, err
	}
	if err := removeOrphanedRealNodes(ctx, c.BinDir); err != nil {
		unlock()
		return nil, err
	}
	dir, err := os.MkdirTemp("", "opkit-e2e-realnode-")
	if err != nil {
		unlock()
		return nil, err
	}
	args, err := c.RealNodeArgs(dir)
	if err != nil {
		unlock()
		return nil, err
	}
	return &realNodes{cluster: c, n: n, imagesDir: images, createArgs: args, unlock: func() {
		_ = os.RemoveAll(dir)
		unlock()
	}}, nil
}

func (r *realNodes) start(ctx context.Context) error {
	start := time.Now()
	if err := r.cluster.StartRealNodes(ctx, r.n, r.imagesDir); err != nil {
		return fmt.Errorf("starting %d real nodes: %w", r.n, err)
	}
	fmt.Fprintf(os.Stderr, "e2e harness: %d real nodes Ready in %s\n", r.n, time.Since(start).Round(time.Second))
	return nil
}

// stop removes the real nodes; errors are printed (a finish step's errors
// are otherwise only logged at a high verbosity by e2e-framework).
func (r *realNodes) stop(ctx context.Context) {
	if err := r.cluster.StopRealNodes(context.WithoutCancel(ctx)); err != nil {
		fmt.Fprintln(os.Stderr, "e2e harness: removing the real nodes:", err)
	}
}

// removeOrphanedRealNodes removes real nodes whose cluster was made by a
// suite that is gone (killed before it could clean up), and that cluster.
// Real nodes of a live suite that does not hold the lock (a test driving
// hack/cluster, which holds it only while it runs) are waited for. Those of
// a cluster someone started by hand (make cluster-up REAL_NODES=N) are left
// alone: that is an error naming the fix.
func removeOrphanedRealNodes(ctx context.Context, binDir string) error {
	owner, ok := localcluster.RealNodeOwner()
	for ok && strings.HasPrefix(owner, ClusterPrefix) && !localcluster.IsOrphan(owner, ClusterPrefix) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the real nodes of %s to go: %w", owner, ctx.Err())
		case <-time.After(time.Second):
		}
		owner, ok = localcluster.RealNodeOwner()
	}
	if !ok {
		return nil
	}
	if owner != "" && !localcluster.IsOrphan(owner, ClusterPrefix) {
		return fmt.Errorf("real nodes of cluster %q run on this machine: `make cluster-down CLUSTER_NAME=%s` first", owner, owner)
	}
	fmt.Fprintf(os.Stderr, "e2e harness: removing the real nodes left by cluster %q\n", owner)
	c := &localcluster.Cluster{Name: owner, BinDir: binDir}
	if err := c.StopRealNodes(ctx); err != nil {
		return fmt.Errorf("removing leftover real nodes: %w", err)
	}
	if owner == "" {
		return nil
	}
	if exists, err := c.Exists(ctx); err != nil || !exists {
		return err
	}
	return c.Delete(ctx)
}

// imagesDir is where the image tarballs of make images are: E2E_IMAGES, or
// .local/images of the repository.
func imagesDir() (string, error) {
	if dir := os.Getenv(EnvImages); dir != "" {
		return dir, nil
	}
	root, err := repo.Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".local", "images"), nil
}

// KillRealNode stops the real node named node as a power loss would
// (realnode.Kill): its Node object stays and never reports again. The
// suite must have asked for real nodes of the kwok provider.
func KillRealNode(ctx context.Context, node string) error {
	if p := os.Getenv(EnvProvider); p != "" && p != "kwok" {
		return fmt.Errorf("killing node %s: only the kwok provider's real nodes can be killed, not %s's", node, p)
	}
	if i, ok := realnode.NodeIndex(node); ok {
		return realnode.Kill(ctx, i)
	}
	return fmt.Errorf("killing node %s: not a real node's name (%s)", node, realnode.NodeName(0))
}

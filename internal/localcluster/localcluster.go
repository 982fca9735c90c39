// Package localcluster runs a local Kubernetes cluster without Docker: kwokctl's
// binary runtime starts a real etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler as local processes, and kwok fakes the nodes (pods on them get
// Running without running containers).
//
// All binaries come from opkit's bin/ directory, where `make cluster-tools`
// builds them from source; nothing is downloaded. A missing binary is an error
// naming that make target.
//
// It backs `make cluster-up` / `make cluster-down` (hack/cluster) and the e2e
// harness (e2e/harness), so both start clusters the same way.
package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gofrs/flock"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/opkit-dev/opkit/internal/localcluster/procs"
)

// KubeVersion is the Kubernetes version of the binaries hack/install-tool.sh
// builds; kwokctl uses it to pick component flags.
const KubeVersion = "v1.36.3"

// EtcdVersion is the etcd version hack/install-tool.sh builds.
const EtcdVersion = "3.6.16"

// binaryEnv maps each kwokctl environment variable to the binary in bin/.
var binaryEnv = []struct{ env, file string }{
	{"KWOK_KUBE_APISERVER_BINARY", "kube-apiserver"},
	{"KWOK_KUBE_CONTROLLER_MANAGER_BINARY", "kube-controller-manager"},
	{"KWOK_KUBE_SCHEDULER_BINARY", "kube-scheduler"},
	{"KWOK_KUBECTL_BINARY", "kubectl"},
	{"KWOK_CONTROLLER_BINARY", "kwok"},
	{"KWOK_ETCD_BINARY", "etcd"},
}

// ErrMissingBinary is wrapped by errors about a binary absent from bin/.
var ErrMissingBinary = errors.New("missing binary: run `make cluster-tools`")

// Environ returns the environment variables that make kwokctl use the binary
// runtime with the binaries in binDir, or an error wrapping ErrMissingBinary
// that names every missing binary.
func Environ(binDir string) ([]string, error) {
	env := []string{
		"KWOK_RUNTIME=binary",
		"KWOK_KUBE_VERSION=" + KubeVersion,
		"KWOK_ETCD_VERSION=" + EtcdVersion,
	}
	var missing []string
	for _, b := range binaryEnv {
		p := filepath.Join(binDir, b.file)
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, b.file)
			continue
		}
		env = append(env, b.env+"="+p)
	}
	if _, err := os.Stat(filepath.Join(binDir, "kwokctl")); err != nil {
		missing = append(missing, "kwokctl")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("local cluster needs %s in %s: %w", strings.Join(missing, ", "), binDir, ErrMissingBinary)
	}
	return env, nil
}

// Setenv sets Environ's variables in this process, for tools such as
// e2e-framework's kwok provider that run kwokctl with the process environment.
func Setenv(binDir string) error {
	env, err := Environ(binDir)
	if err != nil {
		return err
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if err := os.Setenv(k, v); err != nil {
			return fmt.Errorf("setting %s: %w", k, err)
		}
	}
	return nil
}

// Cluster is one named kwokctl cluster.
type Cluster struct {
	// Name is the kwokctl cluster name.
	Name string
	// BinDir holds kwokctl and the component binaries.
	BinDir string
}

// Kwokctl returns the path of the kwokctl binary.
func (c *Cluster) Kwokctl() string { return filepath.Join(c.BinDir, "kwokctl") }

func (c *Cluster) run(ctx context.Context, args ...string) ([]byte, error) {
	env, err := Environ(c.BinDir)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, c.Kwokctl(), append([]string{"--name", c.Name}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kwokctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// Create creates the cluster and waits until it is ready. The QPS limits of
// the components are off, so that the control plane, not client-side
// throttling, bounds throughput. extraArgs are passed to `kwokctl create cluster`.
// Creations are serialised across processes (see LockCreate).
func (c *Cluster) Create(ctx context.Context, extraArgs ...string) error {
	unlock, err := LockCreate(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	args := append([]string{"create", "cluster", "--wait", "2m", "--disable-qps-limits"}, extraArgs...)
	_, err = c.run(ctx, args...)
	return err
}

// LockCreate takes a machine-wide lock that serialises kwokctl cluster
// creations, and returns the func that releases it.
//
// kwokctl picks each component's port by counting down from 32767 to the
// first port that is free at that moment. Two clusters created at the same
// time therefore pick the same ports, and their components bind or talk to
// each other's (one apiserver using the other's etcd). Once a creation has
// returned, its components hold their ports and the next creation skips
// them. Anything that runs kwokctl create cluster (the e2e harness,
// hack/cluster, hack/scale) must hold this lock while doing so.
func LockCreate(ctx context.Context) (func(), error) {
	return lockFile(ctx, filepath.Join(os.TempDir(), "opkit-kwokctl-create.lock"), "another cluster creation")
}

// lockFile takes an exclusive flock on path, waiting until ctx ends, and
// returns the func that releases it; what names the holder waited for.
// The kernel releases the lock with the process, however it ends.
func lockFile(ctx context.Context, path, what string) (func(), error) {
	l := flock.New(path, flock.SetPermissions(0o600))
	if _, err := l.TryLockContext(ctx, 100*time.Millisecond); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("waiting for %s (%s): %w", what, path, ctx.Err())
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { _ = l.Unlock() }, nil
}

// ScaleNodes sets the number of fake nodes.
func (c *Cluster) ScaleNodes(ctx context.Context, n int) error {
	_, err := c.run(ctx, "scale", "node", "--replicas", strconv.Itoa(n))
	return err
}

// Kubeconfig returns a kubeconfig for the cluster.
func (c *Cluster) Kubeconfig(ctx context.Context) ([]byte, error) {
	return c.run(ctx, "get", "kubeconfig")
}

// Delete deletes the cluster: it stops its processes, waits until they have
// exited, and removes its state.
func (c *Cluster) Delete(ctx context.Context) error {
	if _, err := c.run(ctx, "delete", "cluster"); err != nil {
		return err
	}
	// kwokctl signals the components and returns; wait for them to exit so
	// that no process outlives Delete.
	marker := filepath.Join(".kwok", "clusters", c.Name) + string(filepath.Separator)
	var pids []int
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		pids = procs.With(marker)
		return len(pids) == 0, nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("cluster %s: processes %v still running 30s after kwokctl delete", c.Name, pids)
	}
	return err
}

// Processes returns the cluster's running component processes (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kwok-controller),
// keyed by the base name of their executable. It is empty when the cluster
// is not running.
func (c *Cluster) Processes() map[string]int {
	marker := filepath.Join(".kwok", "clusters", c.Name) + string(filepath.Separator)
	out := map[string]int{}
	for _, pid := range procs.With(marker) {
		if name := procs.Name(pid); name != "" {
			out[name] = pid
		}
	}
	return out
}

// Exists reports whether kwokctl knows the cluster.
func (c *Cluster) Exists(ctx context.Context) (bool, error) {
	names, err := List(ctx, c.BinDir)
	if err != nil {
		return false, err
	}
	for _, n := range names {
		if n == c.Name {
			return true, nil
		}
	}
	return false, nil
}

// List returns the names of the kwokctl clusters on this machine.
func List(ctx context.Context, binDir string) ([]string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "kwokctl"), "get", "clusters")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kwokctl get clusters: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			names = append(names, l)
		}
	}
	return names, nil
}

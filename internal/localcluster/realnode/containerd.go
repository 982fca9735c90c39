package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// SandboxImage is the pause image the CRI runs each pod's sandbox from.
// `make images` builds it; nothing is pulled.
const SandboxImage = "registry.k8s.io/pause:3.10"

// containerdConfig renders node n's containerd configuration (version 3,
// containerd 2.x): roots and socket of its own, the CRI plugin with runc,
// overlayfs, the node's CNI network, and:
//
//   - restrict_oom_score_adj: this VM lacks CAP_SYS_RESOURCE, and runc fails
//     ("can't get final child's PID from pipe: EOF") when asked to lower a
//     container's oom_score_adj below its own;
//   - netns_mounts_under_state_dir: pod network namespaces are mounted
//     under the node's run directory, so Down finds and removes them;
//   - runc's state (Root) under the node's run directory, not the
//     machine-wide /run/containerd/runc;
//   - NRI off: it would take a machine-wide socket;
//   - registry hosts from the node's certs.d: every pull goes to the
//     nodes' registry (hostsTOML).
func containerdConfig(n node, runc string) string {
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	return strings.Join([]string{
		`version = 3`,
		`root = ` + q(n.dir("containerd")),
		`state = ` + q(n.runDir("containerd")),
		`disabled_plugins = ["io.containerd.nri.v1.nri"]`,
		``,
		`[grpc]`,
		`  address = ` + q(n.containerdSocket()),
		`[ttrpc]`,
		`  address = ` + q(n.containerdSocket()+".ttrpc"),
		``,
		`[plugins.'io.containerd.internal.v1.opt']`,
		`  path = ` + q(n.dir("containerd-opt")),
		`[plugins.'io.containerd.cri.v1.images']`,
		`  snapshotter = "overlayfs"`,
		`  [plugins.'io.containerd.cri.v1.images'.registry]`,
		`    config_path = ` + q(n.dir("certs.d")),
		`  [plugins.'io.containerd.cri.v1.images'.pinned_images]`,
		`    sandbox = ` + q(SandboxImage),
		`[plugins.'io.containerd.cri.v1.runtime']`,
		`  enable_selinux = false`,
		`  restrict_oom_score_adj = true`,
		`  netns_mounts_under_state_dir = true`,
		`  [plugins.'io.containerd.cri.v1.runtime'.containerd]`,
		`    default_runtime_name = "runc"`,
		`    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]`,
		`      runtime_type = "io.containerd.runc.v2"`,
		`      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]`,
		`        BinaryName = ` + q(runc),
		`        Root = ` + q(n.runDir("runc")),
		`        SystemdCgroup = false`,
		`  [plugins.'io.containerd.cri.v1.runtime'.cni]`,
		`    bin_dirs = ["/usr/lib/cni"]`,
		`    conf_dir = ` + q(n.dir("cni", "net.d")),
		`    max_conf_num = 1`,
		``,
	}, "\n")
}

// startContainerd writes node n's containerd and CNI configuration, starts
// containerd and waits until it answers.
func startContainerd(ctx context.Context, n node, binDir string) error {
	runc, err := exec.LookPath("runc")
	if err != nil {
		return fmt.Errorf("runc not found (make node-packages installs it): %w", err)
	}
	cni, err := cniConfig(n)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		n.dir("cni", "net.d", "10-opkit.conflist"): cni,
		n.dir("containerd.toml"):                   []byte(containerdConfig(n, runc)),
		n.dir("certs.d", "_default", "hosts.toml"): []byte(hostsTOML()),
	}
	for path, b := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(n.runDir(), 0o755); err != nil {
		return err
	}
	d := daemon{
		name: "containerd",
		path: filepath.Join(binDir, "containerd"),
		args: []string{"--config", n.dir("containerd.toml")},
		// containerd finds containerd-shim-runc-v2 on PATH.
		env:     []string{"PATH=" + binDir + ":" + os.Getenv("PATH")},
		logFile: n.dir("logs", "containerd.log"),
	}
	if err := d.start(); err != nil {
		return err
	}
	return waitFor(ctx, 30*time.Second, "containerd on "+n.containerdSocket(), func() error {
		return ctr(ctx, binDir, n, "version")
	})
}

// ctr runs ctr against node n's containerd in the k8s.io namespace (the
// one the CRI plugin uses).
func ctr(ctx context.Context, binDir string, n node, args ...string) error {
	return run(ctx, filepath.Join(binDir, "ctr"), append([]string{"--address", n.containerdSocket(), "--namespace", "k8s.io"}, args...)...)
}

// exitedError, returned by a waitFor check, ends the wait at once: what
// was waited for can no longer happen.
type exitedError struct{ err error }

func (e *exitedError) Error() string { return e.err.Error() }

// waitFor polls check until it succeeds or timeout passes, and returns
// the last error naming what was waited for.
func waitFor(ctx context.Context, timeout time.Duration, what string, check func() error) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		last = check()
		var exited *exitedError
		if errors.As(last, &exited) {
			return false, exited.err
		}
		return last == nil, nil
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
	case !wait.Interrupted(err): // an exitedError's
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return fmt.Errorf("waiting %s for %s: %w", timeout, what, last)
}

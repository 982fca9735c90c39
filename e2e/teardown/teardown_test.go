// Package teardown proves that real nodes leave nothing behind: no
// process, mount, cgroup, iptables chain, bridge, network namespace,
// containerd task or state directory, after `make cluster-down`, after
// SIGINT to an e2e suite, and after a suite is SIGKILLed (the next suite
// to start cleans up). It needs root, like every real-node suite.
package teardown

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/internal/localcluster"
	"github.com/opkit-dev/opkit/internal/localcluster/realnode"
	"github.com/opkit-dev/opkit/internal/repo"
)

// TestClusterDownAfterNormalRun: hack/cluster up with a real node, a real
// pod running on it, then hack/cluster down (what make cluster-up and
// make cluster-down run).
func TestClusterDownAfterNormalRun(t *testing.T) {
	root, bin := paths(t)
	tool := filepath.Join(t.TempDir(), "cluster")
	goBuild(t, filepath.Join(root, "hack"), tool, "./cluster") // hack is a module of its own
	// Named like a suite's cluster, so that a real-node suite starting
	// meanwhile waits for it instead of failing.
	name := harness.ClusterPrefix + fmt.Sprint(os.Getpid())
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	args := []string{"--name", name, "--kubeconfig", kubeconfig, "--bin", bin}
	up := exec.CommandContext(t.Context(), tool, append([]string{"up", "--nodes", "1", "--real-nodes", "1", "--images", filepath.Join(root, ".local", "images")}, args...)...)
	down := func() error {
		out, err := exec.CommandContext(context.WithoutCancel(t.Context()), tool, append([]string{"down"}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("cluster down: %w\n%s", err, out)
		}
		return nil
	}
	t.Cleanup(func() { _ = down() })
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("cluster up: %v\n%s", err, out)
	}
	kubectl := func(args ...string) error {
		out, err := exec.CommandContext(t.Context(), filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := kubectl("run", "hold", "--image=opkit.dev/toolbox:dev", "--image-pull-policy=IfNotPresent",
		`--overrides={"spec":{"nodeSelector":{"`+realnode.NodeLabel+`":"true"}}}`, "--", "sleep"); err != nil {
		t.Fatal(err)
	}
	if err := kubectl("wait", "--for=condition=Ready", "pod/hold", "--timeout=2m"); err != nil {
		t.Fatal(err)
	}
	if len(realnode.Leftovers(t.Context())) == 0 {
		t.Fatal("real nodes are up but Leftovers reports nothing: the check below would prove nothing")
	}
	if err := down(); err != nil {
		t.Fatal(err)
	}
	assertClean(t, bin, name)
}

// TestSIGINTToSuite: an e2e suite interrupted while a real pod runs
// removes its real nodes and its cluster before it exits.
func TestSIGINTToSuite(t *testing.T) {
	_, bin := paths(t)
	fixture := buildFixture(t)
	cmd, ready := startFixture(t, fixture, true)
	waitFile(t, cmd, ready)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(cmd, 3*time.Minute); err != nil && !isExit(err) {
		t.Fatal(err)
	}
	assertClean(t, bin, harness.ClusterPrefix+fmt.Sprint(cmd.Process.Pid))
}

// TestSIGKILLThenNextRun: a suite killed outright leaves its real nodes
// running; the next real-node suite removes them, and the killed suite's
// cluster, before it starts its own, and leaves nothing when it ends.
func TestSIGKILLThenNextRun(t *testing.T) {
	_, bin := paths(t)
	fixture := buildFixture(t)
	killed, ready := startFixture(t, fixture, true)
	waitFile(t, killed, ready)
	if err := killed.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = waitExit(killed, time.Minute)
	if left := realnode.Leftovers(t.Context()); len(left) == 0 {
		t.Fatal("a SIGKILLed suite left nothing behind: the cleanup below would prove nothing")
	}
	next, _ := startFixture(t, fixture, false)
	if err := waitExit(next, 5*time.Minute); err != nil {
		t.Fatalf("the next suite: %v", err)
	}
	assertClean(t, bin, harness.ClusterPrefix+fmt.Sprint(killed.Process.Pid), harness.ClusterPrefix+fmt.Sprint(next.Process.Pid))
}

func paths(t *testing.T) (root, bin string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("real nodes need root: run the e2e suites as root (CI does)")
	}
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	return root, filepath.Join(root, "bin")
}

// goBuild runs go build -o out args in dir.
func goBuild(t *testing.T, dir, out string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", append([]string{"build", "-o", out}, args...)...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", args, err, b)
	}
}

// buildFixture builds the suite under testdata/fixture as a test binary,
// in the e2e module (which holds it).
func buildFixture(t *testing.T) string {
	t.Helper()
	root, _ := paths(t)
	out := filepath.Join(t.TempDir(), "fixture.test")
	cmd := exec.CommandContext(t.Context(), "go", "test", "-c", "-o", out, "./teardown/testdata/fixture")
	cmd.Dir = filepath.Join(root, "e2e")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the fixture suite: %v\n%s", err, b)
	}
	return out
}

// startFixture starts the fixture suite; with hold it runs a real pod
// and waits to be signalled once the returned file exists.
func startFixture(t *testing.T, fixture string, hold bool) (*exec.Cmd, string) {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(fixture, "-test.v")
	cmd.Env = append(os.Environ(), "E2E_NODES=1")
	if hold {
		cmd.Env = append(cmd.Env, "FIXTURE_READY="+ready)
	}
	log, err := os.Create(filepath.Join(t.TempDir(), "fixture.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = waitExit(cmd, 3*time.Minute)
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("fixture output:\n%s", b)
		}
	})
	return cmd, ready
}

// waitFile waits until the fixture wrote path (its real pod runs), or
// fails when it exits first.
func waitFile(t *testing.T, cmd *exec.Cmd, path string) {
	t.Helper()
	deadline := time.Now().Add(8 * time.Minute)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if err := syscall.Kill(cmd.Process.Pid, 0); err != nil || time.Now().After(deadline) {
			t.Fatalf("the fixture suite never ran its real pod (alive: %v)", err == nil)
		}
		time.Sleep(time.Second)
	}
}

var waited = map[*exec.Cmd]chan error{}

// waitExit waits for cmd to exit, up to timeout; it may be called again
// for the same command.
func waitExit(cmd *exec.Cmd, timeout time.Duration) error {
	ch, ok := waited[cmd]
	if !ok {
		ch = make(chan error, 1)
		waited[cmd] = ch
		go func() { ch <- cmd.Wait(); close(ch) }()
	}
	select {
	case err, ok := <-ch:
		if !ok {
			return nil
		}
		return err
	case <-time.After(timeout):
		return fmt.Errorf("%s still running after %s", filepath.Base(cmd.Path), timeout)
	}
}

func isExit(err error) bool {
	var exit *exec.ExitError
	return errors.As(err, &exit)
}

// assertClean fails unless nothing of the real nodes is left and none of
// the named clusters exists.
func assertClean(t *testing.T, bin string, clusters ...string) {
	t.Helper()
	if diff := cmp.Diff([]string(nil), realnode.Leftovers(t.Context())); diff != "" {
		t.Errorf("left behind (-want +got):\n%s", diff)
	}
	names, err := localcluster.List(t.Context(), bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range clusters {
		for _, n := range names {
			if n == c {
				t.Errorf("cluster %s still exists", c)
			}
		}
	}
}

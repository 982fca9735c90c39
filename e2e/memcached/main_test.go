// Package memcached replays the memcached example's walkthrough against a
// real cluster: it builds the operator, runs it as a separate process
// against the suite's cluster, and drives Memcached objects through their
// life with the API only, as a user would.
package memcached

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/envfuncs"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/memcached/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/testenv"
)

var testEnv env.Environment

// operator is the running operator process.
var operator struct {
	dir     string
	cmd     *exec.Cmd
	logPath string
	done    chan error
}

func TestMain(m *testing.M) {
	e, err := harness.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e harness:", err)
		os.Exit(1)
	}
	testEnv = e
	root, err := testenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	e.Setup(
		envfuncs.SetupCRDs(filepath.Join(root, "examples/memcached/config/crd/bases"), "*.yaml"),
		waitForCRD,
		startOperator(root),
	)
	// Registered after the harness's cluster deletion, so it runs after
	// it; the operator is also killed with this process (Pdeathsig).
	e.Finish(stopOperator)
	os.Exit(e.Run(m))
}

// waitForCRD waits until Memcacheds can be listed.
func waitForCRD(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
	r := cfg.Client().Resources()
	if err := v1alpha1.AddToScheme(r.GetScheme()); err != nil {
		return ctx, err
	}
	err := wait.For(func(ctx context.Context) (bool, error) {
		return r.List(ctx, &v1alpha1.MemcachedList{}) == nil, nil
	}, wait.WithContext(ctx), wait.WithTimeout(time.Minute), wait.WithInterval(time.Second))
	if err != nil {
		return ctx, fmt.Errorf("waiting for the Memcached CRD: %w", err)
	}
	return ctx, nil
}

// startOperator builds the operator binary and starts it against the
// suite's cluster, logging to a file that is printed when the suite fails.
func startOperator(root string) env.Func {
	return func(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
		dir, err := os.MkdirTemp("", "memcached-e2e-")
		if err != nil {
			return ctx, err
		}
		operator.dir = dir
		bin := filepath.Join(dir, "memcached")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./examples/memcached")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			return ctx, fmt.Errorf("building the operator: %w\n%s", err, out)
		}
		operator.logPath = filepath.Join(dir, "operator.log")
		logFile, err := os.Create(operator.logPath)
		if err != nil {
			return ctx, err
		}
		cmd := exec.Command(bin, "--kubeconfig", cfg.KubeconfigFile(),
			"--metrics-bind-address=0", "--health-probe-bind-address=0", "--zap-log-level=info")
		cmd.Stdout, cmd.Stderr = logFile, logFile
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return ctx, fmt.Errorf("starting the operator: %w", err)
		}
		operator.cmd = cmd
		operator.done = make(chan error, 1)
		go func() {
			operator.done <- cmd.Wait()
			_ = logFile.Close()
		}()
		fmt.Fprintf(os.Stderr, "memcached e2e: operator pid %d, log %s\n", cmd.Process.Pid, operator.logPath)
		return ctx, nil
	}
}

// stopOperator stops the operator with SIGTERM (SIGKILL after 10 s) and
// removes its binary and log (a failed test has printed the log).
func stopOperator(ctx context.Context, _ *envconf.Config) (context.Context, error) {
	if operator.dir != "" {
		defer os.RemoveAll(operator.dir)
	}
	if operator.cmd == nil {
		return ctx, nil
	}
	_ = operator.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-operator.done:
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			return ctx, fmt.Errorf("stopping the operator: %w", err)
		}
	case <-time.After(10 * time.Second):
		_ = operator.cmd.Process.Kill()
		if err := <-operator.done; err != nil {
			fmt.Fprintln(os.Stderr, "memcached e2e: operator killed after 10 s:", err)
		}
	}
	return ctx, nil
}

// operatorLog returns the end of the operator's log, for failure messages.
func operatorLog() string {
	b, err := os.ReadFile(operator.logPath)
	if err != nil {
		return err.Error()
	}
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

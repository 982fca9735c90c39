// Package etcd drives the etcd example operator on a local cluster for the
// Kubernetes side of its work: it builds the operator, runs it as a
// separate process against the suite's cluster, and checks the objects and
// conditions it produces.
//
// The kwok cluster runs pods without containers, so no member ever answers.
// The operator is started with --client-url-template pointing every member
// at a loopback port of this process that closes each connection at once,
// so that every dial fails quickly and the same way. The suite therefore
// checks what the operator does when members are unreachable: it creates
// the seed member and its children, reports Degraded=True with reason
// Unreachable, adds no member it cannot reach, follows spec changes in the
// PodDisruptionBudget, and holds deletion for the final backup until told
// to skip it. Membership changes against real etcd are tested in
// examples/etcd/internal/membership.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
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
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/testenv"
)

var testEnv env.Environment

// operator is the running operator process.
var operator struct {
	dir        string
	backupRoot string
	cmd        *exec.Cmd
	logPath    string
	done       chan error
	// refuser accepts and closes the connections to members.
	refuser net.Listener
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
		envfuncs.SetupCRDs(filepath.Join(root, "examples/etcd/config/crd/bases"), "*.yaml"),
		waitForCRD,
		startOperator(root),
	)
	// Registered after the harness's cluster deletion, so it runs after
	// it; the operator is also killed with this process (Pdeathsig).
	e.Finish(stopOperator)
	os.Exit(e.Run(m))
}

// waitForCRD waits until EtcdClusters can be listed.
func waitForCRD(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
	r := cfg.Client().Resources()
	if err := v1alpha1.AddToScheme(r.GetScheme()); err != nil {
		return ctx, err
	}
	err := wait.For(func(ctx context.Context) (bool, error) {
		return r.List(ctx, &v1alpha1.EtcdClusterList{}) == nil && r.List(ctx, &v1alpha1.EtcdBackupList{}) == nil, nil
	}, wait.WithContext(ctx), wait.WithTimeout(time.Minute), wait.WithInterval(time.Second))
	if err != nil {
		return ctx, fmt.Errorf("waiting for the etcd CRDs: %w", err)
	}
	return ctx, nil
}

// refuse accepts connections on l and closes them at once, until l is
// closed.
func refuse(l net.Listener) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		_ = conn.Close()
	}
}

// startOperator builds the operator binary and starts it against the
// suite's cluster, logging to a file that is printed when a test fails.
func startOperator(root string) env.Func {
	return func(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
		dir, err := os.MkdirTemp("", "etcd-e2e-")
		if err != nil {
			return ctx, err
		}
		operator.dir = dir
		// The PVC store "backups" of the suite's clusters is this
		// directory: <backup-root>/<pvcName>.
		operator.backupRoot = filepath.Join(dir, "backup-root")
		if err := os.MkdirAll(filepath.Join(operator.backupRoot, "backups"), 0o700); err != nil {
			return ctx, err
		}
		bin := filepath.Join(dir, "etcd-operator")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./examples/etcd")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			return ctx, fmt.Errorf("building the operator: %w\n%s", err, out)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return ctx, fmt.Errorf("listening for member connections: %w", err)
		}
		operator.refuser = l
		go refuse(l)

		operator.logPath = filepath.Join(dir, "operator.log")
		logFile, err := os.Create(operator.logPath)
		if err != nil {
			return ctx, err
		}
		cmd := exec.Command(bin, "--kubeconfig", cfg.KubeconfigFile(),
			"--metrics-bind-address=0", "--health-probe-bind-address=0", "--zap-log-level=info",
			"--backup-root="+operator.backupRoot,
			"--client-url-template=http://"+l.Addr().String())
		cmd.Stdout, cmd.Stderr = logFile, logFile
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			_ = logFile.Close()
			return ctx, fmt.Errorf("starting the operator: %w", err)
		}
		operator.cmd = cmd
		operator.done = make(chan error, 1)
		go func() {
			operator.done <- cmd.Wait()
			_ = logFile.Close()
		}()
		fmt.Fprintf(os.Stderr, "etcd e2e: operator pid %d, log %s\n", cmd.Process.Pid, operator.logPath)
		return ctx, nil
	}
}

// stopOperator stops the operator with SIGTERM (SIGKILL after 10 s), stops
// the member listener and removes the binary and log (a failed test has
// printed the log).
func stopOperator(ctx context.Context, _ *envconf.Config) (context.Context, error) {
	if operator.dir != "" {
		defer os.RemoveAll(operator.dir)
	}
	if operator.refuser != nil {
		defer operator.refuser.Close()
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
			fmt.Fprintln(os.Stderr, "etcd e2e: operator killed after 10 s:", err)
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

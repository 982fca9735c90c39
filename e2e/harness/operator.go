package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
)

// Operator is an operator under test, built from a package of this
// repository and run as a separate process against the suite's cluster, as
// a user would run it. Register Start in the environment's Setup and Stop in
// its Finish; the process is also killed if the test binary dies
// (Pdeathsig), so it never outlives the suite.
type Operator struct {
	// Name names the binary, the scratch directory and log lines.
	Name string
	// Package is the main package to build, relative to the repository
	// root, e.g. "./examples/memcached".
	Package string
	// Args returns the flags after --kubeconfig; dir is the operator's
	// scratch directory (removed by Stop), for files the flags point at.
	Args func(cfg *envconf.Config, dir string) ([]string, error)

	mu      sync.Mutex
	dir     string
	bin     string
	args    []string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

// Start returns a setup step that builds the operator in a scratch
// directory and starts it with --kubeconfig of the suite's cluster, its
// output going to a log file (see Log).
func (o *Operator) Start(repoRoot string) env.Func {
	return func(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
		dir, err := os.MkdirTemp("", o.Name+"-e2e-")
		if err != nil {
			return ctx, err
		}
		o.dir = dir
		bin := filepath.Join(dir, o.Name)
		// In the package's directory: the examples are modules of their
		// own.
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
		build.Dir = filepath.Join(repoRoot, filepath.FromSlash(o.Package))
		if out, err := build.CombinedOutput(); err != nil {
			return ctx, fmt.Errorf("building %s: %w\n%s", o.Package, err, out)
		}
		args := []string{"--kubeconfig", cfg.KubeconfigFile()}
		if o.Args != nil {
			more, err := o.Args(cfg, dir)
			if err != nil {
				return ctx, err
			}
			args = append(args, more...)
		}
		o.bin, o.args = bin, args
		o.logPath = filepath.Join(dir, "operator.log")
		return ctx, o.run()
	}
}

// run starts the built operator, appending to its log.
func (o *Operator) run() error {
	logFile, err := os.OpenFile(o.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(o.bin, o.args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("starting %s: %w", o.Name, err)
	}
	done := make(chan struct{})
	o.mu.Lock()
	o.cmd, o.done, o.waitErr = cmd, done, nil
	o.mu.Unlock()
	go func() {
		err := cmd.Wait()
		_ = logFile.Close()
		o.mu.Lock()
		o.waitErr = err
		o.mu.Unlock()
		close(done)
	}()
	fmt.Fprintf(os.Stderr, "%s e2e: operator pid %d, log %s\n", o.Name, cmd.Process.Pid, o.logPath)
	return nil
}

// Restart kills the operator (SIGKILL, as a crash or a lost node does)
// and starts it again with the same flags.
func (o *Operator) Restart() error {
	if err := o.Kill(); err != nil {
		return err
	}
	return o.run()
}

// Kill kills the operator (SIGKILL) and waits for it to exit; Restart
// starts it again.
func (o *Operator) Kill() error {
	o.mu.Lock()
	cmd, done := o.cmd, o.done
	o.mu.Unlock()
	if cmd == nil {
		return errors.New("the operator was not started")
	}
	_ = cmd.Process.Kill()
	<-done
	return nil
}

// Exited reports whether the operator process has exited, and how.
func (o *Operator) Exited() (bool, error) {
	o.mu.Lock()
	done := o.done
	o.mu.Unlock()
	if done == nil {
		return false, nil
	}
	select {
	case <-done:
		o.mu.Lock()
		defer o.mu.Unlock()
		return true, o.waitErr
	default:
		return false, nil
	}
}

// Stop is a finish step: it stops the operator with SIGTERM (SIGKILL after
// 10 s) and removes its scratch directory, binary and log included (a
// failed test has printed the log).
func (o *Operator) Stop(ctx context.Context, _ *envconf.Config) (context.Context, error) {
	if o.dir != "" {
		defer os.RemoveAll(o.dir)
	}
	if o.cmd == nil {
		return ctx, nil
	}
	if !o.terminate() {
		fmt.Fprintf(os.Stderr, "%s e2e: operator killed after 10 s\n", o.Name)
		return ctx, nil
	}
	_, err := o.Exited()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return ctx, fmt.Errorf("stopping %s: %w", o.Name, err)
	}
	return ctx, nil
}

// Terminate stops the operator as a scale-down does (SIGTERM) and waits
// for it to exit; Restart starts it again. It fails if the operator had
// to be killed 10 s after the signal.
func (o *Operator) Terminate() error {
	o.mu.Lock()
	started := o.cmd != nil
	o.mu.Unlock()
	if !started {
		return errors.New("the operator was not started")
	}
	if !o.terminate() {
		return fmt.Errorf("%s did not exit within 10 s of SIGTERM: killed", o.Name)
	}
	return nil
}

// terminate sends SIGTERM and waits for the exit, killing the operator
// after 10 s; it reports whether it exited on its own.
func (o *Operator) terminate() bool {
	o.mu.Lock()
	cmd, done := o.cmd, o.done
	o.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return true
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return false
	}
}

// Log returns the end of the operator's log (the last 8000 bytes), for
// failure messages.
func (o *Operator) Log() string {
	b, err := os.ReadFile(o.logPath)
	if err != nil {
		return err.Error()
	}
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

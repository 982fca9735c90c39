package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/opkit-dev/opkit/internal/localcluster/procs"
)

// daemon is one long-running process of a real node (containerd, kubelet,
// kube-proxy, CoreDNS, the provisioner). It runs in a session of its own so
// that it outlives the command that started it (`make cluster-up` returns
// while the node runs); Down finds it again by the state directory in its
// command line, so a pid file is only a convenience for people.
type daemon struct {
	name string
	path string
	args []string
	env  []string
	// logFile receives stdout and stderr.
	logFile string
}

// start starts d detached. It fails if the binary
// exits within the first 300 ms (a bad flag, a missing file), with the end of
// its log in the error.
func (d daemon) start() error {
	if err := os.MkdirAll(filepath.Dir(d.logFile), 0o755); err != nil {
		return err
	}
	log, err := os.OpenFile(d.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(d.path, d.args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), d.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", d.name, err)
	}
	// The goroutine also reaps it when it exits later (the channel is
	// buffered), so that no zombie stays while this process lives: the e2e
	// harness lives as long as its suite.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		return fmt.Errorf("%s exited at once (%w); the end of %s:\n%s", d.name, err, d.logFile, tail(d.logFile, 2000))
	case <-time.After(300 * time.Millisecond):
		return nil
	}
}

// tail returns the last n bytes of a file, or the read error.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// killAll sends SIGTERM to every process whose command line contains
// marker, then SIGKILL to those still running after grace, and waits until
// none is left.
func killAll(ctx context.Context, marker string, grace time.Duration) error {
	signalAll := func(sig syscall.Signal) {
		for _, pid := range procs.With(marker) {
			_ = syscall.Kill(pid, sig)
		}
	}
	signalAll(syscall.SIGTERM)
	// A loop of its own, not wait.Poll: its deadline moves once, from
	// SIGTERM's grace to SIGKILL's.
	deadline := time.Now().Add(grace)
	killed := false
	for {
		pids := procs.With(marker)
		if len(pids) == 0 {
			return nil
		}
		if !killed && time.Now().After(deadline) {
			signalAll(syscall.SIGKILL)
			killed = true
			deadline = time.Now().Add(10 * time.Second)
		} else if killed && time.Now().After(deadline) {
			return fmt.Errorf("processes %v (%s) still running after SIGKILL", pids, describe(pids))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// describe names processes by their executable, for error messages.
func describe(pids []int) string {
	var names []string
	for _, pid := range pids {
		if name := procs.Name(pid); name != "" {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}

// run runs a command to completion and returns its combined output in the
// error when it fails.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// errNotRoot is returned when real nodes are asked for without root.
var errNotRoot = errors.New("real nodes need root (they start containerd and a kubelet, and make a bridge and iptables rules): run as root, or use REAL_NODES=0 for fake nodes only")

// lookPath finds a system binary (runc, iptables, ip).
var lookPath = exec.LookPath

package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// DefaultControllers are the kube-controller-manager controllers
// StartControllerManager runs when given none: those that decide where an
// operator's data goes when something is deleted or drained.
var DefaultControllers = []string{
	"garbage-collector-controller",
	"namespace-controller",
	"disruption-controller",
	"persistentvolumeclaim-protection-controller",
}

// StartControllerManager runs the real kube-controller-manager against e,
// with controllers (DefaultControllers when none), until t ends, and
// returns once its garbage collector has collected a dependent. envtest
// runs no controller: without this, nothing deleted in the foreground,
// orphaned or in a deleted namespace ever goes, and a budget never
// counts a pod.
//
// The binary is kube-controller-manager beside kube-apiserver (the
// assets directory); a missing one fails t. Its log is printed when t
// fails.
//
// Footgun: the controllers act on every namespace, so tests running in
// parallel with t see them too.
func (e *Env) StartControllerManager(t testing.TB, controllers ...string) {
	t.Helper()
	if len(controllers) == 0 {
		controllers = DefaultControllers
	}
	dir := e.env.BinaryAssetsDirectory
	if dir == "" {
		dir = os.Getenv("KUBEBUILDER_ASSETS")
	}
	bin := filepath.Join(dir, "kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("testenv: kube-controller-manager: %v (build it beside kube-apiserver: make envtest-assets)", err)
	}
	user, err := e.env.AddUser(envtest.User{Name: "testenv:kube-controller-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatalf("testenv: a user for kube-controller-manager: %v", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatalf("testenv: kube-controller-manager's kubeconfig: %v", err)
	}
	tmp := t.TempDir()
	path := filepath.Join(tmp, "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(tmp, "kube-controller-manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin,
		"--kubeconfig="+path,
		"--controllers="+strings.Join(controllers, ","),
		"--leader-elect=false",
		"--secure-port=0",
		// Namespaces go in seconds rather than minutes.
		"--namespace-sync-period=10s",
		"--concurrent-namespace-syncs=4",
		"--v=2",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group: a test binary killed by a timeout takes it
	// down through the Cleanup below, not a stray signal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: starting kube-controller-manager: %v", err)
	}
	p := &process{exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("kube-controller-manager log (end):\n%s", tail(logPath, 8000))
		}
	})
	if err := e.waitCollected(t, p); err != nil {
		t.Fatalf("testenv: kube-controller-manager did not start collecting garbage: %v\nlog (end):\n%s", err, tail(logPath, 4000))
	}
}

// waitCollected returns once the garbage collector deleted a ConfigMap
// whose owner was deleted: it has synced its informers and acts.
func (e *Env) waitCollected(t testing.TB, p *process) error {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "testenv-kcm-"}}
	if err := e.Client.Create(ctx, ns); err != nil {
		return err
	}
	t.Cleanup(func() { _ = e.Client.Delete(context.Background(), ns) })
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: ns.Name}}
	if err := e.Client.Create(ctx, owner); err != nil {
		return err
	}
	dep := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dependent", Namespace: ns.Name,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}}}
	if err := e.Client.Create(ctx, dep); err != nil {
		return err
	}
	if err := e.Client.Delete(ctx, owner); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.exited:
			return false, fmt.Errorf("exited: %w", p.err)
		default:
		}
		err := e.Client.Get(ctx, client.ObjectKeyFromObject(dep), &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// process is a started command: exited is closed once it has, err is
// then what Wait returned.
type process struct {
	exited chan struct{}
	err    error
}

// tail returns the last n bytes of the file at path.
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

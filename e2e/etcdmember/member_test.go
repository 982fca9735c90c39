package etcdmember

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"

	"github.com/opkit-dev/opkit/internal/testkit"
)

// identityFlags are the flags of a member pod's etcd command line that are
// passed to the local process unchanged: what etcd knows the member and
// its cluster by.
var identityFlags = []string{
	"name", "initial-cluster", "initial-cluster-state", "initial-cluster-token", "initial-advertise-peer-urls",
}

// localFlags are the flags that the local process gets other values for:
// its data directory and its loopback listeners.
var localFlags = []string{"data-dir", "listen-peer-urls", "listen-client-urls", "advertise-client-urls"}

// member is a real etcd process standing in for the etcd container of a
// member pod.
type member struct {
	// pod is the name of the pod.
	pod string
	// identity holds the identityFlags read from the pod, by flag name.
	identity map[string]string
	// logPath is the file receiving the process's output.
	logPath string
	// port holds the member's client port while the process does not
	// run.
	port *portHolder

	// dataDir is the local data directory: a temporary one for an
	// emptyDir, claimRoot/<namespace>/<claim> for a data claim.
	dataDir string
	// claim is the pod's data claim, empty for an emptyDir.
	claim string

	// initContainers are the names of the init containers run before
	// etcd, in order.
	initContainers []string

	cmd    *exec.Cmd
	exited chan struct{}
}

// runPod is the kubelet of pod ns/name: it waits until the pod is bound to
// a node, reads the command line of its etcd container and runs it as a
// local process with the identity flags as they are, the data directory in
// a temporary directory of suite (or, when the pod's data volume is a
// claim, the claim's directory, which a pod recreated on the claim finds
// again: see dataClaim), the client URLs at port (reserved) and
// the peer listener on another loopback port (see the package
// documentation).
// It returns once the member reports a leader. Any flag it does not know
// how to run locally, and any environment variable not given by value,
// fails t rather than being dropped.
//
// suite is the top-level test: the process and its data outlive the
// feature step t that starts it, and suite's cleanup stops it.
func runPod(ctx context.Context, t, suite *testing.T, r *resources.Resources, ns, name string, port *portHolder) *member {
	t.Helper()
	var pod corev1.Pod
	waitFor(ctx, t, "pod "+name+" bound to a node", func(ctx context.Context) (bool, string) {
		if err := r.Get(ctx, name, ns, &pod); err != nil {
			return false, err.Error()
		}
		return pod.Spec.NodeName != "", "not scheduled yet"
	})
	i := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == "etcd" })
	if i < 0 {
		t.Fatalf("pod %s has no container named etcd: %+v", name, pod.Spec.Containers)
	}
	ctr := pod.Spec.Containers[i]
	if len(ctr.Command) == 0 || filepath.Base(ctr.Command[0]) != "etcd" {
		t.Fatalf("pod %s: the etcd container's command is %q, want etcd", name, ctr.Command)
	}
	flags, err := parseFlags(append(slices.Clone(ctr.Command[1:]), ctr.Args...))
	if err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}
	env, err := containerEnv(ctr)
	if err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}

	dir := suite.TempDir()
	m := &member{pod: name, identity: map[string]string{}, logPath: filepath.Join(dir, name+".log"), port: port}
	dataDir := filepath.Join(dir, "data")
	if claim := dataClaim(&pod); claim != "" {
		// The claim's data outlives the pod: a pod recreated on the
		// claim finds it.
		dataDir = filepath.Join(claimRoot, ns, claim)
		m.claim = claim
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	m.dataDir = dataDir
	m.initContainers = runInitContainers(t, &pod, dataDir)
	args := make([]string, 0, len(flags))
	for _, f := range identityFlags {
		v, ok := flags[f]
		if !ok {
			t.Fatalf("pod %s: the etcd command line has no --%s: %q", name, f, ctr.Args)
		}
		m.identity[f] = v
		args = append(args, "--"+f+"="+v)
	}
	for f := range flags {
		if !slices.Contains(identityFlags, f) && !slices.Contains(localFlags, f) {
			t.Fatalf("pod %s: the stand-in kubelet does not know how to run --%s locally; teach runPod", name, f)
		}
	}
	for _, f := range localFlags {
		if _, ok := flags[f]; !ok {
			t.Fatalf("pod %s: the etcd command line has no --%s: %q", name, f, ctr.Args)
		}
	}
	peer := net.JoinHostPort("127.0.0.1", strconv.Itoa(testkit.MustFreePort(t)))
	args = append(args,
		"--data-dir="+dataDir,
		"--listen-peer-urls=http://"+peer,
		"--listen-client-urls="+port.url(),
		"--advertise-client-urls="+port.url(),
	)
	if err := m.start(env, args); err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}
	suite.Cleanup(func() {
		if err := m.stop(); err != nil {
			suite.Error(err)
		}
	})
	t.Logf("pod %s: etcd pid %d, log %s, args %q", name, m.cmd.Process.Pid, m.logPath, args)
	m.waitHealthy(t, 30*time.Second)
	return m
}

// parseFlags returns the --name=value flags of an etcd command line by
// name. Any other form of argument, and a flag given twice, is an error.
func parseFlags(args []string) (map[string]string, error) {
	flags := map[string]string{}
	for _, a := range args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || !strings.HasPrefix(a, "--") {
			return nil, fmt.Errorf("etcd argument %q is not of the form --name=value", a)
		}
		if _, dup := flags[name]; dup {
			return nil, fmt.Errorf("etcd flag --%s is given twice", name)
		}
		flags[name] = value
	}
	return flags, nil
}

// containerEnv returns the environment a container declares, as
// NAME=value strings; values from references cannot be resolved here.
func containerEnv(c corev1.Container) ([]string, error) {
	if len(c.EnvFrom) > 0 {
		return nil, fmt.Errorf("container %s: envFrom is not supported by the stand-in kubelet", c.Name)
	}
	env := make([]string, 0, len(c.Env))
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			return nil, fmt.Errorf("container %s: env %s has a valueFrom, not supported by the stand-in kubelet", c.Name, e.Name)
		}
		env = append(env, e.Name+"="+e.Value)
	}
	return env, nil
}

// start releases the member's client port and starts bin/etcd with env and args,
// its output going to m.logPath. The process is killed if this process
// dies (Pdeathsig).
func (m *member) start(env, args []string) error {
	logf, err := os.Create(m.logPath)
	if err != nil {
		return fmt.Errorf("creating the etcd log: %w", err)
	}
	cmd := exec.Command(etcdBinary, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	m.port.release()
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("starting etcd: %w", err)
	}
	m.cmd = cmd
	m.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(m.exited)
	}()
	return nil
}

// running reports whether the process is running.
func (m *member) running() bool {
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// stop stops the process with SIGTERM (SIGKILL after 10 s), waits for it
// and holds its client port again. Stopping a stopped member does nothing.
func (m *member) stop() error {
	if !m.running() {
		return nil
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
	return m.port.hold()
}

// log returns the end of the member's log (the last 8000 bytes), for
// failure messages.
func (m *member) log() string {
	b, err := os.ReadFile(m.logPath)
	if err != nil {
		return err.Error()
	}
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// waitHealthy waits until the member reports a leader and no errors at
// the client port, failing t with the member's log if it exits or the
// timeout passes.
func (m *member) waitHealthy(t *testing.T, timeout time.Duration) {
	t.Helper()
	ec := m.client(t)
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		st, err := ec.Status(ctx, m.port.url())
		cancel()
		switch {
		case err != nil:
			last = err.Error()
		case st.Leader == 0 || len(st.Errors) > 0:
			last = fmt.Sprintf("leader %x, errors %q", st.Leader, st.Errors)
		default:
			return
		}
		if !m.running() {
			t.Fatalf("etcd of pod %s exited: %v\n%s", m.pod, m.cmd.ProcessState, m.log())
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd of pod %s not healthy within %s: %s\n%s", m.pod, timeout, last, m.log())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// client returns a client on the member's client URL (dialed directly,
// not through the operator's way), closed when t ends.
func (m *member) client(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{m.port.url()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcd client for %s: %v", m.port.url(), err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// dataClaim returns the claim of pod's volume "data", empty when it is not
// a claim.
func dataClaim(pod *corev1.Pod) string {
	for _, v := range pod.Spec.Volumes {
		if v.Name == "data" && v.PersistentVolumeClaim != nil {
			return v.PersistentVolumeClaim.ClaimName
		}
	}
	return ""
}

// runInitContainers runs the init containers of pod as local processes, in
// order, with the paths of their volume mounts mapped to local
// directories: the volume "data" to dataDir, a volume from a claim to the
// claim's directory under the operator's backup root (the PVC store); the
// service account token's projected volume is not provided. An
// init container in the operator's --restore-image runs the operator
// binary the suite built; one whose command is etcdutl runs bin/etcdutl.
// Anything else fails t. It returns the names of the containers run.
func runInitContainers(t *testing.T, pod *corev1.Pod, dataDir string) []string {
	t.Helper()
	local := map[string]string{} // volume name -> local directory
	ignored := map[string]bool{} // the service account token, unused
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.Name == "data":
			local[v.Name] = dataDir
		case v.PersistentVolumeClaim != nil:
			local[v.Name] = filepath.Join(backupRoot, pod.Namespace, v.PersistentVolumeClaim.ClaimName)
		case v.Projected != nil:
			ignored[v.Name] = true
		}
	}
	var names []string
	for _, c := range pod.Spec.InitContainers {
		var bin string
		switch {
		case c.Image == restoreImage && len(c.Command) == 0:
			bin = operatorBinary
		case len(c.Command) == 1 && c.Command[0] == "etcdutl":
			bin = etcdutlBinary
		default:
			t.Fatalf("pod %s: the stand-in kubelet does not know how to run init container %s (image %s, command %q); teach runInitContainers",
				pod.Name, c.Name, c.Image, c.Command)
		}
		mounts := map[string]string{} // path in the container -> local directory
		for _, vm := range c.VolumeMounts {
			if ignored[vm.Name] {
				continue
			}
			dir, ok := local[vm.Name]
			if !ok {
				t.Fatalf("pod %s: init container %s mounts volume %s, which the stand-in kubelet cannot provide", pod.Name, c.Name, vm.Name)
			}
			mounts[vm.MountPath] = dir
		}
		args := make([]string, 0, len(c.Args))
		for _, a := range c.Args {
			args = append(args, mapPath(a, mounts))
		}
		env, err := containerEnv(c)
		if err != nil {
			t.Fatalf("pod %s: %v", pod.Name, err)
		}
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Env = env
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("pod %s: init container %s (%s %q): %v\n%s", pod.Name, c.Name, bin, args, err, out)
		}
		t.Logf("pod %s: init container %s ran in %s: %s %q", pod.Name, c.Name, time.Since(start).Round(time.Millisecond), filepath.Base(bin), args)
		names = append(names, c.Name)
	}
	return names
}

// mapPath replaces a container path in arg, a path or --flag=path, by
// the local directory of the mount it lies in.
func mapPath(arg string, mounts map[string]string) string {
	prefix, value := "", arg
	if strings.HasPrefix(arg, "--") {
		if i := strings.Index(arg, "="); i >= 0 {
			prefix, value = arg[:i+1], arg[i+1:]
		}
	}
	for path, dir := range mounts {
		if value == path || strings.HasPrefix(value, path+"/") {
			return prefix + dir + strings.TrimPrefix(value, path)
		}
	}
	return arg
}

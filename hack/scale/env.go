package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/opkit-dev/opkit/internal/localcluster"
	"github.com/opkit-dev/opkit/internal/repo"
	"github.com/opkit-dev/opkit/internal/testkit"
)

// namespace is the contender's namespace.
func namespace(contender string) string { return "scale-" + contender }

var memcachedGVK = schema.GroupVersionKind{Group: "cache.opkit.dev", Version: "v1beta1", Kind: "Memcached"}

// env is what setUp started: the cluster, the operator processes, the
// benchmark's client and cache.
type env struct {
	root        string // repository root
	tmp         string
	cluster     *localcluster.Cluster
	created     bool
	kubeconfig  string
	cfg         *rest.Config
	client      client.Client
	cache       cache.Cache
	cancelCache context.CancelFunc
	ops         []*operator
	// replicas are the opkit operator's processes (-replicas); ops holds
	// them too.
	replicas    []*operator
	contenders  map[string]*contender
	kubeVersion string
}

// alive returns an error when an operator has exited.
func (e *env) alive() error {
	for _, op := range e.ops {
		if op.killed {
			continue
		}
		if err := op.alive(); err != nil {
			return err
		}
	}
	return nil
}

// operator is an operator process.
type operator struct {
	name       string
	cmd        *exec.Cmd
	metricsURL string
	pprofURL   string // empty unless -profile
	log        string
	exited     chan struct{}
	exitErr    error
	// bin and args started it (replicas only), for a restart.
	bin  string
	args []string
	// killed: the benchmark killed it (a failover), so its exit is no
	// failure.
	killed bool
}

func setUp(ctx context.Context, cfg config) (*env, error) {
	e := &env{}
	bin, err := repo.BinDir()
	if err != nil {
		return e, err
	}
	e.root = filepath.Dir(bin)
	if e.tmp, err = os.MkdirTemp("", "opkit-scale-"); err != nil {
		return e, err
	}

	progress("building the operators (examples/memcached, hack/scale/tutorial)")
	opBin, tutBin := filepath.Join(e.tmp, "memcached"), filepath.Join(e.tmp, "tutorial")
	builds := []struct{ out, dir, pkg string }{
		{opBin, filepath.Join(e.root, "examples", "memcached"), "."}, // a module of its own
		{tutBin, filepath.Join(e.root, "hack"), "./scale/tutorial"},
	}
	if cfg.replicas > 0 {
		builds = builds[:1]
	}
	for _, b := range builds {
		build := exec.CommandContext(ctx, "go", "build", "-o", b.out, b.pkg)
		build.Dir = b.dir
		if out, err := build.CombinedOutput(); err != nil {
			return e, fmt.Errorf("building %s: %w: %s", b.pkg, err, out)
		}
	}

	e.cluster = &localcluster.Cluster{Name: fmt.Sprintf("opkit-scale-%d", os.Getpid()), BinDir: bin}
	progress(fmt.Sprintf("creating cluster %s (kube-apiserver %s, QPS limits off)", e.cluster.Name, localcluster.KubeVersion))
	e.created = true // a failed create may leave processes behind: always delete
	if err := e.cluster.Create(ctx); err != nil {
		return e, err
	}
	if err := scaleNodes(ctx, e.cluster, cfg.Nodes); err != nil {
		return e, err
	}
	kc, err := e.cluster.Kubeconfig(ctx)
	if err != nil {
		return e, err
	}
	e.kubeconfig = filepath.Join(e.tmp, "kubeconfig")
	if err := os.WriteFile(e.kubeconfig, kc, 0o600); err != nil {
		return e, err
	}
	if e.cfg, err = clientcmd.RESTConfigFromKubeConfig(kc); err != nil {
		return e, err
	}
	if !isLoopback(e.cfg.Host) {
		return e, fmt.Errorf("the cluster's API server %s is not on loopback", e.cfg.Host)
	}
	// The benchmark client is not throttled either.
	e.cfg.QPS, e.cfg.Burst = 1e6, 1e6

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return e, err
		}
	}
	if e.client, err = client.New(e.cfg, client.Options{Scheme: scheme}); err != nil {
		return e, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(e.cfg)
	if err != nil {
		return e, err
	}
	if v, err := dc.ServerVersion(); err == nil {
		e.kubeVersion = v.GitVersion
	}
	if err := e.waitForNodes(ctx, cfg.Nodes); err != nil {
		return e, err
	}
	if err := e.installCRD(ctx); err != nil {
		return e, err
	}
	e.contenders = map[string]*contender{}
	for _, name := range contenderOrder {
		c := &contender{name: name, ns: namespace(name), floor: name == contFloor || name == contWatched}
		c.namespaces = []string{c.ns}
		for i := 1; i < cfg.Namespaces; i++ {
			c.namespaces = append(c.namespaces, fmt.Sprintf("%s-%d", c.ns, i))
		}
		for _, ns := range c.namespaces {
			if err := e.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				return e, fmt.Errorf("creating namespace %s: %w", ns, err)
			}
		}
		e.contenders[name] = c
	}
	if err := e.startCache(ctx, scheme); err != nil {
		return e, err
	}
	// Both operators run with client-side rate limits off, like the
	// benchmark and the cluster, and watch only their namespace.
	opkitArgs := append([]string{"--namespaces", strings.Join(e.contenders[contOpkit].namespaces, ","), "--metrics-secure=false"}, cfg.OperatorArgs...)
	if cfg.replicas > 0 {
		var hook *slotWebhook
		if cfg.replicas > 1 && cfg.SlotWebhook {
			if hook, err = newSlotWebhook(e.tmp); err != nil {
				return e, err
			}
		}
		for i := range cfg.replicas {
			args := opkitArgs
			if hook != nil && i == 0 {
				args = append(slices.Clone(args), hook.args()...)
			}
			op, err := e.startReplica(ctx, cfg, opBin, args, i)
			if err != nil {
				return e, err
			}
			if i == 0 {
				e.contenders[contOpkit].op = op
			}
		}
		if hook != nil {
			return e, hook.install(ctx, e)
		}
		return e, nil
	}
	for _, o := range []struct {
		name, bin string
		args      []string
	}{
		{contOpkit, opBin, opkitArgs},
		{contTutorial, tutBin, append([]string{"--namespace", namespace(contTutorial)}, cfg.TutorialArgs...)},
		{contWatched, tutBin, []string{"--namespace", namespace(contWatched), "--watch-only"}},
	} {
		c := e.contenders[o.name]
		if c == nil {
			continue
		}
		op, err := startOperator(ctx, o.name, o.bin, o.args, e.kubeconfig, e.tmp, cfg)
		if op != nil {
			e.ops = append(e.ops, op)
		}
		if err != nil {
			return e, err
		}
		if c.floor {
			c.watcher = op
		} else {
			c.op = op
		}
	}
	return e, nil
}

// startReplica starts opkit replica i of cfg.replicas, as shard r<i>
// (--shard) when there are several, and puts it at e.replicas[i].
func (e *env) startReplica(ctx context.Context, cfg config, bin string, args []string, i int) (*operator, error) {
	name := contOpkit
	if cfg.replicas > 1 {
		name = fmt.Sprintf("r%d", i)
		args = append(slices.Clone(args), "--shard", "--shard-identity", name, "--shard-namespace", namespace(contOpkit))
	}
	op, err := startOperator(ctx, name, bin, args, e.kubeconfig, e.tmp, cfg)
	if op != nil {
		e.ops = append(e.ops, op)
		if i < len(e.replicas) {
			e.replicas[i] = op
		} else {
			e.replicas = append(e.replicas, op)
		}
		op.bin, op.args = bin, args
	}
	return op, err
}

// scaleNodes creates n kwok nodes with room for every pod of the run: the
// default node template allows 110 pods and a /24 pod CIDR.
func scaleNodes(ctx context.Context, c *localcluster.Cluster, n int) error {
	envv, err := localcluster.Environ(c.BinDir)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, c.Kwokctl(), "--name", c.Name, "scale", "node", "--replicas", strconv.Itoa(n),
		"--param", ".allocatable.pods=10000", "--param", `.podCIDR="10.0.0.0/16"`)
	cmd.Env = append(os.Environ(), envv...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kwokctl scale node: %w: %s", err, out)
	}
	return nil
}

func (e *env) waitForNodes(ctx context.Context, n int) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var nodes corev1.NodeList
		if err := e.client.List(ctx, &nodes); err != nil {
			return false, nil //nolint:nilerr // retried until the timeout
		}
		ready := 0
		for _, nd := range nodes.Items {
			for _, c := range nd.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= n, nil
	})
}

func (e *env) installCRD(ctx context.Context) error {
	dir := filepath.Join(e.root, "examples", "memcached", "config", "crd", "bases")
	data, err := os.ReadFile(filepath.Join(dir, "cache.opkit.dev_memcacheds.yaml"))
	if err != nil {
		return err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		return fmt.Errorf("reading the Memcached CRD: %w", err)
	}
	if err := e.client.Create(ctx, crd); err != nil {
		return fmt.Errorf("creating the Memcached CRD: %w", err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := e.client.Get(ctx, client.ObjectKeyFromObject(crd), crd); err != nil {
			return false, nil //nolint:nilerr // retried until the timeout
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// startCache starts the benchmark's own informers: Memcacheds and
// Deployments whole, the other kinds as metadata (only counted).
func (e *env) startCache(ctx context.Context, scheme *runtime.Scheme) error {
	namespaces := map[string]cache.Config{}
	for _, c := range e.contenders {
		for _, ns := range c.namespaces {
			namespaces[ns] = cache.Config{}
		}
	}
	c, err := cache.New(e.cfg, cache.Options{Scheme: scheme, DefaultNamespaces: namespaces})
	if err != nil {
		return err
	}
	cctx, cancel := context.WithCancel(context.Background())
	e.cache, e.cancelCache = c, cancel
	go func() { _ = c.Start(cctx) }()
	mc := &unstructured.Unstructured{}
	mc.SetGroupVersionKind(memcachedGVK)
	objs := []client.Object{mc, &appsv1.Deployment{}}
	for _, gvk := range metadataKinds {
		objs = append(objs, metadataObject(gvk))
	}
	for _, o := range objs {
		if _, err := c.GetInformer(ctx, o); err != nil {
			return fmt.Errorf("starting the informer for %T: %w", o, err)
		}
	}
	if !c.WaitForCacheSync(ctx) {
		return errors.New("the benchmark's cache did not sync")
	}
	return nil
}

func memcachedList() *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(memcachedGVK.GroupVersion().WithKind("MemcachedList"))
	return l
}

// metadataKinds are counted during deletion.
var metadataKinds = []schema.GroupVersionKind{
	appsv1.SchemeGroupVersion.WithKind("ReplicaSet"),
	corev1.SchemeGroupVersion.WithKind("Pod"),
	corev1.SchemeGroupVersion.WithKind("Service"),
	policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"),
}

func metadataObject(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{}
	o.SetGroupVersionKind(gvk)
	return o
}

// startOperator starts an operator process with extra args, serving
// metrics over plain HTTP and probes on loopback, and waits for /readyz.
func startOperator(ctx context.Context, name, bin string, extra []string, kubeconfig, tmp string, cfg config) (*operator, error) {
	metricsPort, err := testkit.FreePort()
	if err != nil {
		return nil, err
	}
	probePort, err := testkit.FreePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--kubeconfig", kubeconfig,
		"--metrics-bind-address", "127.0.0.1:" + strconv.Itoa(metricsPort),
		"--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(probePort),
		"--sync-period", cfg.SyncPeriod.String(),
	}, extra...)
	var pprofURL string
	if cfg.Profile != "" {
		pprofPort, err := testkit.FreePort()
		if err != nil {
			return nil, err
		}
		pprofURL = fmt.Sprintf("http://127.0.0.1:%d", pprofPort)
		args = append(args, "--pprof-bind-address", strings.TrimPrefix(pprofURL, "http://"))
	}
	logPath := filepath.Join(tmp, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting the %s operator: %w", name, err)
	}
	op := &operator{name: name, cmd: cmd, metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort), pprofURL: pprofURL, log: logPath, exited: make(chan struct{})}
	go func() {
		op.exitErr = cmd.Wait()
		_ = logFile.Close()
		close(op.exited)
	}()
	progress(fmt.Sprintf("%s operator pid %d %s", name, cmd.Process.Pid, strings.Join(args[2:], " ")))
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-op.exited:
			return false, fmt.Errorf("the %s operator exited: %w (log: %s)", name, op.exitErr, tail(logPath))
		default:
		}
		resp, err := httpGet(ctx, readyz)
		return err == nil && resp == http.StatusOK, nil
	})
	if err != nil {
		return op, fmt.Errorf("waiting for the %s operator's /readyz: %w", name, err)
	}
	return op, nil
}

// pid is the operator's process ID.
func (op *operator) pid() int { return op.cmd.Process.Pid }

// alive returns an error when the operator has exited.
func (op *operator) alive() error {
	select {
	case <-op.exited:
		return fmt.Errorf("the %s operator exited: %w (log: %s)", op.name, op.exitErr, tail(op.log))
	default:
		return nil
	}
}

// stop sends SIGTERM to the operator's process group, then SIGKILL after
// 10 s, and waits for it to exit.
func (op *operator) stop() error {
	if op == nil || op.cmd.Process == nil {
		return nil
	}
	pid := op.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-op.exited:
		return nil
	case <-time.After(10 * time.Second):
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	select {
	case <-op.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("operator pid %d did not exit", pid)
	}
}

// tearDown stops the operator and the cache, deletes the cluster and removes
// the temporary directory. It runs with its own deadline, so that it also
// works after Ctrl-C.
func (e *env) tearDown() error {
	if e == nil {
		return nil
	}
	progress("tearing down")
	var errs []error
	for _, op := range e.ops {
		errs = append(errs, op.stop())
	}
	if e.cancelCache != nil {
		e.cancelCache()
	}
	if e.created {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		errs = append(errs, e.cluster.Delete(ctx))
		cancel()
	}
	if e.tmp != "" {
		errs = append(errs, os.RemoveAll(e.tmp))
	}
	fmt.Fprintln(os.Stderr)
	return errors.Join(errs...)
}

func isLoopback(host string) bool {
	u := strings.TrimPrefix(strings.TrimPrefix(host, "https://"), "http://")
	h, _, err := net.SplitHostPort(u)
	if err != nil {
		h = u
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

func httpGet(ctx context.Context, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// tail returns the last lines of a file, for error messages.
func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// progress prints a status line, replacing the previous one.
func progress(s string) {
	fmt.Fprintf(os.Stderr, "\r\033[K%s", s)
}

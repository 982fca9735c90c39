// Package harness is the shared TestMain setup of opkit's e2e-framework suites.
//
// By default each suite (each test binary) creates its own uniquely named
// local cluster through e2e-framework's kwok provider, with the binaries in
// opkit's bin/ (`make cluster-tools`), adds fake nodes, and deletes the cluster
// when the suite ends. Environment variables change that:
//
//	E2E_CLUSTER=existing   use the cluster of --kubeconfig / $KUBECONFIG; create and delete nothing
//	E2E_PROVIDER=kind      create a kind cluster instead (needs Docker and kind on PATH); suites
//	                       that want real nodes get every tarball of E2E_IMAGES loaded into it
//	                       (kind load image-archive). Not run here (no Docker): it compiles, and
//	                       suites that dial a Service's ClusterIP from the test process
//	                       (e2e/incluster's etcd clients) need a route to kind's service network
//	                       (a Linux host with the kind network's bridge; not Docker Desktop)
//	E2E_NODES=N            number of kwok fake nodes (default 3)
//	E2E_REAL_NODES=N       also start N real nodes (kubelet + containerd; needs root,
//	                       `make node-tools images`); a suite asks for them with WithRealNodes
//	E2E_IMAGES=DIR         image tarballs loaded into real nodes (default .local/images)
//
// Real nodes (package internal/localcluster/realnode) share this machine's
// network namespace, so one cluster at a time has them: a suite that wants
// them holds a machine-wide lock from cluster creation to deletion, and
// other such suites wait for it. The real nodes are removed before the
// cluster is deleted, on failure and on SIGINT/SIGTERM too; leftovers of a
// killed suite are removed by the next suite that takes the lock.
//
// Teardown: the cluster is deleted after the tests, after a failing setup, and
// on SIGINT/SIGTERM. A test binary killed outright (a test's panic, go test's
// -timeout) cannot clean up after itself, so each kwok cluster is named after
// the process that made it (opkit-e2e-PID) and the next suite to start deletes
// clusters whose process is gone.
//
// Use:
//
//	var testEnv env.Environment
//
//	func TestMain(m *testing.M) { harness.Main(m, &testEnv) }
//
// A suite that needs more of its kwok cluster passes options, for example
// WithKwokctlArgs("--enable-crds=PortForward"); one that runs an operator
// as a process adds WithCRDs and WithOperators.
package harness

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/envfuncs"
	"sigs.k8s.io/e2e-framework/support"
	"sigs.k8s.io/e2e-framework/support/kind"
	"sigs.k8s.io/e2e-framework/third_party/kwok"

	"github.com/opkit-dev/opkit/internal/localcluster"
	"github.com/opkit-dev/opkit/internal/repo"
)

// Environment variables read by New.
const (
	EnvCluster  = "E2E_CLUSTER"
	EnvProvider = "E2E_PROVIDER"
	EnvNodes    = "E2E_NODES"
	EnvReal     = "E2E_REAL_NODES"
	EnvImages   = "E2E_IMAGES"
)

// ClusterPrefix starts the name of every cluster the harness creates.
const ClusterPrefix = "opkit-e2e-"

// Main builds the environment with New(opts...), stores it in *testEnv,
// runs the tests and exits. A setup error fails the run with its message.
func Main(m *testing.M, testEnv *env.Environment, opts ...Option) {
	e, err := New(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e harness:", err)
		os.Exit(1)
	}
	*testEnv = e
	os.Exit(e.Run(m))
}

// Option configures New.
type Option func(*options)

type options struct {
	kwokctlArgs []string
	realNodes   int
	noFakeNodes bool
	parallel    int
	crds        []crds
	operators   []*Operator
	finish      []env.Func
}

type crds struct {
	dir         string
	addToScheme func(*runtime.Scheme) error
	lists       []k8s.ObjectList
}

// WithCRDs installs the CRDs in dir (relative to the repository's root)
// once the cluster is up, and waits until the API server serves lists
// of them (WaitForAPI).
func WithCRDs(dir string, addToScheme func(*runtime.Scheme) error, lists ...k8s.ObjectList) Option {
	return func(o *options) { o.crds = append(o.crds, crds{dir, addToScheme, lists}) }
}

// WithOperators starts ops, in order, after the CRDs, and stops them
// after the cluster's deletion (each is also killed with this process).
func WithOperators(ops ...*Operator) Option {
	return func(o *options) { o.operators = append(o.operators, ops...) }
}

// WithFinish runs fns after the suite's tests, after the cluster's
// deletion and the operators' stop.
func WithFinish(fns ...env.Func) Option {
	return func(o *options) { o.finish = append(o.finish, fns...) }
}

// WithKwokctlArgs passes args to `kwokctl create cluster` when the suite
// creates a kwok cluster, for example "--enable-crds=PortForward". They are
// ignored with E2E_PROVIDER=kind and E2E_CLUSTER=existing, where the suite
// has to check for what it needs.
func WithKwokctlArgs(args ...string) Option {
	return func(o *options) { o.kwokctlArgs = append(o.kwokctlArgs, args...) }
}

// WithRealNodes asks for at least n real nodes (kubelet + containerd, real
// containers) besides the fake ones, with the images of `make images`
// loaded. They are labelled realnode.NodeLabel=true; pin pods to them with
// that node selector. With E2E_PROVIDER=kind every node is real and this is
// ignored; with E2E_CLUSTER=existing the suite must check for itself.
func WithRealNodes(n int) Option {
	return func(o *options) { o.realNodes = max(o.realNodes, n) }
}

// WithoutFakeNodes leaves kwok's fake nodes out of a cluster with real
// nodes (WithRealNodes), so that every pod runs for real: an operator
// deployed in-cluster, and the pods it makes, cannot land on a node that
// only pretends to run them. E2E_NODES is ignored then.
func WithoutFakeNodes() Option {
	return func(o *options) { o.noFakeNodes = true }
}

// WithParallelTests lets up to n of the suite's parallel tests (t.Parallel)
// run at once when go test's -parallel is not given; its default is the
// CPU count. For suites whose tests wait on real pods far more than they
// use the CPU, so that a small machine still runs all of them together.
func WithParallelTests(n int) Option {
	return func(o *options) { o.parallel = n }
}

// New returns an e2e-framework environment whose setup creates (or reuses) a
// cluster as described in the package documentation, then installs the
// suite's CRDs and starts its operators.
func New(opts ...Option) (env.Environment, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	e, err := newCluster(&o)
	if err != nil {
		return nil, err
	}
	if len(o.crds)+len(o.operators) > 0 {
		root, err := repo.Root()
		if err != nil {
			return nil, err
		}
		for _, c := range o.crds {
			e.Setup(envfuncs.SetupCRDs(filepath.Join(root, c.dir), "*.yaml"), WaitForAPI(c.addToScheme, c.lists...))
		}
		for _, op := range o.operators {
			e.Setup(op.Start(root))
		}
	}
	// Registered after the cluster's deletion, so they run after it.
	for _, op := range o.operators {
		e.Finish(op.Stop)
	}
	e.Finish(o.finish...)
	return e, nil
}

// newCluster returns the environment with the cluster's setup and
// deletion.
func newCluster(o *options) (env.Environment, error) {
	cfg, err := envconf.NewFromFlags()
	if err != nil {
		return nil, fmt.Errorf("parsing e2e flags: %w", err)
	}
	if err := defaultParallel(o.parallel); err != nil {
		return nil, err
	}
	if os.Getenv(EnvCluster) == "existing" {
		if cfg.KubeconfigFile() == "" {
			cfg.WithKubeconfigFile(os.Getenv("KUBECONFIG"))
		}
		if cfg.KubeconfigFile() == "" {
			return nil, fmt.Errorf("%s=existing needs --kubeconfig or $KUBECONFIG", EnvCluster)
		}
		return env.NewWithConfig(cfg), nil
	}

	nodes := 3
	if s := os.Getenv(EnvNodes); s != "" {
		if nodes, err = strconv.Atoi(s); err != nil || nodes < 1 {
			return nil, fmt.Errorf("%s=%q: want a positive number of nodes", EnvNodes, s)
		}
	}
	if s := os.Getenv(EnvReal); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%s=%q: want a number of real nodes", EnvReal, s)
		}
		o.realNodes = max(o.realNodes, n)
	}
	name := ClusterPrefix + strconv.Itoa(os.Getpid())

	var provider support.E2EClusterProvider
	var afterCreate env.Func
	var createArgs []string
	// beforeDestroy runs before the cluster is deleted, in Finish and on a
	// signal; afterDestroy after it.
	beforeDestroy, afterDestroy := func(context.Context) {}, func() {}
	switch p := os.Getenv(EnvProvider); p {
	case "", "kwok":
		bin, err := repo.BinDir()
		if err != nil {
			return nil, err
		}
		// The kwok provider runs kwokctl with this process's environment.
		if err := localcluster.Setenv(bin); err != nil {
			return nil, err
		}
		cluster := &localcluster.Cluster{Name: name, BinDir: bin}
		if err := deleteOrphans(bin); err != nil {
			return nil, err
		}
		provider = kwok.NewProvider().WithPath(cluster.Kwokctl()).
			WithOpts(kwok.WithWaitDuration(2 * time.Minute))
		createArgs = o.kwokctlArgs
		afterCreate = func(ctx context.Context, c *envconf.Config) (context.Context, error) {
			return ctx, cluster.ScaleNodes(ctx, nodes)
		}
		if o.noFakeNodes {
			if o.realNodes == 0 {
				return nil, errors.New("e2e harness: WithoutFakeNodes needs WithRealNodes: a cluster needs nodes")
			}
			afterCreate = func(ctx context.Context, c *envconf.Config) (context.Context, error) { return ctx, nil }
		}
		if o.realNodes > 0 {
			real, err := prepareRealNodes(cluster, o.realNodes)
			if err != nil {
				return nil, err
			}
			createArgs = append(createArgs, real.createArgs...)
			fake := afterCreate
			afterCreate = func(ctx context.Context, c *envconf.Config) (context.Context, error) {
				if ctx, err := fake(ctx, c); err != nil {
					return ctx, err
				}
				return ctx, real.start(ctx)
			}
			beforeDestroy, afterDestroy = real.stop, real.unlock
		}
	case "kind":
		provider = kind.NewProvider()
		afterCreate = func(ctx context.Context, _ *envconf.Config) (context.Context, error) { return ctx, nil }
		if o.realNodes > 0 {
			// Every kind node is real: a suite that wants real pods
			// gets the images make images built.
			loader, ok := provider.(support.E2EClusterProviderWithImageLoader)
			if !ok {
				return nil, errors.New("e2e harness: the kind provider cannot load image archives")
			}
			images, err := imagesDir()
			if err != nil {
				return nil, err
			}
			afterCreate = func(ctx context.Context, _ *envconf.Config) (context.Context, error) {
				return ctx, loadImageArchives(ctx, loader, images)
			}
		}
	default:
		return nil, fmt.Errorf("%s=%q: want kwok (default) or kind", EnvProvider, p)
	}

	e := env.NewWithConfig(cfg)
	destroy := envfuncs.DestroyCluster(name)
	stopSignals := destroyOnSignal(name, provider, beforeDestroy)
	e.Setup(createCluster(provider, name, createArgs), afterCreate)
	e.Finish(func(ctx context.Context, c *envconf.Config) (context.Context, error) {
		stopSignals()
		beforeDestroy(ctx)
		ctx, err := destroy(ctx, c)
		afterDestroy()
		return ctx, err
	})
	return e, nil
}

// createCluster is envfuncs.CreateCluster with args for the provider's
// create command, and a failed create still deletes whatever part of the
// cluster was started.
func createCluster(p support.E2EClusterProvider, name string, args []string) env.Func {
	return func(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
		// kwokctl allocates ports by scanning for free ones, so concurrent
		// creations (suites run in parallel) would collide.
		unlock, err := localcluster.LockCreate(ctx)
		if err != nil {
			return ctx, err
		}
		k := p.SetDefaults().WithName(name)
		kubeconfig, err := k.Create(ctx, args...)
		if err == nil {
			cfg.WithKubeconfigFile(kubeconfig)
			err = k.WaitForControlPlane(ctx, cfg.Client())
		}
		unlock()
		if err != nil {
			if derr := p.Destroy(context.WithoutCancel(ctx)); derr != nil {
				err = errors.Join(err, fmt.Errorf("cleaning up after the failed create: %w", derr))
			}
			return ctx, fmt.Errorf("creating cluster %s: %w", name, err)
		}
		// Later steps (envfuncs.DestroyCluster in Finish) find the cluster
		// under its name, as envfuncs.CreateCluster stores it.
		return context.WithValue(ctx, support.ClusterNameContextKey(name), k), nil
	}
}

// destroyOnSignal deletes the cluster and exits when the process is
// interrupted. The returned func stops watching.
func destroyOnSignal(name string, p support.E2EClusterProvider, beforeDestroy func(context.Context)) func() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			fmt.Fprintf(os.Stderr, "e2e harness: %v: deleting cluster %s\n", sig, name)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			beforeDestroy(ctx)
			if err := p.Destroy(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "e2e harness:", err)
			}
			os.Exit(1)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// deleteOrphans deletes kwok clusters named ClusterPrefix+PID whose process
// no longer exists: leftovers of suites that were killed.
func deleteOrphans(bin string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names, err := localcluster.List(ctx, bin)
	if err != nil {
		return err
	}
	for _, n := range names {
		if !localcluster.IsOrphan(n, ClusterPrefix) {
			continue
		}
		fmt.Fprintf(os.Stderr, "e2e harness: deleting orphaned cluster %s\n", n)
		c := &localcluster.Cluster{Name: n, BinDir: bin}
		if err := c.Delete(ctx); err != nil {
			return fmt.Errorf("deleting orphaned cluster %s: %w", n, err)
		}
	}
	return nil
}

// defaultParallel sets go test's -parallel to n (n > 0) unless the command
// line gives it. Flags are parsed by then (envconf.NewFromFlags), and the
// testing package reads the value when the tests start (m.Run).
func defaultParallel(n int) error {
	if n <= 0 {
		return nil
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if given {
		return nil
	}
	if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
		return fmt.Errorf("e2e harness: setting -test.parallel: %w", err)
	}
	return nil
}

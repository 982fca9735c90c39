// Package testenv starts one envtest control plane (a real kube-apiserver and
// etcd) for a package's tests, with opkit's test CRDs installed.
//
// Use it from TestMain:
//
//	var env *testenv.Env
//
//	func TestMain(m *testing.M) { testenv.Main(m, &env) }
//
// The binaries come from $KUBEBUILDER_ASSETS or, when that is unset, from the
// repository's bin/ directory, where `make envtest-assets` puts them. A missing
// binary fails the run with a message naming that make target; it never skips.
package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/opkit-dev/opkit/internal/repo"
	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
)

// Env is a running envtest control plane.
type Env struct {
	// Config reaches the API server with cluster-admin rights.
	Config *rest.Config
	// Scheme knows the built-in types and the test API.
	Scheme *runtime.Scheme
	// Client is a direct (uncached) client built from Config and Scheme.
	Client client.Client

	env *envtest.Environment
}

// Option changes how Start configures the environment.
type Option func(*envtest.Environment)

// WithCRDPaths installs CRDs from extra files or directories, in addition to
// opkit's test CRDs.
func WithCRDPaths(paths ...string) Option {
	return func(e *envtest.Environment) {
		e.CRDDirectoryPaths = append(e.CRDDirectoryPaths, paths...)
	}
}

// AssetsDir returns the directory holding kube-apiserver and etcd, or an error
// that names the make target installing them.
func AssetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		var err error
		if dir, err = repo.BinDir(); err != nil {
			return "", err
		}
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("envtest needs %s in %s: run `make envtest-assets` (or set KUBEBUILDER_ASSETS): %w", b, dir, err)
		}
	}
	return dir, nil
}

// Start starts a control plane with opkit's test CRDs installed.
// Call Stop when done.
func Start(opts ...Option) (*Env, error) {
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, testv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("building scheme: %w", err)
		}
	}
	e := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(root, "internal", "testapi", "crd")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	e.CRDInstallOptions.Scheme = scheme
	for _, o := range opts {
		o(e)
	}
	cfg, err := e.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest from %s: %w", assets, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = e.Stop()
		return nil, fmt.Errorf("building client: %w", err)
	}
	return &Env{Config: cfg, Scheme: scheme, Client: c, env: e}, nil
}

// Stop stops the control plane.
func (e *Env) Stop() error {
	if err := e.env.Stop(); err != nil {
		return fmt.Errorf("stopping envtest: %w", err)
	}
	return nil
}

// Main is a TestMain body: it starts a control plane, stores it in *env, runs
// the tests and stops it. A control plane that cannot start fails the run.
// controller-runtime's logs are discarded unless OPKIT_TEST_LOGS is set.
func Main(m *testing.M, env **Env, opts ...Option) {
	os.Exit(run(m, env, opts))
}

func run(m *testing.M, env **Env, opts []Option) int {
	// controller-runtime logs through a global logger and warns, with a
	// stack trace, when none is set. Tests log nothing unless asked.
	if os.Getenv("OPKIT_TEST_LOGS") != "" {
		ctrllog.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	} else {
		ctrllog.SetLogger(logr.Discard())
	}
	e, err := Start(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

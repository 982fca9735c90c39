package testenv

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Env is a running control plane.
type Env struct {
	// Config reaches the API server with cluster-admin rights.
	Config *rest.Config
	// Scheme knows the built-in kinds and those of WithScheme.
	Scheme *runtime.Scheme
	// Client is a direct (uncached) client: reads see every write at once.
	Client client.Client

	env *envtest.Environment
	// namespaces are those Namespace made, by the name of the test.
	nsMu       sync.Mutex
	namespaces map[string][]string
}

// Option configures Start.
type Option func(*envtest.Environment, *runtime.Scheme) error

// WithCRDs installs the CRDs in these files or directories (such as
// config/crd/bases). A path that does not exist fails Start.
func WithCRDs(paths ...string) Option {
	return func(e *envtest.Environment, _ *runtime.Scheme) error {
		e.CRDDirectoryPaths = append(e.CRDDirectoryPaths, paths...)
		return nil
	}
}

// WithScheme adds kinds to Env.Scheme, such as an API package's
// AddToScheme.
func WithScheme(add ...func(*runtime.Scheme) error) Option {
	return func(_ *envtest.Environment, s *runtime.Scheme) error {
		for _, f := range add {
			if err := f(s); err != nil {
				return fmt.Errorf("WithScheme: %w", err)
			}
		}
		return nil
	}
}

// WithWebhooks installs the webhook configurations in these files or
// directories (such as config/webhook), pointed at the webhook server of
// the manager StartManager builds. A path that does not exist fails Start.
func WithWebhooks(paths ...string) Option {
	return func(e *envtest.Environment, _ *runtime.Scheme) error {
		for _, p := range paths {
			if _, err := os.Stat(p); err != nil {
				return fmt.Errorf("WithWebhooks: %w", err)
			}
		}
		e.WebhookInstallOptions.Paths = append(e.WebhookInstallOptions.Paths, paths...)
		return nil
	}
}

// WithBinaryAssets runs kube-apiserver and etcd from dir instead of
// $KUBEBUILDER_ASSETS.
func WithBinaryAssets(dir string) Option {
	return func(e *envtest.Environment, _ *runtime.Scheme) error {
		e.BinaryAssetsDirectory = dir
		return nil
	}
}

// ErrNoAssets is returned by Start when KUBEBUILDER_ASSETS is unset and
// WithBinaryAssets is not given.
var ErrNoAssets = errors.New("testenv: KUBEBUILDER_ASSETS is unset: point it at envtest's binaries (setup-envtest use -p path)")

// Start starts a control plane with the options' CRDs installed. Call
// Stop when done.
func Start(opts ...Option) (*Env, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	e := &envtest.Environment{ErrorIfCRDPathMissing: true, Scheme: scheme}
	for _, o := range opts {
		if err := o(e, scheme); err != nil {
			return nil, err
		}
	}
	if e.BinaryAssetsDirectory == "" && os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, ErrNoAssets
	}
	e.CRDInstallOptions.Scheme = scheme
	cfg, err := e.Start()
	if err != nil {
		return nil, fmt.Errorf("testenv: starting envtest: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = e.Stop()
		return nil, fmt.Errorf("testenv: %w", err)
	}
	return &Env{Config: cfg, Scheme: scheme, Client: c, env: e}, nil
}

// Stop stops the control plane.
func (e *Env) Stop() error {
	if err := e.env.Stop(); err != nil {
		return fmt.Errorf("testenv: stopping envtest: %w", err)
	}
	return nil
}

// Main is a TestMain body: it starts a control plane, stores it in *env,
// runs the tests and stops it. A control plane that cannot start fails the
// run; it never skips. controller-runtime logs nothing unless
// OPKIT_TEST_LOGS is set.
func Main(m *testing.M, env **Env, opts ...Option) {
	os.Exit(run(m, env, opts))
}

func run(m *testing.M, env **Env, opts []Option) int {
	if os.Getenv("OPKIT_TEST_LOGS") != "" {
		ctrllog.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	} else {
		ctrllog.SetLogger(logr.Discard())
	}
	e, err := Start(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

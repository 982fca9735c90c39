// Package testenv is opkit's own use of the public testenv: one envtest
// control plane per package, with opkit's test CRDs and scheme.
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

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/opkit-dev/opkit/internal/repo"
	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/testenv"
)

// Env is the public kit's control plane.
type Env = testenv.Env

// Counter counts a client's requests (Env.CountingConfig).
type Counter = testenv.Counter

// Option is the public kit's option.
type Option = testenv.Option

// WithCRDPaths installs CRDs from extra files or directories, in addition to
// opkit's test CRDs.
func WithCRDPaths(paths ...string) Option { return testenv.WithCRDs(paths...) }

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

// defaults are opkit's assets, test CRDs and scheme, before opts.
func defaults(opts []Option) ([]Option, error) {
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	return append([]Option{
		testenv.WithBinaryAssets(assets),
		testenv.WithCRDs(filepath.Join(root, "internal", "testapi", "crd")),
		testenv.WithScheme(apiextensionsv1.AddToScheme, testv1.AddToScheme),
	}, opts...), nil
}

// Start starts a control plane with opkit's test CRDs installed.
// Call Stop when done.
func Start(opts ...Option) (*Env, error) {
	all, err := defaults(opts)
	if err != nil {
		return nil, err
	}
	return testenv.Start(all...)
}

// Main is testenv.Main with opkit's defaults.
func Main(m *testing.M, env **Env, opts ...Option) {
	all, err := defaults(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		os.Exit(1)
	}
	testenv.Main(m, env, all...)
}

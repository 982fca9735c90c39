// Package memcached replays the memcached example's walkthrough against a
// real cluster: it builds the operator, runs it as a separate process
// against the suite's cluster, and drives Memcached objects through their
// life with the API only, as a user would.
package memcached

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/envfuncs"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
	"github.com/opkit-dev/opkit/internal/repo"
)

var testEnv env.Environment

// operator is the memcached operator, run as a process.
var operator = &harness.Operator{
	Name:    "memcached",
	Package: "./examples/memcached",
	Args: func(*envconf.Config, string) ([]string, error) {
		return []string{"--metrics-bind-address=0", "--health-probe-bind-address=0", "--zap-log-level=info"}, nil
	},
}

func TestMain(m *testing.M) {
	e, err := harness.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e harness:", err)
		os.Exit(1)
	}
	testEnv = e
	root, err := repo.Root()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	e.Setup(
		envfuncs.SetupCRDs(filepath.Join(root, "examples/memcached/config/crd/bases"), "*.yaml"),
		harness.WaitForAPI(v1beta1.AddToScheme, &v1beta1.MemcachedList{}),
		operator.Start(root),
	)
	// Registered after the harness's cluster deletion, so it runs after
	// it; the operator is also killed with this process (Pdeathsig).
	e.Finish(operator.Stop)
	os.Exit(e.Run(m))
}

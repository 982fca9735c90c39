// Package memcached replays the memcached example's walkthrough against a
// real cluster: it builds the operator, runs it as a separate process
// against the suite's cluster, and drives Memcached objects through their
// life with the API only, as a user would.
package memcached

import (
	"testing"

	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
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
	harness.Main(m, &testEnv,
		harness.WithCRDs("examples/memcached/config/crd/bases", v1beta1.AddToScheme, &v1beta1.MemcachedList{}),
		harness.WithOperators(operator))
}

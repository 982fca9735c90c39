// Package shard runs the memcached operator as three shards (--shard),
// separate processes against one kwok cluster, and checks that they
// share the Memcacheds, take over a killed shard's, and give them back.
package shard

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

// shardNamespace holds the shards' Leases.
const shardNamespace = "default"

// shards are the operator's replicas, named r0 to r3 in the ring; the
// suite starts the first three, the test the fourth.
var shards = func() []*harness.Operator {
	var ops []*harness.Operator
	for i := range 4 {
		id := fmt.Sprintf("r%d", i)
		ops = append(ops, &harness.Operator{
			Name:    "memcached-" + id,
			Package: "./examples/memcached",
			Args: func(*envconf.Config, string) ([]string, error) {
				return []string{"--metrics-bind-address=0", "--health-probe-bind-address=0", "--zap-log-level=info",
					"--shard", "--shard-identity=" + id, "--shard-namespace=" + shardNamespace}, nil
			},
		})
	}
	return ops
}()

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
	)
	for i, s := range shards {
		if i < 3 {
			e.Setup(s.Start(root))
		}
		// After the cluster's deletion; also killed with this process.
		e.Finish(s.Stop)
	}
	os.Exit(e.Run(m))
}

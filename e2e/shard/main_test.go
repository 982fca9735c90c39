// Package shard runs the memcached operator as three shards (--shard),
// separate processes against one kwok cluster, and checks that they
// share the Memcacheds, take over a killed shard's, and give them back.
package shard

import (
	"fmt"
	"testing"

	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
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
	harness.Main(m, &testEnv,
		harness.WithCRDs("examples/memcached/config/crd/bases", v1beta1.AddToScheme, &v1beta1.MemcachedList{}),
		harness.WithOperators(shards[:3]...),
		// The fourth, started by the test, stops with the others.
		harness.WithFinish(shards[3].Stop))
}

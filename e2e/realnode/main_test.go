// Package realnode proves the local cluster's real nodes (kubelet +
// containerd, internal/localcluster/realnode) are a substrate operators
// can be tested on: real containers from the images of `make images` pass
// real probes, reach each other through Services and cluster DNS, keep
// data on dynamically provisioned volumes, answer kubectl logs, exec and
// port-forward, and a 3-member etcd cluster forms over DNS peer URLs. The
// cluster has two real nodes, and the workloads are spread over both, so
// pod traffic crosses nodes.
//
// The suites run in parallel (t.Parallel) on the one cluster: each works
// in a namespace of its own and none restarts or changes a node, and they
// wait on real pods far more than they use the CPU.
package realnode

import (
	"testing"

	"sigs.k8s.io/e2e-framework/pkg/env"

	"github.com/opkit-dev/opkit/e2e/harness"
)

var testEnv env.Environment

// realNodes is how many real nodes the suite's cluster has.
const realNodes = 2

func TestMain(m *testing.M) { harness.Main(m, &testEnv, harness.WithRealNodes(realNodes)) }

// Package etcdnodes runs the etcd example operator through the loss of the
// nodes under its members, on two real nodes (kubelet + containerd) under
// recorded client load: a `kubectl drain` whose evictions go through the
// cluster's PodDisruptionBudget, then a node that dies outright and is
// later declared gone (tainted node.kubernetes.io/out-of-service, as
// Kubernetes' non-graceful node shutdown asks). TestNodeCampaign, which
// make chaos runs, draws schedules of faults on the same nodes.
//
// Members keep their data on local volumes (the real nodes' local-path
// provisioner), so a member's pod can run only on the node that holds its
// claim. The operator runs as a process on this machine, outside the
// nodes, reaching members through the API server's port-forward, so that
// killing a node never kills the operator.
//
// The suite kills a node: it runs alone on its own cluster, which has
// Kubernetes' node monitor timings and evicts pods from an unreachable
// node after 20 s.
package etcdnodes

import (
	"path/filepath"
	"testing"

	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
)

var testEnv env.Environment

var operator = &harness.Operator{
	Name:    "etcd-operator",
	Package: "./examples/etcd",
	Args: func(_ *envconf.Config, dir string) ([]string, error) {
		return []string{"--metrics-bind-address=0", "--health-probe-bind-address=0", "--zap-log-level=info",
			"--backup-root=" + filepath.Join(dir, "backup-root"), "--member-access=port-forward"}, nil
	},
}

func TestMain(m *testing.M) {
	harness.Main(m, &testEnv, harness.WithRealNodes(2), harness.WithoutFakeNodes(),
		// Kubernetes' node monitor timings instead of kwokctl's, four
		// times longer, and pods evicted from an unreachable node after
		// 20 s instead of 5 minutes.
		harness.WithKwokctlArgs("--heartbeat-factor=0.25",
			"--extra-args=kube-apiserver=default-unreachable-toleration-seconds=20",
			"--extra-args=kube-apiserver=default-not-ready-toleration-seconds=20"),
		harness.WithCRDs("examples/etcd/config/crd/bases", v1alpha1.AddToScheme, &v1alpha1.EtcdClusterList{}),
		harness.WithOperators(operator))
}

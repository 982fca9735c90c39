// Package incluster runs the example operators as users run them: deployed
// in-cluster from their images (`make images`), the memcached operator
// with its Helm chart (helm's Go SDK) and the etcd operator with
// `make -C examples/etcd deploy`, under their own ServiceAccount and RBAC, on real nodes,
// managing real pods. A permission missing from config/rbac fails these
// suites: every call the operator makes goes through RBAC, unlike the
// suites that run the operator as a local process with the admin
// kubeconfig.
//
// The suites share one cluster (one set of real nodes runs per machine)
// and wait on real pods far more than they use the CPU, so they run at
// the same time: TestEtcdOperatorInCluster and
// TestMemcachedOperatorInCluster in parallel (t.Parallel), and within the
// first, once its one operator is deployed, the etcd lifecycle and the
// etcd backups suites. They touch only their own operator's namespace,
// their objects in default (named apart) and objects named after their
// operator, never the nodes.
package incluster

import (
	"testing"

	"sigs.k8s.io/e2e-framework/pkg/env"

	"github.com/opkit-dev/opkit/e2e/harness"
)

var testEnv env.Environment

// No fake nodes: the operator's pods and the pods it makes all run for
// real. Three suites run at once on any machine: the memcached suite and
// the etcd operator's two.
func TestMain(m *testing.M) {
	harness.Main(m, &testEnv, harness.WithRealNodes(2), harness.WithoutFakeNodes(), harness.WithParallelTests(3))
}

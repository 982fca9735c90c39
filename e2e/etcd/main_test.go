// Package etcd drives the etcd example operator on a local cluster for the
// Kubernetes side of its work: it builds the operator, runs it as a
// separate process against the suite's cluster, and checks the objects and
// conditions it produces.
//
// The kwok cluster runs pods without containers, so no member ever answers.
// The operator is started with --client-url-template pointing every member
// at a loopback port of this process that closes each connection at once,
// so that every dial fails quickly and the same way, and with a short
// --bootstrap-timeout. The suite therefore checks what the operator does
// with a new cluster whose seed never answers: it creates the seed member
// and its children, reports Bootstrapping (not Degraded) until the
// bootstrap timeout and then Degraded=True with reason BootstrapTimeout
// naming the endpoint it dials, adds no member it cannot reach, keeps the
// PodDisruptionBudget on etcd's members (not spec.size) through spec
// changes, and holds deletion for the final
// backup until told to skip it, or until its namespace is deleted. Membership changes against real etcd are
// tested in examples/etcd/internal/membership; an unreachable cluster that
// had answered before (Degraded=True, reason Unreachable) in the
// controller's envtest tests.
package etcd

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
)

var testEnv env.Environment

// operator is the etcd operator, run as a process. Its members are
// reached at refuser's address; the PVC backup store "backups" of
// namespace ns is backupRoot/ns/backups.
var operator = &harness.Operator{
	Name:    "etcd-operator",
	Package: "./examples/etcd",
	Args: func(_ *envconf.Config, dir string) ([]string, error) {
		backupRoot = filepath.Join(dir, "backup-root")
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("listening for member connections: %w", err)
		}
		refuser = l
		go refuse(l)
		return []string{"--metrics-bind-address=0", "--health-probe-bind-address=0", "--zap-log-level=info",
			"--backup-root=" + backupRoot, "--client-url-template=http://" + l.Addr().String(),
			"--bootstrap-timeout=" + bootstrapTimeout.String()}, nil
	},
}

// backupRoot is the operator's --backup-root, set when it starts.
var backupRoot string

// refuser accepts and closes the connections to members.
var refuser net.Listener

// bootstrapTimeout is the operator's --bootstrap-timeout: long enough for
// the first passes to report Bootstrapping, short enough to wait for.
const bootstrapTimeout = 20 * time.Second

func TestMain(m *testing.M) {
	harness.Main(m, &testEnv,
		harness.WithCRDs("examples/etcd/config/crd/bases", v1alpha1.AddToScheme, &v1alpha1.EtcdClusterList{}, &v1alpha1.EtcdBackupList{}),
		harness.WithOperators(operator),
		harness.WithFinish(func(ctx context.Context, _ *envconf.Config) (context.Context, error) {
			if refuser != nil {
				_ = refuser.Close()
			}
			return ctx, nil
		}))
}

// refuse accepts connections on l and closes them at once, until l is
// closed.
func refuse(l net.Listener) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		_ = conn.Close()
	}
}

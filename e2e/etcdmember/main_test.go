// Package etcdmember drives the etcd example operator against real etcd
// members: the operator is built and run as a process against the suite's
// kwok cluster, as in e2e/etcd, but the seed member of each EtcdCluster is
// a real etcd process that this suite starts itself.
//
// Kwok pods run no containers, so the suite is the kubelet of each seed
// pod: it waits for the pod the operator creates, reads the etcd command
// line from the pod's spec and runs bin/etcd (`make etcd`) on this machine
// with the same identity (name, initial cluster, cluster state and token,
// advertised peer URL) and three changes: the client URLs are a loopback
// port of the member's own, the peer listener is another loopback port,
// and the data directory is a temporary one, or, for a pod whose data
// volume is a claim, a directory of the claim's own that outlives the pod,
// so that a pod recreated on the claim restarts etcd on its data. A single member never dials
// its own peer URL, and etcd compares URL strings before resolving them,
// so the pod's DNS name in the advertised peer URL need not resolve.
//
// The seed pod of a cluster restored physically has init containers; the
// suite runs them first, as local processes with the paths of their
// volume mounts mapped to local directories (the data volume to the
// member's data directory, the backup claim to the PVC store): those in
// the operator's --restore-image run the operator binary the suite built
// (fetch-backup, finish-restore), the etcd image's etcdutl runs
// bin/etcdutl (`make etcd`).
//
// Each test runs its own operator process, in one of the two ways an
// operator outside the cluster reaches members:
//
//   - TestRealSeedMember: --client-url-template. It substitutes only
//     {member}, {cluster} and {namespace}. With every member on 127.0.0.1
//     these cannot select a port (a cluster's name starts with a letter,
//     as its Service's must, and a restore reads an EtcdBackup of its own
//     namespace), so the one template address serves one live member at a
//     time. The test therefore creates a cluster, writes keys, backs it up
//     with an EtcdBackup, deletes it (its final backup taken from the real
//     member), and only then creates a second cluster restored from the
//     EtcdBackup, whose member takes over the port.
//   - TestPortForwardMembers: --member-access=port-forward. The operator
//     dials each member's pod through the API server's port-forward; the
//     cluster is created with kwok's PortForward CRD (kwokctl
//     --enable-crds=PortForward) and the suite creates a PortForward per
//     member pod, so that kwok, serving the pod's kubelet API, forwards the
//     pod's port 2379 to the member's loopback client port. Two clusters
//     run at once, each member on its own port.
//
// While no member runs on a port, the suite holds the port itself and
// closes every connection, so the operator's dials fail fast and no other
// process can take the port.
package etcdmember

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/repo"
)

var testEnv env.Environment

// etcdBinary and etcdutlBinary are bin/etcd and bin/etcdutl, found by
// TestMain.
var etcdBinary, etcdutlBinary string

// restoreImage is the operator's --restore-image in TestRealSeedMember:
// the image of the seed's init containers that run the operator binary.
const restoreImage = "etcd-operator:e2e"

// operatorBinary is the operator binary the harness built, which the
// stand-in kubelet runs for init containers in restoreImage. Set when the
// operator starts.
var operatorBinary string

// backupRoot is the operator's --backup-root; the PVC store "backups" of
// namespace ns is the directory backupRoot/ns/backups (storeDir). Set when
// the operator starts.
var backupRoot string

// clientPort is the loopback address at which the operator of
// TestRealSeedMember reaches every member (its --client-url-template).
var clientPort = &portHolder{}

// operator is the etcd operator of the running test (startOperator).
var operator *harness.Operator

// repoRoot is the repository's root, where the operator is built.
var repoRoot string

// claimRoot holds the data of member pods whose data volume is a claim:
// the directory claimRoot/<namespace>/<claim> is the claim's volume, which
// outlives the pods mounting it (runPod). Made by TestMain.
var claimRoot string

// storeDir returns the PVC store storeName of namespace ns, as the
// operator finds it under its backup root, creating it as a user mounting
// the claim would.
func storeDir(t *testing.T, ns string) string {
	t.Helper()
	dir := filepath.Join(backupRoot, ns, storeName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatalf("creating the backup store of %s: %v", ns, err)
	}
	return dir
}

// startOperator builds and starts an etcd operator process with args
// after the suite's common flags and a fresh backup root (backupRoot),
// and stops it when t ends. It fails t if the operator exited before.
func startOperator(ctx context.Context, t *testing.T, cfg *envconf.Config, args ...string) {
	t.Helper()
	op := &harness.Operator{
		Name:    "etcd-operator",
		Package: "./examples/etcd",
		Args: func(_ *envconf.Config, dir string) ([]string, error) {
			backupRoot = filepath.Join(dir, "backup-root")
			// The harness builds the operator as <dir>/<Name>.
			operatorBinary = filepath.Join(dir, "etcd-operator")
			return append([]string{"--metrics-bind-address=0", "--health-probe-bind-address=0", "--zap-log-level=info",
				"--backup-root=" + backupRoot}, args...), nil
		},
	}
	operator = op
	t.Cleanup(func() {
		if exited, err := op.Exited(); exited {
			t.Errorf("the operator exited during the test: %v\n%s", err, op.Log())
		}
		if t.Failed() {
			t.Logf("operator log (end):\n%s", op.Log())
		}
		if _, err := op.Stop(context.WithoutCancel(ctx), cfg); err != nil {
			t.Error(err)
		}
	})
	if _, err := op.Start(repoRoot)(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

func TestMain(m *testing.M) {
	// Before a cluster is created: a missing etcd fails the suite at once.
	bin, err := repo.Tool("etcd", "etcd")
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdmember e2e:", err)
		os.Exit(1)
	}
	etcdBinary = bin
	if etcdutlBinary, err = repo.Tool("etcdutl", "etcd"); err != nil {
		fmt.Fprintln(os.Stderr, "etcdmember e2e:", err)
		os.Exit(1)
	}
	if repoRoot, err = repo.Root(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if claimRoot, err = os.MkdirTemp("", "etcdmember-claims-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The operators are stopped by their tests, and killed with this
	// process (Pdeathsig).
	harness.Main(m, &testEnv, harness.WithKwokctlArgs("--enable-crds=PortForward"),
		harness.WithCRDs("examples/etcd/config/crd/bases", v1alpha1.AddToScheme, &v1alpha1.EtcdClusterList{}, &v1alpha1.EtcdBackupList{}),
		harness.WithFinish(func(ctx context.Context, _ *envconf.Config) (context.Context, error) {
			return ctx, os.RemoveAll(claimRoot)
		}))
}

// portHolder keeps a loopback TCP port for a member's client URL. While
// no member runs on it, it listens on the port itself and closes every
// connection at once, so that the operator's dials fail fast and no other
// process takes the port; a member is started right after release and the
// port is held again after the member stops.
type portHolder struct {
	mu     sync.Mutex
	addr   string
	l      net.Listener
	closed bool
}

// reserve picks a free port on 127.0.0.1 and holds it.
func (p *portHolder) reserve() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("reserving a member client port: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.addr = l.Addr().String()
	p.l = l
	p.closed = false
	go refuse(l)
	return nil
}

// close stops holding the port for good: hold does nothing after it.
func (p *portHolder) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.l != nil {
		_ = p.l.Close()
		p.l = nil
	}
}

// address returns the port's address, 127.0.0.1:<port>.
func (p *portHolder) address() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// url returns the client URL at the port, http://127.0.0.1:<port>.
func (p *portHolder) url() string { return "http://" + p.address() }

// hold listens on the port again after a member has stopped.
func (p *portHolder) hold() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.l != nil || p.closed {
		return nil
	}
	l, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("holding the member client port %s again: %w", p.addr, err)
	}
	p.l = l
	go refuse(l)
	return nil
}

// release stops listening, for a member to bind the port.
func (p *portHolder) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.l != nil {
		_ = p.l.Close()
		p.l = nil
	}
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

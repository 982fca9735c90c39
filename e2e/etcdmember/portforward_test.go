package etcdmember

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/testkit"
)

// clientPortInPod is the etcd client port of a member pod, which the
// operator forwards to.
const clientPortInPod = 2379

// kwok's PortForward (kwok.x-k8s.io/v1alpha1): how kwok, serving the
// kubelet API of its fake nodes, forwards a port of the pod of the same
// name and namespace.
const (
	portForwardAPIVersion = "kwok.x-k8s.io/v1alpha1"
	portForwardKind       = "PortForward"
)

// TestPortForwardMembers runs the operator with --member-access=port-forward
// and no --client-url-template, so that the only way it can reach a member
// is the API server's port-forward to the member's pod: kwok serves it by
// forwarding the pod's port 2379 to the member's loopback client port (one
// PortForward per pod). Two EtcdClusters of size 1 run at once, each member
// on its own port, which one client URL template cannot express: both
// become Ready with their real member, never Degraded; an EtcdBackup of one
// streams its snapshot through the forward; deleting each takes its final
// backup through the forward.
func TestPortForwardMembers(t *testing.T) {
	suite := t
	clusters := []string{"pf-a", "pf-b"}
	var ns string
	members := map[string]*member{}
	// revs are the members' etcd revisions after the last write.
	revs := map[string]int64{}

	f := features.New("EtcdClusters reached through the API server's port-forward").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			requirePortForwardCRD(ctx, t, cfg)
			startOperator(ctx, t, cfg, "--member-access=port-forward")
			ns = envconf.RandomName("etcdpf", 16)
			testkit.Must(t, cfg.Client().Resources().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
			storeDir(t, ns)
			return ctx
		}).
		Assess("two clusters at once: each Ready with its own real member, reached through a port-forward to its pod", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			objs := map[string]*v1alpha1.EtcdCluster{}
			degraded := map[string]*degradedWatch{}
			for _, name := range clusters {
				objs[name] = newCluster(ns, name)
				degraded[name] = watchDegraded(ctx, t, cfg, ns, name)
				testkit.Must(t, r.Create(ctx, objs[name]))
			}
			for _, name := range clusters {
				port := &portHolder{}
				if err := port.reserve(); err != nil {
					t.Fatal(err)
				}
				suite.Cleanup(port.close)
				pod := name + "-0"
				forwardPod(ctx, t, r, ns, pod, port)
				members[name] = runPod(ctx, t, suite, r, ns, pod, port)
				assertSeedIdentity(t, objs[name], members[name])
			}
			for _, name := range clusters {
				ec := members[name].client(t)
				assertReadyWithMember(ctx, t, r, objs[name], members[name], ec)
				degraded[name].assertNeverDegraded(t)
				revs[name] = revision(t, ec)
			}
			return ctx
		}).
		Assess("an EtcdBackup streams the member's snapshot through the port-forward", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			name := clusters[0]
			ec := members[name].client(t)
			keys := map[string]string{}
			for i := range 20 {
				k, v := fmt.Sprintf("/e2e/key-%02d", i), fmt.Sprintf("value %d", i)
				resp, err := ec.Put(etcdCtx(t), k, v)
				if err != nil {
					t.Fatalf("writing %s to the member of %s: %v", k, name, err)
				}
				keys[k] = v
				revs[name] = resp.Header.Revision
			}
			if diff := cmp.Diff(keys, readKeys(t, ec)); diff != "" {
				t.Fatalf("keys read back from the member of %s (-want +got):\n%s", name, diff)
			}
			backUp(ctx, t, cfg, ns, name, name+"-backup", revs[name])
			return ctx
		}).
		Assess("deleting each cluster takes its final backup through the port-forward", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			for _, name := range clusters {
				deleteWithFinalBackup(ctx, t, cfg, ns, name, revs[name])
				if err := members[name].stop(); err != nil {
					t.Fatal(err)
				}
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, _ *testing.T, cfg *envconf.Config) context.Context {
			deleteNamespace(ctx, cfg, ns)
			return ctx
		}).Feature()

	testEnv.Test(t, f)
}

// requirePortForwardCRD fails t unless the cluster serves kwok's
// PortForward.
func requirePortForwardCRD(ctx context.Context, t *testing.T, cfg *envconf.Config) {
	t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion(portForwardAPIVersion)
	list.SetKind(portForwardKind + "List")
	if err := cfg.Client().Resources().List(ctx, list); err != nil {
		t.Fatalf("listing kwok PortForwards: %v; the suite needs a kwok cluster created with "+
			"`kwokctl create cluster --enable-crds=PortForward` (as it creates its own; with E2E_CLUSTER=existing, create yours so)", err)
	}
}

// forwardPod creates the kwok PortForward that makes the API server's
// port-forward to port 2379 of pod ns/name reach port.
func forwardPod(ctx context.Context, t *testing.T, r *resources.Resources, ns, name string, port *portHolder) {
	t.Helper()
	host, p, err := net.SplitHostPort(port.address())
	if err != nil {
		t.Fatal(err)
	}
	target, err := strconv.ParseInt(p, 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	pf := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": portForwardAPIVersion,
		"kind":       portForwardKind,
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{"forwards": []any{map[string]any{
			"ports":  []any{int64(clientPortInPod)},
			"target": map[string]any{"address": host, "port": target},
		}}},
	}}
	if err := r.Create(ctx, pf); err != nil {
		t.Fatalf("creating the PortForward of pod %s: %v", name, err)
	}
}

// revision returns the member's current etcd revision.
func revision(t *testing.T, ec *clientv3.Client) int64 {
	t.Helper()
	resp, err := ec.Get(etcdCtx(t), "/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("reading the member's revision: %v", err)
	}
	return resp.Header.Revision
}

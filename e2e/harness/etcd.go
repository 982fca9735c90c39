package harness

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
)

// EtcdRevisionBump is how far the etcd operator's physical restore moves
// the revision past the backup's (its seedrestore.RevisionBump, which e2e
// cannot import): a restored or rebuilt cluster answers at the backup's
// revision plus this.
const EtcdRevisionBump = 1_000_000_000

// WaitEtcdReady waits up to 4 minutes until the EtcdCluster is Ready at
// its generation.
func WaitEtcdReady(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, name string) {
	t.Helper()
	WaitFor(ctx, t, name+" to be Ready", 4*time.Minute, 2*time.Second, func(ctx context.Context) (bool, string) {
		var c v1alpha1.EtcdCluster
		if err := cfg.Client().Resources().Get(ctx, name, ns, &c); err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(c.Status.Conditions, "Ready")
		ok := ready != nil && ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == c.Generation
		return ok, fmt.Sprintf("Ready %+v at generation %d; pods: %s", ready, c.Generation, DescribePods(ctx, cfg, ns))
	})
}

// EtcdMember is one entry of etcd's member list.
type EtcdMember struct {
	ID      string
	Name    string
	Learner bool
}

func (m *EtcdMember) String() string {
	if m.Learner {
		return m.Name + "=" + m.ID + "(learner)"
	}
	return m.Name + "=" + m.ID
}

// EtcdMembers is etcd's member list, read through cli within a minute.
func EtcdMembers(ctx context.Context, t *testing.T, cli *clientv3.Client) []*EtcdMember {
	t.Helper()
	var out []*EtcdMember
	WaitFor(ctx, t, "etcd's member list", time.Minute, time.Second, func(ctx context.Context) (bool, string) {
		var err error
		out, err = ListEtcdMembers(ctx, cli)
		return err == nil, fmt.Sprint(err)
	})
	return out
}

// ListEtcdMembers reads etcd's member list through cli once, within 5 s.
func ListEtcdMembers(ctx context.Context, cli *clientv3.Client) ([]*EtcdMember, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	var out []*EtcdMember
	for _, m := range resp.Members {
		out = append(out, &EtcdMember{ID: fmt.Sprintf("%x", m.ID), Name: m.Name, Learner: m.IsLearner})
	}
	return out, nil
}

// Voting maps the started voting members to their IDs.
func Voting(ms []*EtcdMember) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		if !m.Learner && m.Name != "" {
			out[m.Name] = m.ID
		}
	}
	return out
}

// EtcdClient is an etcd client to the cluster's client Service, from this
// process through its ClusterIP (kube-proxy). It outlives the step that
// makes it: the caller closes it.
//
// It dials again at least every second (gRPC's default backs off to 120 s):
// a write gap the tests measure is then the cluster's and the Service's,
// not the client's backoff after dials to a dead member's endpoint.
func EtcdClient(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, cluster string) *clientv3.Client {
	t.Helper()
	var svc corev1.Service
	if err := cfg.Client().Resources().Get(ctx, cluster+"-client", ns, &svc); err != nil {
		t.Fatal(err)
	}
	redial := grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: time.Second,
		Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{svc.Spec.ClusterIP + ":2379"}, DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{redial}, Context: context.WithoutCancel(ctx)})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

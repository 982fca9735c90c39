package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/opkit-dev/opkit/e2e/harness"
)

// TestEtcdQuorumOverPodDNS: three etcd pods (not through our operator),
// spread over the real nodes, whose peer URLs are their DNS names under a
// headless Service form one cluster: every member is started and healthy, and a key written through
// one member is read through another.
func TestEtcdQuorumOverPodDNS(t *testing.T) {
	t.Parallel() // each suite has a namespace of its own (main_test.go)
	const ns, svcName, members = "etcd-real", "etcd", 3
	domain := func(i int) string { return fmt.Sprintf("etcd-%d.%s.%s.svc.cluster.local", i, svcName, ns) }
	var initial, endpoints []string
	for i := range members {
		initial = append(initial, fmt.Sprintf("etcd-%d=http://%s:2380", i, domain(i)))
		endpoints = append(endpoints, fmt.Sprintf("http://%s:2379", domain(i)))
	}
	// publishNotReadyAddresses: members must resolve each other before
	// any is ready, as in every etcd deployment on Kubernetes.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: ns},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: true,
			Selector: map[string]string{"cluster": svcName},
			Ports:    []corev1.ServicePort{{Name: "client", Port: 2379}, {Name: "peer", Port: 2380}},
		},
	}
	pods := make([]*corev1.Pod, members)
	for i := range members {
		name := fmt.Sprintf("etcd-%d", i)
		p := realPod(ns, name, etcdImage)
		p.Labels["cluster"] = svcName
		p.Spec.Hostname, p.Spec.Subdomain = name, svcName
		p.Spec.TopologySpreadConstraints = spreadOverRealNodes(map[string]string{"cluster": svcName})
		p.Spec.Containers[0].Command = []string{"/usr/local/bin/etcd"}
		p.Spec.Containers[0].Args = []string{
			"--name=" + name,
			"--data-dir=/var/lib/etcd",
			"--listen-peer-urls=http://0.0.0.0:2380",
			"--listen-client-urls=http://0.0.0.0:2379",
			"--initial-advertise-peer-urls=http://" + domain(i) + ":2380",
			"--advertise-client-urls=http://" + domain(i) + ":2379",
			"--initial-cluster=" + strings.Join(initial, ","),
			"--initial-cluster-state=new",
			"--initial-cluster-token=" + ns,
		}
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/etcd"}}
		pods[i] = p
	}
	etcdctl := func(ctx context.Context, t *testing.T, cfg *envconf.Config, endpoint string, args ...string) string {
		t.Helper()
		return execIn(ctx, t, cfg, ns, "etcd-0", append([]string{"/usr/local/bin/etcdctl", "--endpoints=" + endpoint, "--command-timeout=10s"}, args...)...)
	}
	setup, teardown := namespace(ns)

	f := features.New("etcd over pod DNS names").Setup(setup).Teardown(teardown).
		Assess("three members form a quorum", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			create(ctx, t, cfg, svc)
			for _, p := range pods {
				create(ctx, t, cfg, p)
			}
			onNodes := map[string]bool{}
			for _, p := range pods {
				onNodes[waitPodReady(ctx, t, cfg, ns, p.Name).Spec.NodeName] = true
			}
			if len(onNodes) != realNodes {
				t.Errorf("etcd members run on nodes %v, want all %d real nodes", onNodes, realNodes)
			}
			harness.WaitFor(ctx, t, "every member to be healthy", 2*time.Minute, 2*time.Second, func(ctx context.Context) (bool, string) {
				out, err := harness.Kubectl(ctx, cfg, "exec", "-n", ns, "etcd-0", "--", "/usr/local/bin/etcdctl",
					"--endpoints="+strings.Join(endpoints, ","), "endpoint", "health")
				return err == nil && strings.Count(out, "is healthy") == members, out + fmt.Sprint(err)
			})
			var list struct {
				Members []struct {
					Name      string   `json:"name"`
					PeerURLs  []string `json:"peerURLs"`
					IsLearner bool     `json:"isLearner"`
				} `json:"members"`
			}
			if err := json.Unmarshal([]byte(etcdctl(ctx, t, cfg, endpoints[0], "member", "list", "-w", "json")), &list); err != nil {
				t.Fatal(err)
			}
			var peers []string
			for _, m := range list.Members {
				if m.IsLearner || len(m.PeerURLs) != 1 {
					t.Errorf("member %s: learner=%v peerURLs=%v, want a voting member with one peer URL", m.Name, m.IsLearner, m.PeerURLs)
					continue
				}
				peers = append(peers, m.PeerURLs[0])
			}
			if len(peers) != members {
				t.Fatalf("member list has %d voting members (%v), want %d", len(peers), peers, members)
			}
			return ctx
		}).
		Assess("a write through one member is read through another", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if got := etcdctl(ctx, t, cfg, endpoints[0], "put", "substrate", "real"); got != "OK" {
				t.Fatalf("put through %s: %q", endpoints[0], got)
			}
			got := etcdctl(ctx, t, cfg, endpoints[members-1], "get", "substrate", "--print-value-only", "--consistency=l")
			if got != "real" {
				t.Errorf("linearizable get through %s = %q, want %q", endpoints[members-1], got, "real")
			}
			return ctx
		}).Feature()
	testEnv.Test(t, f)
}

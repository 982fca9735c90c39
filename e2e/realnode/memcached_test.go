package realnode

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/klient/wait/conditions"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/internal/localcluster/realnode"
)

// TestMemcachedOnRealNodes: two real memcached pods, one on each real
// node, become Available through real readiness probes; a client pod sets
// and gets keys through
// the ClusterIP Service and through each pod's DNS name under the headless
// Service; kubectl logs, exec and port-forward reach real pods.
func TestMemcachedOnRealNodes(t *testing.T) {
	t.Parallel() // each suite has a namespace of its own (main_test.go)
	const ns = "memcached-real"
	labels := map[string]string{"app": "memcached"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "memcached", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  harness.RealNodeSelector,
					TopologySpreadConstraints:     spreadOverRealNodes(labels),
					TerminationGracePeriodSeconds: ptr.To[int64](5),
					Containers: []corev1.Container{{
						Name: "memcached", Image: memcachedImage, ImagePullPolicy: corev1.PullIfNotPresent,
						Args:  []string{"-p", "11211", "-m", "64"},
						Ports: []corev1.ContainerPort{{Name: "memcached", ContainerPort: 11211}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("memcached")}},
							PeriodSeconds: 2,
						},
					}},
				},
			},
		},
	}
	port := []corev1.ServicePort{{Name: "memcached", Port: 11211, TargetPort: intstr.FromString("memcached")}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "memcached", Namespace: ns}, Spec: corev1.ServiceSpec{Selector: labels, Ports: port}}
	headless := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "memcached-headless", Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: port, ClusterIP: corev1.ClusterIPNone}}
	client := realPod(ns, "client", toolboxImage, "sleep")
	setup, teardown := namespace(ns)

	f := features.New("memcached on a real node").Setup(setup).Teardown(teardown).
		Assess("the real node is Ready and kwok does not fake its pods", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			var n corev1.Node
			if err := cfg.Client().Resources().Get(ctx, realnode.NodeName(0), "", &n); err != nil {
				t.Fatal(err)
			}
			if _, fake := n.Annotations["kwok.x-k8s.io/node"]; fake {
				t.Fatalf("node %s carries kwok's fake-node annotation", n.Name)
			}
			if got := n.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(got, "containerd://2.") {
				t.Errorf("container runtime = %q, want containerd 2.x", got)
			}
			return ctx
		}).
		Assess("two real memcached pods become Available through readiness probes", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			create(ctx, t, cfg, dep, svc, headless, client)
			cond := conditions.New(cfg.Client().Resources())
			if err := wait.For(cond.DeploymentAvailable(dep.Name, ns), wait.WithContext(ctx), wait.WithTimeout(3*time.Minute)); err != nil {
				t.Fatalf("memcached not Available: %v; pods: %s", err, harness.DescribePods(ctx, cfg, ns))
			}
			var pods corev1.PodList
			if err := cfg.Client().Resources(ns).List(ctx, &pods, resources.WithLabelSelector("app=memcached")); err != nil {
				t.Fatal(err)
			}
			var nodes []string
			for _, p := range pods.Items {
				nodes = append(nodes, p.Spec.NodeName)
				if p.Status.PodIP == "" {
					t.Errorf("pod %s has no pod IP", p.Name)
				}
			}
			slices.Sort(nodes)
			if diff := cmp.Diff([]string{realnode.NodeName(0), realnode.NodeName(1)}, nodes); diff != "" {
				t.Errorf("memcached pods' nodes (-want +got):\n%s", diff)
			}
			return ctx
		}).
		Assess("a client pod sets and gets through the Service and the pods' DNS names", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			waitPodReady(ctx, t, cfg, ns, client.Name)
			var pods corev1.PodList
			if err := cfg.Client().Resources(ns).List(ctx, &pods, resources.WithLabelSelector("app=memcached")); err != nil {
				t.Fatal(err)
			}
			addrs := []string{"memcached:11211", "memcached." + ns + ".svc.cluster.local:11211"}
			for _, p := range pods.Items {
				// CoreDNS names a headless Service's endpoints without a
				// hostname after their dashed IP.
				name := strings.ReplaceAll(p.Status.PodIP, ".", "-") + ".memcached-headless." + ns + ".svc.cluster.local"
				if got := execIn(ctx, t, cfg, ns, client.Name, "toolbox", "lookup", name); got != p.Status.PodIP {
					t.Errorf("lookup %s = %q, want %s", name, got, p.Status.PodIP)
				}
				addrs = append(addrs, name+":11211")
			}
			for i, addr := range addrs {
				value := fmt.Sprintf("value-%d", i)
				if got := execIn(ctx, t, cfg, ns, client.Name, "toolbox", "memcached", addr, fmt.Sprintf("key-%d", i), value); got != value {
					t.Errorf("memcached set/get through %s = %q, want %q", addr, got, value)
				}
			}
			out, err := harness.Kubectl(ctx, cfg, "exec", "-n", ns, client.Name, "--", "toolbox", "lookup", "example.com")
			if err == nil {
				t.Errorf("example.com resolved from a pod (%q): cluster DNS must not forward off the machine", out)
			}
			return ctx
		}).
		Assess("kubectl logs reads a real container's output", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			out, err := harness.Kubectl(ctx, cfg, "logs", "-n", ns, client.Name)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, "toolbox ready") {
				t.Errorf("kubectl logs %s = %q, want it to contain %q", client.Name, out, "toolbox ready")
			}
			return ctx
		}).
		Assess("kubectl port-forward reaches a real memcached", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			cmd, err := harness.KubectlCommand(ctx, cfg, "port-forward", "-n", ns, "deployment/memcached", "0:11211")
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cancel(); _ = cmd.Wait() }()
			local := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+)`)
			sc := bufio.NewScanner(stdout)
			var port string
			for port == "" && sc.Scan() {
				if m := local.FindStringSubmatch(sc.Text()); m != nil {
					port = m[1]
				}
			}
			if port == "" {
				t.Fatalf("kubectl port-forward printed no local port (%v)", sc.Err())
			}
			go func() {
				for sc.Scan() {
				}
			}()
			if got := memcachedVersion(ctx, t, "127.0.0.1:"+port); !strings.HasPrefix(got, "VERSION 1.6") {
				t.Errorf("memcached through port-forward answered %q, want VERSION 1.6.x", got)
			}
			return ctx
		}).Feature()
	testEnv.Test(t, f)
}

// memcachedVersion asks a memcached server for its version.
func memcachedVersion(ctx context.Context, t *testing.T, addr string) string {
	t.Helper()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprint(conn, "version\r\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("reading memcached's version through %s: %v", addr, err)
	}
	return strings.TrimSpace(line)
}

package clusterdns_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/localcluster/clusterdns"
	"github.com/opkit-dev/opkit/internal/repo"
	"github.com/opkit-dev/opkit/internal/testenv"
	"github.com/opkit-dev/opkit/internal/testkit"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// TestServesClusterRecords runs bin/coredns with a rendered Corefile against
// envtest's API server and asks it real DNS questions over UDP.
func TestServesClusterRecords(t *testing.T) {
	ctx := t.Context()
	const ns = "dns-test"
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	web := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80}},
			Selector: map[string]string{"app": "web"},
		},
	}
	headless := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "etcd"},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Ports:     []corev1.ServicePort{{Name: "client", Port: 2379}},
		},
	}
	// envtest runs no EndpointSlice controller: write the slice it would.
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: "etcd-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: "etcd"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.244.0.10"},
			Hostname:   ptr.To("etcd-0"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("client"), Port: ptr.To[int32](2379)}},
	}
	// Create fills in web.Spec.ClusterIP, allocated by the API server.
	for _, obj := range []client.Object{nsObj, web, headless, slice} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}

	addr := startCoreDNS(t, writeKubeconfig(t, env.Config))
	r := resolver(addr)

	// Names are rooted (trailing dot) so that the host's search list is not
	// applied.
	for _, tt := range []struct {
		name string
		want []string // nil: NXDOMAIN
	}{
		{name: "web.dns-test.svc.cluster.local.", want: []string{web.Spec.ClusterIP}},
		{name: "etcd-0.etcd.dns-test.svc.cluster.local.", want: []string{"10.244.0.10"}},
		{name: "etcd.dns-test.svc.cluster.local.", want: []string{"10.244.0.10"}},
		{name: "10-244-0-7.dns-test.pod.cluster.local.", want: []string{"10.244.0.7"}},
		{name: "nosuch.dns-test.svc.cluster.local."},
		// Outside the cluster domain: answered NXDOMAIN by the server
		// itself, since it has no upstream to forward to.
		{name: "example.com."},
		{name: "localhost."},
	} {
		t.Run(strings.TrimSuffix(tt.name, "."), func(t *testing.T) {
			got, err := r.LookupHost(ctx, tt.name)
			if tt.want == nil {
				var dnsErr *net.DNSError
				if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
					t.Fatalf("LookupHost(%s) = %v, %v; want a not-found (NXDOMAIN) error", tt.name, got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("LookupHost(%s): %v", tt.name, err)
			}
			slices.Sort(got)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("LookupHost(%s) mismatch (-want +got):\n%s", tt.name, diff)
			}
		})
	}

	t.Run("reverse", func(t *testing.T) {
		got, err := r.LookupAddr(ctx, web.Spec.ClusterIP)
		if err != nil {
			t.Fatalf("LookupAddr(%s): %v", web.Spec.ClusterIP, err)
		}
		if diff := cmp.Diff([]string{"web.dns-test.svc.cluster.local."}, got); diff != "" {
			t.Errorf("LookupAddr(%s) mismatch (-want +got):\n%s", web.Spec.ClusterIP, diff)
		}
	})
}

// resolver sends every query to the DNS server at addr.
func resolver(addr string) *net.Resolver {
	return &net.Resolver{
		PreferGo: true, // the Go resolver, so that Dial is honoured
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
}

// writeKubeconfig writes a kubeconfig for cfg (envtest's admin) and returns
// its path.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	server := cfg.Host
	if !strings.Contains(server, "://") {
		server = "https://" + server
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken,
	}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatalf("writing kubeconfig: %v", err)
	}
	return path
}

// startCoreDNS runs bin/coredns on loopback until the test ends and returns
// its DNS address once it answers for the API server's own Service,
// kubernetes.default (so the kubernetes plugin has synced). /ready alone is
// not enough: CoreDNS 1.14 can answer 200 there before its DNS listeners are
// up. A port taken between picking and binding is retried with new ports.
func startCoreDNS(t *testing.T, kubeconfig string) string {
	t.Helper()
	bin, err := repo.Tool("coredns", "coredns")
	if err != nil {
		t.Fatalf("coredns binary: %v", err)
	}
	for attempt := 1; ; attempt++ {
		addr, logs, err := tryStartCoreDNS(t, bin, kubeconfig)
		if err == nil {
			return addr
		}
		if attempt < 3 && strings.Contains(logs, "address already in use") {
			continue
		}
		t.Fatalf("starting coredns: %v\ncoredns output:\n%s", err, logs)
	}
}

func tryStartCoreDNS(t *testing.T, bin, kubeconfig string) (addr, logs string, err error) {
	t.Helper()
	dir := t.TempDir()
	port := testkit.MustFreePort(t) // free for both UDP and TCP: a DNS server binds both
	dnsAddr := fmt.Sprintf("127.0.0.1:%d", port)
	ready := fmt.Sprintf("127.0.0.1:%d", testkit.MustFreePort(t))
	corefile := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(corefile, []byte(clusterdns.Corefile(clusterdns.Options{
		BindAddress: "127.0.0.1",
		Port:        port,
		Kubeconfig:  kubeconfig,
		HealthAddr:  fmt.Sprintf("127.0.0.1:%d", testkit.MustFreePort(t)),
		ReadyAddr:   ready,
	})), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "coredns.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logf.Close() }()
	readLogs := func() string { b, _ := os.ReadFile(logPath); return string(b) }

	cmd := exec.Command(bin, "-conf", corefile)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return "", "", err
	}
	var waitErr error // set before exited is closed
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			return "", readLogs(), fmt.Errorf("coredns exited before ready: %w", waitErr)
		case <-ctx.Done():
			stop()
			return "", readLogs(), fmt.Errorf("coredns not ready at http://%s/ready: %w", ready, ctx.Err())
		case <-tick.C:
		}
		if isReady(ctx, ready) && answers(ctx, dnsAddr) {
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					t.Logf("coredns output:\n%s", readLogs())
				}
			})
			return dnsAddr, "", nil
		}
	}
}

// answers reports whether the DNS server at addr resolves the API server's
// Service.
func answers(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	ips, err := resolver(addr).LookupHost(ctx, "kubernetes.default.svc.cluster.local.")
	return err == nil && len(ips) > 0
}

func isReady(ctx context.Context, addr string) bool {
	return testkit.HTTPOK(ctx, "http://"+addr+"/ready")
}

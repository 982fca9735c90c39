package realnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/opkit-dev/opkit/internal/localcluster/clusterdns"
)

// DNSLog is the file CoreDNS logs every query and error to while the
// nodes run.
func DNSLog() string { return sharedDir("logs", "coredns.log") }

// startCoreDNS starts the cluster DNS: CoreDNS with its kubernetes plugin
// on DNSAddress():53, as its own user (opkit:coredns), answering for
// ClusterDomain only: other names are never forwarded off the machine.
// It waits until CoreDNS answers for the kubernetes Service.
func startCoreDNS(ctx context.Context, binDir string) error {
	corefile := clusterdns.Corefile(clusterdns.Options{
		BindAddress: DNSAddress().String(),
		Port:        53,
		Domain:      ClusterDomain,
		Kubeconfig:  coreDNSIdentity.kubeconfig(),
		HealthAddr:  "127.0.0.1:18180",
		ReadyAddr:   "127.0.0.1:18181",
		LogQueries:  true,
	})
	path := sharedDir("Corefile")
	if err := os.WriteFile(path, []byte(corefile), 0o644); err != nil {
		return err
	}
	d := daemon{
		name:    "coredns",
		path:    filepath.Join(binDir, "coredns"),
		args:    []string{"-conf", path},
		logFile: DNSLog(),
	}
	if err := d.start(); err != nil {
		return err
	}
	// CoreDNS can report /ready before its listeners are up, so wait for
	// an answer: kubernetes.default resolving proves both the listener
	// and the kubernetes plugin's sync with the API server.
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort(DNSAddress().String(), "53"))
	}}
	name := "kubernetes.default.svc." + ClusterDomain + "."
	return waitFor(ctx, time.Minute, "CoreDNS to answer for "+name, func() error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		addrs, err := resolver.LookupHost(ctx, name)
		if err != nil {
			return err
		}
		if len(addrs) != 1 || addrs[0] != KubernetesServiceIP {
			return fmt.Errorf("%s resolved to %v, want %s", name, addrs, KubernetesServiceIP)
		}
		return nil
	})
}

package clusterdns

import (
	"fmt"
	"strconv"
	"strings"
)

const (
	// DefaultDomain is the cluster domain Corefile serves when Options.Domain
	// is empty; it is also the kubelet's default clusterDomain.
	DefaultDomain = "cluster.local"
	// DefaultPort is the DNS port Corefile listens on when Options.Port is 0.
	DefaultPort = 53
	// CacheSeconds is the longest time CoreDNS caches an answer (the cache
	// plugin's TTL cap); a changed Service is seen at the latest this long
	// after the kubernetes plugin sees the change.
	CacheSeconds = 30
)

// reverseZones are the reverse-lookup zones the kubernetes plugin answers
// for (PTR records of Service and endpoint IPs).
var reverseZones = []string{"in-addr.arpa", "ip6.arpa"}

// Options configures the Corefile. The zero value of each field has the
// documented default.
type Options struct {
	// BindAddress is the IP address the server listens on, UDP and TCP: on
	// real nodes the pod bridge's gateway, e.g. "10.244.0.1". Empty means
	// every address of the host.
	BindAddress string
	// Port is the DNS port; 0 means DefaultPort (53). Pods always query
	// port 53, so other ports are for tests.
	Port int
	// Domain is the cluster domain, without a trailing dot; empty means
	// DefaultDomain. It must match the kubelet's clusterDomain.
	Domain string
	// Kubeconfig is the path of the kubeconfig the kubernetes plugin
	// watches the API server with; it needs list and watch on Services,
	// EndpointSlices and Namespaces. Empty means in-cluster configuration,
	// which only works inside a pod.
	Kubeconfig string
	// HealthAddr is the host:port of the health plugin's /health endpoint
	// (200 while the process serves). Empty leaves the plugin out.
	HealthAddr string
	// ReadyAddr is the host:port of the ready plugin's /ready endpoint (200
	// once the kubernetes plugin has synced, but possibly before the DNS
	// listeners are up: see the package doc). Empty leaves the plugin out.
	ReadyAddr string
	// LogQueries logs every query and its answer (the log plugin) to
	// standard output: what a DNS failure in a test is diagnosed from.
	LogQueries bool
}

// Corefile returns the CoreDNS configuration for opts: one server block
// authoritative for the cluster domain and the reverse zones, answered by
// the kubernetes plugin (with pod records, "pods insecure", and the
// hostnames of headless Services' endpoints), and one for every other name
// that answers NXDOMAIN. It uses only plugins hack/tools/coredns links.
func Corefile(opts Options) string {
	domain := strings.TrimSuffix(opts.Domain, ".")
	if domain == "" {
		domain = DefaultDomain
	}
	port := opts.Port
	if port == 0 {
		port = DefaultPort
	}
	p := strconv.Itoa(port)
	zones := append([]string{domain}, reverseZones...)

	var b strings.Builder
	w := func(indent int, format string, args ...any) {
		b.WriteString(strings.Repeat("    ", indent))
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	bind := func() {
		if opts.BindAddress != "" {
			w(1, "bind %s", opts.BindAddress)
		}
	}

	w(0, "# Cluster DNS for %s, rendered by clusterdns.Corefile. No forward plugin:", domain)
	w(0, "# names outside these zones get NXDOMAIN and never leave the machine.")
	keys := make([]string, len(zones))
	for i, z := range zones {
		keys[i] = z + ":" + p
	}
	w(0, "%s {", strings.Join(keys, " "))
	bind()
	w(1, "errors")
	if opts.LogQueries {
		w(1, "log")
	}
	if opts.HealthAddr != "" {
		w(1, "health %s", opts.HealthAddr)
	}
	if opts.ReadyAddr != "" {
		w(1, "ready %s", opts.ReadyAddr)
	}
	w(1, "kubernetes %s {", strings.Join(zones, " "))
	if opts.Kubeconfig != "" {
		w(2, "kubeconfig %s", quote(opts.Kubeconfig))
	}
	w(2, "pods insecure")
	w(1, "}")
	w(1, "cache %d", CacheSeconds)
	w(1, "loadbalance")
	w(0, "}")
	w(0, ".:%s {", p)
	bind()
	w(1, "errors")
	if opts.LogQueries {
		w(1, "log")
	}
	w(1, "template ANY ANY {")
	w(2, "rcode NXDOMAIN")
	w(1, "}")
	w(0, "}")
	return b.String()
}

// quote makes s one Corefile token, whatever spaces or quotes it holds.
func quote(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"`
}

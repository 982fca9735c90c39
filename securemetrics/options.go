package securemetrics

import (
	"crypto/tls"

	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// ServerOptions returns the manager's metrics server options for addr
// ("0" disables the endpoint). Secure serves HTTPS with a self-signed
// certificate, HTTP/1.1 only, to clients authorised to get /metrics (see
// the package documentation for the RBAC that takes); not secure serves
// plain HTTP to anyone.
func ServerOptions(addr string, secure bool) metricsserver.Options {
	if !secure {
		return metricsserver.Options{BindAddress: addr}
	}
	return metricsserver.Options{
		BindAddress:    addr,
		SecureServing:  true,
		FilterProvider: AuthFilter,
		TLSOpts:        []func(*tls.Config){DisableHTTP2},
	}
}

// DisableHTTP2 restricts a TLS server to HTTP/1.1 by offering only it in
// ALPN. Use it for any endpoint of an operator that serves on the pod
// network, webhooks included.
func DisableHTTP2(c *tls.Config) {
	c.NextProtos = []string{"http/1.1"}
}

package securemetrics_test

import (
	"crypto/tls"
	"flag"

	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/opkit-dev/opkit/securemetrics"
)

// An operator's main: HTTPS metrics by default, plain HTTP when run on a
// workstation with --metrics-secure=false.
func ExampleServerOptions() {
	addr := flag.String("metrics-bind-address", ":8443", "address of the metrics endpoint; 0 disables it")
	secure := flag.Bool("metrics-secure", true, "serve metrics over HTTPS to clients allowed to get /metrics only")
	flag.Parse()
	opts := ctrl.Options{Metrics: securemetrics.ServerOptions(*addr, *secure)}
	_ = opts // ctrl.NewManager(cfg, opts)
}

// An operator that sets up its metrics server itself (its own certificate
// directory, say) uses the filter alone.
func ExampleAuthFilter() {
	opts := metricsserver.Options{
		BindAddress:    ":8443",
		SecureServing:  true,
		CertDir:        "/etc/metrics-certs",
		FilterProvider: securemetrics.AuthFilter,
		TLSOpts:        []func(*tls.Config){securemetrics.DisableHTTP2},
	}
	_ = ctrl.Options{Metrics: opts} // ctrl.NewManager(cfg, ...)
}

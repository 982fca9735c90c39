package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/webhook"
)

// TestFlagDefaults: what the operator does with no flags, and that each
// flag sets its field. The progress delay's default is a measured choice
// (defaultProgressDelay), so a change to it shows here.
func TestFlagDefaults(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want flags
	}{
		{"no flags", nil, flags{
			metricsAddr: ":8443", metricsSecure: true, probeAddr: ":8081", pprofAddr: "0",
			readyEvents: "on-recovery", concurrency: 16, syncPeriod: 10 * time.Hour, progressDelay: 5 * time.Minute,
			webhook: webhook.Flags{CertDir: filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs"),
				Service: "memcached-operator-webhook-service", ValidatingConfiguration: "memcached-operator-validating-webhook-configuration",
				Conversions: []string{"memcacheds.cache.opkit.dev"}},
		}},
		{"every flag", []string{
			"--metrics-bind-address=127.0.0.1:1", "--metrics-secure=false", "--health-probe-bind-address=127.0.0.1:2",
			"--pprof-bind-address=127.0.0.1:3", "--leader-elect", "--leader-election-namespace=ops", "--namespaces=a,b",
			"--max-concurrent-reconciles=2", "--sync-period=15s", "--ready-events=always", "--progress-delay=0",
			"--webhook-port=9443", "--webhook-cert-dir=/certs", "--webhook-cert-secret=certs", "--webhook-service=svc",
			"--validating-webhook-configuration=vwc", "--webhook-cert-validity=3m", "--webhook-cert-renew-before=2m",
		}, flags{
			metricsAddr: "127.0.0.1:1", probeAddr: "127.0.0.1:2", pprofAddr: "127.0.0.1:3", leaderElect: true,
			leaderNamespace: "ops", namespaces: "a,b", concurrency: 2, syncPeriod: 15 * time.Second, readyEvents: "always",
			webhook: webhook.Flags{Port: 9443, CertDir: "/certs", CertSecret: "certs", Service: "svc", ValidatingConfiguration: "vwc",
				Conversions: []string{"memcacheds.cache.opkit.dev"}, CertValidity: 3 * time.Minute, CertRenewBefore: 2 * time.Minute},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("memcached", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			got := bindFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, *got, cmp.AllowUnexported(flags{})); diff != "" {
				t.Errorf("flags (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseReadyEvents: the two values, and an error naming the flag and
// its values for anything else.
func TestParseReadyEvents(t *testing.T) {
	tests := []struct {
		in      string
		want    reconcile.ReadyEvents
		wantErr string
	}{
		{"on-recovery", reconcile.ReadyEventsOnRecovery, ""},
		{"always", reconcile.ReadyEventsAlways, ""},
		{"never", 0, `--ready-events="never": use on-recovery or always`},
	}
	for _, tt := range tests {
		got, err := parseReadyEvents(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("parseReadyEvents(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseReadyEvents(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

package webhook_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/webhook"
)

func TestFlagsParse(t *testing.T) {
	defaults := webhook.Flags{CertDir: "/certs", Service: "svc", ValidatingConfiguration: "vwc"}
	tests := []struct {
		name string
		args []string
		want webhook.Flags
	}{
		{name: "defaults", want: defaults},
		{name: "every flag", args: []string{"--webhook-port=9443", "--webhook-cert-dir=/d", "--webhook-cert-secret=s", "--webhook-service=other",
			"--validating-webhook-configuration=", "--mutating-webhook-configuration=mwc", "--webhook-cert-validity=3m", "--webhook-cert-renew-before=2m"},
			want: webhook.Flags{Port: 9443, CertDir: "/d", CertSecret: "s", Service: "other", MutatingConfiguration: "mwc",
				CertValidity: 3 * time.Minute, CertRenewBefore: 2 * time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := defaults
			fs := flag.NewFlagSet("operator", flag.ContinueOnError)
			got.BindFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("flags (-want +got):\n%s", diff)
			}
			if (got.Server() != nil) != got.Enabled() {
				t.Errorf("Server() = %v with Enabled() = %v", got.Server(), got.Enabled())
			}
		})
	}
}

func TestFlagsSetup(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	tests := []struct {
		name    string
		flags   webhook.Flags
		wantErr string // empty: the "webhook" readiness check is added
		is      error
	}{
		{name: "off adds nothing", flags: webhook.Flags{CertSecret: "s", Service: "svc"}, wantErr: "none"},
		{name: "another party's certificate", flags: webhook.Flags{Port: 9443}},
		{name: "own certificate", flags: webhook.Flags{Port: 9443, CertSecret: "s", Service: "localhost", Namespace: "own", ValidatingConfiguration: "validating-webhook-configuration"}},
		{name: "own certificate, no Service", flags: webhook.Flags{Port: 9443, CertSecret: "s", Namespace: "ns"}, wantErr: "--webhook-service"},
		{name: "own certificate, no namespace", flags: webhook.Flags{Port: 9443, CertSecret: "s", Service: "svc"}, wantErr: "POD_NAMESPACE", is: webhook.ErrNoNamespace},
		{name: "own certificate, renewal after expiry", flags: webhook.Flags{Port: 9443, CertSecret: "s", Service: "svc", Namespace: "ns", CertValidity: time.Minute, CertRenewBefore: time.Hour},
			wantErr: "RenewBefore"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			probes := fmt.Sprintf("127.0.0.1:%d", testkit.MustFreePort(t))
			if tt.flags.Port != 0 {
				tt.flags.Port = testkit.MustFreePort(t)
			}
			tt.flags.CertDir = t.TempDir()
			own := tt.flags.Namespace == "own"
			if own {
				// The installer's Secret and the kubelet's copy of it:
				// cert-controller waits for both, even to stop.
				tt.flags.Namespace = namespace(t)
				secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tt.flags.Namespace, Name: tt.flags.CertSecret}}
				if err := env.Client.Create(t.Context(), secret); err != nil {
					t.Fatal(err)
				}
				restoreCABundles(t)
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan struct{})
				t.Cleanup(func() { cancel(); <-done })
				go func() {
					defer close(done)
					playKubelet(ctx, t, client.ObjectKeyFromObject(secret), tt.flags.CertDir, 0)
				}()
			}
			mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, WebhookServer: tt.flags.Server(),
				Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: probes})
			if err != nil {
				t.Fatal(err)
			}
			err = tt.flags.Setup(mgr)
			switch {
			case tt.wantErr == "none" || tt.wantErr == "":
				if err != nil {
					t.Fatal(err)
				}
				testkit.Run(t, mgr)
				// /readyz/<name> is 404 for a check never added. The
				// webhook's passes once its certificate is mounted: never
				// with another party's here, soon with its own.
				want := http.StatusInternalServerError
				switch {
				case tt.wantErr == "none":
					want = http.StatusNotFound
				case own:
					want = http.StatusOK
				}
				if got := readyz(t, probes, want); got != want {
					t.Errorf("GET /readyz/webhook = %d, want %d", got, want)
				}
			case err == nil || !strings.Contains(err.Error(), tt.wantErr):
				t.Errorf("Setup = %v, want an error naming %s", err, tt.wantErr)
			case tt.is != nil && !errors.Is(err, tt.is):
				t.Errorf("Setup = %v, want %v", err, tt.is)
			}
		})
	}
}

// readyz returns the status of GET /readyz/webhook: want, or the last
// other one after 20 s.
func readyz(t *testing.T, addr string, want int) int {
	t.Helper()
	var code int
	_ = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		resp, err := http.Get("http://" + addr + "/readyz/webhook")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		code = resp.StatusCode
		return code == want, nil
	})
	return code
}

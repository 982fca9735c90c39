package membership_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdtest"
	"github.com/opkit-dev/opkit/examples/etcd/internal/pki"
)

// TestIntegrationTLS runs the planner's steps on real etcd members that
// speak TLS to each other and to their clients, with client certificates
// required on both ports, as spec.tls makes them: the planner's client
// dials with the client certificate, as the operator does.
func TestIntegrationTLS(t *testing.T) {
	certs := etcdtest.NewCerts(t)

	t.Run("scale 3 to 5 to 3 without a failed write", func(t *testing.T) {
		scaleWithoutFailedWrites(t, newTLSLocalCluster(t, "tls-rw", 3, certs))
	})

	t.Run("a member lost with its data is replaced", func(t *testing.T) {
		replacesLostMember(t, newTLSLocalCluster(t, "tls-repl", 3, certs), "tls-repl-1")
	})

	t.Run("clients without a valid certificate are refused", func(t *testing.T) {
		m := etcdtest.StartTLSCluster(t, "tls-auth", 1, certs)[0]
		other, err := pki.NewCA("another-ca", pki.DefaultCAValidity, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		foreign, err := other.Issue(pki.Request{CommonName: "root", Usages: pki.Client, Validity: pki.DefaultValidity}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		clients := []struct {
			name   string
			tls    *tls.Config
			accept bool
		}{
			{"the client certificate", certs.ClientTLS(t), true},
			{"a member's certificate (client auth allowed)", etcdtest.ClientTLS(t, certs.CA.CertPEM, certs.Server), true},
			{"no certificate", etcdtest.ClientTLS(t, certs.CA.CertPEM, nil), false},
			{"a certificate of another CA", etcdtest.ClientTLS(t, certs.CA.CertPEM, foreign), false},
		}
		for _, c := range clients {
			for _, port := range []struct{ name, url string }{{"client", m.ClientURL + "/version"}, {"peer", m.PeerURL + "/version"}} {
				err := get(t.Context(), c.tls, port.url)
				if c.accept && err != nil {
					t.Errorf("%s on the %s port: refused: %v", c.name, port.name, err)
				}
				if !c.accept && err == nil {
					t.Errorf("%s on the %s port: accepted, want refused", c.name, port.name)
				}
			}
			// The operator's own client.
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			ec, err := etcdclient.NewFactory(time.Second).New(ctx, []string{m.ClientURL}, etcdclient.WithTLS(c.tls))
			if err == nil {
				_, err = ec.MemberList(ctx)
				_ = ec.Close()
			}
			cancel()
			if c.accept != (err == nil) {
				t.Errorf("%s: operator client MemberList error = %v, want accepted %v", c.name, err, c.accept)
			}
		}
		// Plain HTTP on a TLS port is refused too.
		if err := get(t.Context(), nil, strings.Replace(m.ClientURL, "https://", "http://", 1)+"/version"); err == nil {
			t.Error("plain HTTP on the client port: accepted, want refused")
		}
		// The readiness probe's plain endpoint answers without a certificate.
		if err := get(t.Context(), nil, m.ReadyURL()); err != nil {
			t.Errorf("readiness endpoint %s: %v", m.ReadyURL(), err)
		}
	})
}

// get GETs url with tlsConfig and fails unless the answer is 200.
func get(ctx context.Context, tlsConfig *tls.Config, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return &statusError{resp.Status}
	}
	return nil
}

type statusError struct{ status string }

func (e *statusError) Error() string { return "HTTP " + e.status }

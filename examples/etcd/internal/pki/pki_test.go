package pki_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/opkit-dev/opkit/examples/etcd/internal/pki"
)

var t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func newCA(t *testing.T, name string) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA(name, pki.DefaultCAValidity, t0)
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	return ca
}

func issue(t *testing.T, ca *pki.CA, req pki.Request, now time.Time) *pki.KeyPair {
	t.Helper()
	kp, err := ca.Issue(req, now)
	if err != nil {
		t.Fatalf("Issue(%+v): %v", req, err)
	}
	return kp
}

var serverReq = pki.Request{
	CommonName: "demo-server",
	DNSNames:   []string{"*.demo.default.svc", "demo-client.default.svc"},
	Usages:     pki.ServerAndClient,
	Validity:   pki.DefaultValidity,
}

func TestVerify(t *testing.T) {
	ca := newCA(t, "demo-ca")
	other := newCA(t, "other-ca")
	server := issue(t, ca, serverReq, t0)
	clientOnly := issue(t, ca, pki.Request{CommonName: "root", Usages: pki.Client, Validity: pki.DefaultValidity}, t0)
	short := issue(t, ca, pki.Request{CommonName: "short", DNSNames: serverReq.DNSNames, Usages: pki.Server, Validity: time.Hour}, t0)
	want := pki.Expect{Usages: pki.ServerAndClient, DNSNames: []string{"*.demo.default.svc", "demo-0.demo.default.svc"}}

	tests := []struct {
		name           string
		cert, key, ca  []byte
		want           pki.Expect
		now            time.Time
		wantErrContain string // "" for success
	}{
		{name: "valid", cert: server.CertPEM, key: server.KeyPEM, ca: server.CAPEM, want: want, now: t0},
		{name: "ca bundle with another CA first", cert: server.CertPEM, key: server.KeyPEM,
			ca: append(append([]byte{}, other.CertPEM...), ca.CertPEM...), want: want, now: t0},
		{name: "key of another certificate", cert: server.CertPEM, key: clientOnly.KeyPEM, ca: ca.CertPEM, want: want, now: t0,
			wantErrContain: "tls.crt and tls.key"},
		{name: "signed by another CA", cert: server.CertPEM, key: server.KeyPEM, ca: other.CertPEM, want: want, now: t0,
			wantErrContain: "does not verify against ca.crt"},
		{name: "expired", cert: short.CertPEM, key: short.KeyPEM, ca: ca.CertPEM, want: pki.Expect{Usages: pki.Server}, now: t0.Add(2 * time.Hour),
			wantErrContain: "does not verify against ca.crt"},
		{name: "client certificate used as a server's", cert: clientOnly.CertPEM, key: clientOnly.KeyPEM, ca: ca.CertPEM,
			want: pki.Expect{Usages: pki.Server}, now: t0, wantErrContain: "does not allow server auth"},
		{name: "server certificate without client auth", cert: short.CertPEM, key: short.KeyPEM, ca: ca.CertPEM,
			want: pki.Expect{Usages: pki.ServerAndClient}, now: t0, wantErrContain: "does not allow client auth"},
		{name: "wildcard missing", cert: server.CertPEM, key: server.KeyPEM, ca: ca.CertPEM,
			want: pki.Expect{Usages: pki.Server, DNSNames: []string{"*.other.default.svc"}}, now: t0,
			wantErrContain: "not valid for *.other.default.svc"},
		{name: "no certificate", cert: []byte("junk"), key: server.KeyPEM, ca: ca.CertPEM, want: want, now: t0,
			wantErrContain: "tls.crt and tls.key"},
		{name: "no CA", cert: server.CertPEM, key: server.KeyPEM, ca: nil, want: want, now: t0,
			wantErrContain: "ca.crt: invalid certificate: data does not contain any valid RSA or ECDSA certificates"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := pki.Verify(tt.cert, tt.key, tt.ca, tt.want, tt.now)
			if tt.wantErrContain == "" {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, pki.ErrInvalid) || !strings.Contains(err.Error(), tt.wantErrContain) {
				t.Fatalf("Verify error = %v, want ErrInvalid containing %q", err, tt.wantErrContain)
			}
		})
	}
}

// TestRenewedCAKeepsTrust: a CA renewed with its key verifies what it issued
// before, and the old CA certificate verifies what the renewed one issues,
// so members restarted one at a time keep trusting each other.
func TestRenewedCAKeepsTrust(t *testing.T) {
	old := newCA(t, "demo-ca")
	later := t0.Add(7 * 365 * 24 * time.Hour)
	renewed, err := old.Renew(pki.DefaultCAValidity, later)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if renewed.Cert.NotAfter.Sub(old.Cert.NotAfter) < 6*365*24*time.Hour {
		t.Fatalf("renewed CA expires %s, old %s: not renewed", renewed.Cert.NotAfter, old.Cert.NotAfter)
	}
	before := issue(t, old, serverReq, later)
	after := issue(t, renewed, serverReq, later)
	for _, tc := range []struct {
		name string
		kp   *pki.KeyPair
		ca   []byte
	}{
		{"old leaf, renewed CA", before, renewed.CertPEM},
		{"renewed leaf, old CA", after, old.CertPEM},
	} {
		if _, err := pki.Verify(tc.kp.CertPEM, tc.kp.KeyPEM, tc.ca, pki.Expect{Usages: pki.ServerAndClient}, later); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	parsed, err := pki.ParseCA(renewed.CertPEM, renewed.KeyPEM)
	if err != nil {
		t.Fatalf("ParseCA(renewed): %v", err)
	}
	if !parsed.Cert.Equal(renewed.Cert) {
		t.Fatal("ParseCA returned another certificate")
	}
}

func TestIssueNeverOutlivesItsCA(t *testing.T) {
	ca, err := pki.NewCA("short-ca", 2*time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	kp := issue(t, ca, serverReq, t0)
	if !kp.Cert.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Fatalf("certificate expires %s, after its CA (%s)", kp.Cert.NotAfter, ca.Cert.NotAfter)
	}
}

func TestIssueRefuses(t *testing.T) {
	ca := newCA(t, "demo-ca")
	for name, req := range map[string]pki.Request{
		"no usages":      {CommonName: "x", Validity: pki.DefaultValidity},
		"short validity": {CommonName: "x", Usages: pki.Server, Validity: time.Minute},
	} {
		if _, err := ca.Issue(req, t0); !errors.Is(err, pki.ErrInvalid) {
			t.Errorf("%s: Issue error = %v, want ErrInvalid", name, err)
		}
	}
}

func TestDueForRenewal(t *testing.T) {
	ca := newCA(t, "demo-ca")
	kp := issue(t, ca, pki.Request{CommonName: "x", Usages: pki.Server, Validity: 300 * time.Minute}, t0)
	// NotBefore is 5 minutes back: a 305-minute lifetime, due after 203m20s.
	due := pki.RenewalTime(kp.Cert)
	if diff := cmp.Diff(t0.Add(-5*time.Minute).Add(305*time.Minute*2/3), due); diff != "" {
		t.Fatalf("RenewalTime (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		at   time.Time
		want bool
	}{
		{t0, false},
		{due.Add(-time.Second), false},
		{due, true},
		{kp.Cert.NotAfter.Add(time.Hour), true},
	} {
		if got := pki.DueForRenewal(kp.Cert, tc.at); got != tc.want {
			t.Errorf("DueForRenewal at %s = %v, want %v", tc.at, got, tc.want)
		}
	}
}

func TestParseCARefuses(t *testing.T) {
	ca := newCA(t, "demo-ca")
	other := newCA(t, "other-ca")
	leaf := issue(t, ca, serverReq, t0)
	for name, in := range map[string][2][]byte{
		"a leaf":        {leaf.CertPEM, leaf.KeyPEM},
		"another's key": {ca.CertPEM, other.KeyPEM},
		"no key":        {ca.CertPEM, nil},
	} {
		if _, err := pki.ParseCA(in[0], in[1]); !errors.Is(err, pki.ErrInvalid) {
			t.Errorf("%s: ParseCA error = %v, want ErrInvalid", name, err)
		}
	}
}

// TestParseKeyFormats: the key encodings cert-manager and openssl write.
func TestParseKeyFormats(t *testing.T) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalECPrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range []*pem.Block{
		{Type: "EC PRIVATE KEY", Bytes: ecDER},
		{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)},
		{Type: "PRIVATE KEY", Bytes: pkcs8},
	} {
		if _, err := pki.ParseKey(pem.EncodeToMemory(block)); err != nil {
			t.Errorf("ParseKey(%s): %v", block.Type, err)
		}
	}
	if _, err := pki.ParseKey([]byte("not a key")); !errors.Is(err, pki.ErrInvalid) {
		t.Errorf("ParseKey(junk) error = %v, want ErrInvalid", err)
	}
}

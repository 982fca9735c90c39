package etcdtest

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/examples/etcd/internal/pki"
)

// Certs are the certificates of a local TLS cluster, made by package pki as
// the operator's spec.tls.auto makes them, but for 127.0.0.1 (where local
// members listen) instead of the pods' DNS names: a CA, the members' peer
// and server certificates (server and client auth) and a client
// certificate, written as files a member reads.
type Certs struct {
	CA                   *pki.CA
	Peer, Server, Client *pki.KeyPair
	// Dir holds <role>.crt, <role>.key and ca.crt.
	Dir string
}

// NewCerts makes Certs in a t.TempDir().
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	now := time.Now()
	ca, err := pki.NewCA("etcdtest-ca", pki.DefaultCAValidity, now)
	if err != nil {
		t.Fatalf("CA: %v", err)
	}
	local := pki.Request{DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		Usages: pki.ServerAndClient, Validity: pki.DefaultValidity}
	c := &Certs{CA: ca, Dir: t.TempDir()}
	for _, r := range []struct {
		role string
		pair **pki.KeyPair
		req  pki.Request
	}{
		{"peer", &c.Peer, withName(local, "etcdtest-peer")},
		{"server", &c.Server, withName(local, "etcdtest-server")},
		{"client", &c.Client, pki.Request{CommonName: "root", Usages: pki.Client, Validity: pki.DefaultValidity}},
	} {
		kp, err := ca.Issue(r.req, now)
		if err != nil {
			t.Fatalf("%s certificate: %v", r.role, err)
		}
		*r.pair = kp
		c.write(t, r.role+".crt", kp.CertPEM)
		c.write(t, r.role+".key", kp.KeyPEM)
	}
	c.write(t, "ca.crt", ca.CertPEM)
	return c
}

func withName(r pki.Request, cn string) pki.Request {
	r.CommonName = cn
	return r
}

func (c *Certs) write(t testing.TB, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(c.Dir, name), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// File returns the path of a file of Dir ("server.crt", "ca.crt").
func (c *Certs) File(name string) string { return filepath.Join(c.Dir, name) }

// ClientTLS is the TLS configuration of a client holding the client
// certificate, as the operator dials members.
func (c *Certs) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	return ClientTLS(t, c.CA.CertPEM, c.Client)
}

// ClientTLS is the TLS configuration of a client that trusts caPEM and
// presents pair (none if nil).
func ClientTLS(t testing.TB, caPEM []byte, pair *pki.KeyPair) *tls.Config {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA certificate")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}
	if pair != nil {
		cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

// args are the TLS flags of a member, as the operator's pods pass them.
func (c *Certs) args() []string {
	return []string{
		"--peer-cert-file", c.File("peer.crt"), "--peer-key-file", c.File("peer.key"),
		"--peer-trusted-ca-file", c.File("ca.crt"), "--peer-client-cert-auth",
		"--cert-file", c.File("server.crt"), "--key-file", c.File("server.key"),
		"--trusted-ca-file", c.File("ca.crt"), "--client-cert-auth",
	}
}

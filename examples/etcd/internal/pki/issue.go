package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"time"
)

// Usages are what a certificate may be used for.
type Usages int

// The usages the operator issues.
const (
	// Server certificates are presented by a TLS server.
	Server Usages = 1 << iota
	// Client certificates are presented by a TLS client.
	Client
	// ServerAndClient certificates are both. An etcd member needs this for
	// its peer certificate (it dials the other members with it) and for
	// its client certificate when client certificates are required
	// (etcd's own gRPC gateway dials the member's client port with it).
	ServerAndClient = Server | Client
)

func (u Usages) extKeyUsages() []x509.ExtKeyUsage {
	var out []x509.ExtKeyUsage
	if u&Server != 0 {
		out = append(out, x509.ExtKeyUsageServerAuth)
	}
	if u&Client != 0 {
		out = append(out, x509.ExtKeyUsageClientAuth)
	}
	return out
}

// String names the usages, as Verify's errors do.
func (u Usages) String() string {
	switch u {
	case Server:
		return "server auth"
	case Client:
		return "client auth"
	case ServerAndClient:
		return "server and client auth"
	}
	return fmt.Sprintf("Usages(%d)", int(u))
}

// Request is what a certificate is issued for.
type Request struct {
	// CommonName is the subject's common name. etcd takes it as the user
	// name of a client certificate when its authentication is enabled.
	CommonName string
	// DNSNames and IPAddresses are the subject alternative names a
	// server certificate is valid for.
	DNSNames    []string
	IPAddresses []net.IP
	// Usages is what the certificate may be used for (required).
	Usages Usages
	// Validity is the certificate's lifetime from now; at least
	// MinValidity.
	Validity time.Duration
}

// KeyPair is an issued certificate, its key and the CA that signed it, all
// PEM-encoded as a kubernetes.io/tls Secret holds them.
type KeyPair struct {
	// Cert is the certificate.
	Cert *x509.Certificate
	// CertPEM (tls.crt), KeyPEM (tls.key) and CAPEM (ca.crt).
	CertPEM, KeyPEM, CAPEM []byte
}

// Issue signs a certificate for req with a new ECDSA P-256 key, valid from
// now for req.Validity, but never past the CA's own expiry.
func (ca *CA) Issue(req Request, now time.Time) (*KeyPair, error) {
	if req.Usages&ServerAndClient == 0 {
		return nil, fmt.Errorf("%w: request for %q has no usages", ErrInvalid, req.CommonName)
	}
	if req.Validity < MinValidity {
		return nil, fmt.Errorf("%w: validity %s of %q is shorter than %s", ErrInvalid, req.Validity, req.CommonName, MinValidity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the key of %q: %w", req.CommonName, err)
	}
	serial, skid, err := identify(key.Public())
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(req.Validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: req.CommonName},
		DNSNames:              req.DNSNames,
		IPAddresses:           req.IPAddresses,
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           req.Usages.extKeyUsages(),
		BasicConstraintsValid: true,
		SubjectKeyId:          skid,
		AuthorityKeyId:        ca.Cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("signing the certificate of %q: %w", req.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the certificate of %q: %w", req.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &KeyPair{Cert: cert, CertPEM: encodeCert(der), KeyPEM: keyPEM, CAPEM: ca.CertPEM}, nil
}

// DueForRenewal reports whether cert has used two thirds of its lifetime
// at now (or more, or has expired), so that a certificate renewed then has
// a third of its predecessor's lifetime in which to reach every member.
func DueForRenewal(cert *x509.Certificate, now time.Time) bool {
	lifetime := cert.NotAfter.Sub(cert.NotBefore)
	return !now.Before(cert.NotBefore.Add(lifetime * 2 / 3))
}

// RenewalTime is when DueForRenewal becomes true for cert.
func RenewalTime(cert *x509.Certificate) time.Time {
	return cert.NotBefore.Add(cert.NotAfter.Sub(cert.NotBefore) * 2 / 3)
}

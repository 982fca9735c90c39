package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// ParseCert reads the first PEM certificate of data.
func ParseCert(data []byte) (*x509.Certificate, error) {
	certs, err := ParseCerts(data)
	if err != nil {
		return nil, err
	}
	return certs[0], nil
}

// ParseCerts reads every PEM certificate of data (a chain, or a CA bundle);
// at least one.
func ParseCerts(data []byte) ([]*x509.Certificate, error) {
	certs, err := certutil.ParseCertsPEM(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return certs, nil
}

// ParseKey reads a PEM private key: PKCS #8, SEC 1 (EC PRIVATE KEY) or
// PKCS #1 (RSA PRIVATE KEY), as cert-manager and openssl write them.
func ParseKey(data []byte) (crypto.Signer, error) {
	key, err := keyutil.ParsePrivateKeyPEM(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey, *rsa.PrivateKey, ed25519.PrivateKey:
		return k.(crypto.Signer), nil
	}
	return nil, fmt.Errorf("%w: unsupported private key type %T", ErrInvalid, key)
}

// matches fails when key is not the private key of cert.
func matches(cert *x509.Certificate, key crypto.Signer) error {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	pub, ok := key.Public().(equaler)
	if !ok || !pub.Equal(cert.PublicKey) {
		return fmt.Errorf("%w: the key is not the key of certificate %q", ErrInvalid, cert.Subject.CommonName)
	}
	return nil
}

// Expect is what Verify requires of a certificate.
type Expect struct {
	// Usages the certificate must allow.
	Usages Usages
	// DNSNames the certificate must be valid for; a wildcard name
	// ("*.demo.default.svc") must be in the certificate itself, which then
	// covers every member.
	DNSNames []string
}

// Verify checks a PEM certificate (tls.crt), its key (tls.key) and the CA
// bundle (ca.crt) that must have signed it, as a member or the operator
// will use them: the key is the certificate's, the certificate chains to
// the bundle, is valid at now, allows want.Usages and names want.DNSNames.
// The error (wrapping ErrInvalid) names the first check that failed.
func Verify(certPEM, keyPEM, caPEM []byte, want Expect, now time.Time) (*x509.Certificate, error) {
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, fmt.Errorf("%w: tls.crt and tls.key: %w", ErrInvalid, err)
	}
	chain, err := ParseCerts(certPEM)
	if err != nil {
		return nil, fmt.Errorf("tls.crt: %w", err)
	}
	cert := chain[0]
	cas, err := ParseCerts(caPEM)
	if err != nil {
		return nil, fmt.Errorf("ca.crt: %w", err)
	}
	roots := x509.NewCertPool()
	for _, ca := range cas {
		roots.AddCert(ca)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	usages := want.Usages.extKeyUsages()
	if len(usages) == 0 {
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageAny}
	}
	for _, u := range usages {
		_, err := cert.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{u}})
		if err == nil {
			continue
		}
		var invalid x509.CertificateInvalidError
		if errors.As(err, &invalid) && invalid.Reason == x509.IncompatibleUsage {
			return nil, fmt.Errorf("%w: tls.crt %q does not allow %s (extended key usage); %s needed", ErrInvalid,
				cert.Subject.CommonName, usageName(u), want.Usages)
		}
		return nil, fmt.Errorf("%w: tls.crt %q (valid %s to %s) does not verify against ca.crt: %w", ErrInvalid,
			cert.Subject.CommonName, cert.NotBefore.UTC().Format(time.RFC3339), cert.NotAfter.UTC().Format(time.RFC3339), err)
	}
	var missing []string
	for _, name := range want.DNSNames {
		if !slices.Contains(cert.DNSNames, name) && (strings.HasPrefix(name, "*") || cert.VerifyHostname(name) != nil) {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: tls.crt %q is not valid for %s (it names %s)", ErrInvalid, cert.Subject.CommonName,
			strings.Join(missing, ", "), strings.Join(cert.DNSNames, ", "))
	}
	return cert, nil
}

func usageName(u x509.ExtKeyUsage) string {
	switch u {
	case x509.ExtKeyUsageServerAuth:
		return "server auth"
	case x509.ExtKeyUsageClientAuth:
		return "client auth"
	}
	return fmt.Sprintf("usage %d", u)
}

// SameCerts reports whether two PEM bundles hold the same certificates in
// the same order, whatever their PEM headers and line breaks.
func SameCerts(a, b []byte) bool {
	ca, errA := ParseCerts(a)
	cb, errB := ParseCerts(b)
	if errA != nil || errB != nil || len(ca) != len(cb) {
		return false
	}
	for i := range ca {
		if !bytes.Equal(ca[i].Raw, cb[i].Raw) {
			return false
		}
	}
	return true
}

package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // RFC 5280 key identifiers are SHA-1 of the public key by convention
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// Validity defaults.
const (
	// DefaultCAValidity is the lifetime of a CA certificate NewCA makes:
	// ten years. It is renewed, with its key, after two thirds of it.
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
	// DefaultValidity is the lifetime of a certificate the operator
	// issues: one year, renewed after two thirds of it.
	DefaultValidity = 365 * 24 * time.Hour
	// MinValidity is the shortest lifetime Issue accepts.
	MinValidity = time.Hour
	// backdate is how far before now a certificate's validity starts, so
	// that a member whose clock is slightly behind accepts it.
	backdate = 5 * time.Minute
)

// ErrInvalid is returned (wrapped) for PEM data that is not a certificate
// or key of the expected kind, and for certificates that fail a check of
// Verify. The message names the problem.
var ErrInvalid = errors.New("invalid certificate")

// CA is a certificate authority: its certificate and its key.
type CA struct {
	// Cert is the CA certificate.
	Cert *x509.Certificate
	// Key is the CA's private key.
	Key crypto.Signer
	// CertPEM and KeyPEM are Cert and Key PEM-encoded.
	CertPEM, KeyPEM []byte
}

// NewCA makes a self-signed CA named commonName with a new ECDSA P-256 key,
// valid from now for validity.
func NewCA(commonName string, validity time.Duration, now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the CA key: %w", err)
	}
	return selfSign(pkix.Name{CommonName: commonName}, key, validity, now)
}

// Renew returns ca's certificate made again with the same subject and key,
// valid from now for validity. Certificates ca issued verify against the
// renewed certificate, and the renewed CA's against ca's.
func (ca *CA) Renew(validity time.Duration, now time.Time) (*CA, error) {
	return selfSign(ca.Cert.Subject, ca.Key, validity, now)
}

func selfSign(subject pkix.Name, key crypto.Signer, validity time.Duration, now time.Time) (*CA, error) {
	if validity < MinValidity {
		return nil, fmt.Errorf("%w: CA validity %s is shorter than %s", ErrInvalid, validity, MinValidity)
	}
	serial, skid, err := identify(key.Public())
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               subject,
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          skid,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("signing the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the CA certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// ParseCA reads a CA from its PEM-encoded certificate and key, as NewCA
// writes them. It fails when the certificate is not a CA or the key is not
// its key.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCert(certPEM)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%w: %q is not a CA certificate", ErrInvalid, cert.Subject.CommonName)
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	if err := matches(cert, key); err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// identify returns a new certificate's random serial number and the key
// identifier of its public key pub.
func identify(pub crypto.PublicKey) (*big.Int, []byte, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("serial number: %w", err)
	}
	id, err := keyID(pub)
	if err != nil {
		return nil, nil, err
	}
	return n.Add(n, big.NewInt(1)), id, nil
}

// keyID is the RFC 5280 (method 1) key identifier of pub.
func keyID(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encoding the public key: %w", err)
	}
	sum := sha1.Sum(der) //nolint:gosec // an identifier, not a signature
	return sum[:], nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding the key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

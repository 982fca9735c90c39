package realnode

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// ca is the cluster's certificate authority: kwokctl's, which the API
// server trusts for client certificates (--client-ca-file).
type ca struct {
	cert *x509.Certificate
	key  crypto.Signer
	// certFile is the CA certificate's path, for kubelet's clientCAFile.
	certFile string
}

// loadCA reads ca.crt and ca.key from kwokctl's pki directory.
func loadCA(pkiDir string) (*ca, error) {
	certFile := filepath.Join(pkiDir, "ca.crt")
	certs, err := certutil.CertsFromFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("reading the cluster CA: %w", err)
	}
	key, err := keyutil.PrivateKeyFromFile(filepath.Join(pkiDir, "ca.key"))
	if err != nil {
		return nil, fmt.Errorf("reading the cluster CA key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("the cluster CA key in %s cannot sign", pkiDir)
	}
	return &ca{cert: certs[0], key: signer, certFile: certFile}, nil
}

// issue writes a certificate and key signed by the CA to certFile and
// keyFile, for a client (the kubelet's own identity: CommonName and
// groups as the Node authorizer expects them) or a server (the kubelet's
// serving certificate, valid for ips and dnsNames).
func (c *ca) issue(certFile, keyFile string, subject pkix.Name, usage x509.ExtKeyUsage, ips []net.IP, dnsNames []string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  ips,
		DNSNames:     dnsNames,
	}
	// client-go's util/cert makes only self-signed certificates.
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), c.key)
	if err != nil {
		return fmt.Errorf("signing a certificate for %s: %w", subject.CommonName, err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	if err := certutil.WriteCert(certFile, pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: der})); err != nil {
		return err
	}
	return keyutil.WriteKey(keyFile, keyPEM)
}

// kubeletIdentity returns the subject of node name's client certificate,
// as the Node authorizer and NodeRestriction admission read it.
func kubeletIdentity(name string) pkix.Name {
	return pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}}
}

package controller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/pki"
)

// readCertificates reads and checks the three Secrets of c's TLS, those of
// known (by name) as they are there.
func readCertificates(ctx context.Context, r client.Reader, c *v1alpha1.EtcdCluster, now time.Time, known map[string]*corev1.Secret) (*certificates, error) {
	certs := &certificates{data: map[string][]byte{}}
	for _, role := range tlsRoles {
		sec, ok := known[role.secret(c)]
		if !ok {
			var err error
			if sec, err = getSecret(ctx, r, c.Namespace, role.secret(c)); err != nil {
				return nil, err
			}
		}
		if sec == nil {
			return nil, &tlsProblem{reason: ReasonTLSSecretMissing,
				err: fmt.Errorf("waiting for Secret %s (spec.tls.%s), the %s certificate", role.secret(c), role.field, role.name)}
		}
		cert, err := verifySecret(sec, role, c, now)
		if err != nil {
			return nil, &tlsProblem{reason: ReasonTLSSecretInvalid,
				err: fmt.Errorf("the %s certificate, Secret %s (spec.tls.%s): %w", role.name, sec.Name, role.field, err)}
		}
		if certs.notAfter.IsZero() || cert.NotAfter.Before(certs.notAfter) {
			certs.notAfter = cert.NotAfter
		}
		if c.Spec.TLS.Auto != nil {
			if at := pki.RenewalTime(cert); certs.renewAt.IsZero() || at.Before(certs.renewAt) {
				certs.renewAt = at
			}
		}
		for from, to := range copyKeys[role.name] {
			certs.data[to] = sec.Data[from]
		}
	}
	return certs, nil
}

// verifySecret checks that sec holds role's certificate for c.
func verifySecret(sec *corev1.Secret, role tlsRole, c *v1alpha1.EtcdCluster, now time.Time) (*x509.Certificate, error) {
	return pki.Verify(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey], sec.Data[caKey], role.want(c), now)
}

// caKey is the CA bundle's key in a kubernetes.io/tls Secret, as
// cert-manager writes it.
const caKey = "ca.crt"

func getSecret(ctx context.Context, r client.Reader, namespace, name string) (*corev1.Secret, error) {
	var sec corev1.Secret
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, name, err)
	}
	return &sec, nil
}

// clientTLS returns the TLS configuration the operator dials c's members
// with, nil for a cluster without TLS: that of the copy status.tls names,
// else (a cluster not yet passed by this operator) of the Secrets of
// spec.tls, read through r.
func clientTLS(ctx context.Context, r client.Reader, c *v1alpha1.EtcdCluster, now time.Time) (*tls.Config, error) {
	if !tlsEnabled(c) {
		return nil, nil
	}
	if st := c.Status.TLS; st != nil && st.SecretName != "" {
		sec, err := getSecret(ctx, r, c.Namespace, st.SecretName)
		if err != nil {
			return nil, err
		}
		if sec != nil {
			return copyTLS(sec.Data)
		}
	}
	certs, err := readCertificates(ctx, r, c, now, nil)
	if err != nil {
		return nil, err
	}
	return copyTLS(certs.data)
}

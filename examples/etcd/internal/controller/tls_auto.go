package controller

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/pki"
	"github.com/opkit-dev/opkit/ownership"
)

// issueAuto makes c's CA and certificates where they are missing, renews
// those due, and issues again any that the current CA did not sign or
// that no longer fits the cluster. It returns the names of the Secrets it
// wrote, and records in known every certificate's Secret as it left it.
func (h *ClusterHooks) issueAuto(ctx context.Context, c *v1alpha1.EtcdCluster, guard *corev1.ConfigMap, now time.Time, known map[string]*corev1.Secret) ([]string, error) {
	var issued []string
	ca, caSecret, err := h.ensureCA(ctx, c, guard, now)
	if err != nil {
		return nil, err
	}
	if caSecret != "" {
		issued = append(issued, caSecret)
	}
	for _, role := range tlsRoles {
		name := role.secret(c)
		sec, err := getSecret(ctx, h.secrets(), c.Namespace, name)
		if err != nil {
			return nil, err
		}
		if sec != nil && !metav1.IsControlledBy(sec, c) {
			return nil, &ownership.NotControlledError{Object: sec}
		}
		if sec != nil && pki.SameCerts(sec.Data[caKey], ca.CertPEM) {
			cert, err := pki.Verify(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey], ca.CertPEM, role.want(c), now)
			if err == nil && !pki.DueForRenewal(cert, now) && covers(cert, role.request(c)) {
				known[name] = sec
				continue
			}
		}
		req := role.request(c)
		req.Validity = certLifetime(c)
		pair, err := ca.Issue(req, now)
		if err != nil {
			return nil, fmt.Errorf("issuing the %s certificate: %w", role.name, err)
		}
		data := map[string][]byte{corev1.TLSCertKey: pair.CertPEM, corev1.TLSPrivateKeyKey: pair.KeyPEM, caKey: pair.CAPEM}
		written, err := h.writeSecret(ctx, c, guard, name, sec, data)
		if err != nil {
			return nil, err
		}
		known[name] = written
		issued = append(issued, name)
	}
	return issued, nil
}

// covers reports whether cert names everything req asks for: a
// certificate made by an operator that asked for fewer names is issued
// again.
func covers(cert *x509.Certificate, req pki.Request) bool {
	have := map[string]bool{}
	for _, n := range cert.DNSNames {
		have[n] = true
	}
	for _, n := range req.DNSNames {
		if !have[n] {
			return false
		}
	}
	return cert.Subject.CommonName == req.CommonName
}

// ensureCA returns c's CA, made if missing and renewed (with its key)
// once due; the name of its Secret when it was written.
func (h *ClusterHooks) ensureCA(ctx context.Context, c *v1alpha1.EtcdCluster, guard *corev1.ConfigMap, now time.Time) (*pki.CA, string, error) {
	name := CASecretName(c.Name)
	sec, err := getSecret(ctx, h.secrets(), c.Namespace, name)
	if err != nil {
		return nil, "", err
	}
	var ca *pki.CA
	if sec != nil {
		if !metav1.IsControlledBy(sec, c) {
			return nil, "", &ownership.NotControlledError{Object: sec}
		}
		ca, err = pki.ParseCA(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey])
		if err != nil {
			// The CA the members trust is gone: a new one would split the
			// cluster (see TLSSpec). A person must put it back.
			return nil, "", &tlsProblem{reason: ReasonTLSSecretInvalid,
				err: fmt.Errorf("the cluster's CA, Secret %s (spec.tls.auto): %w; restore it from a backup of the Secret", name, err)}
		}
		if !pki.DueForRenewal(ca.Cert, now) {
			return ca, "", nil
		}
		ca, err = ca.Renew(pki.DefaultCAValidity, now)
	} else {
		ca, err = pki.NewCA(c.Name+"-ca", pki.DefaultCAValidity, now)
	}
	if err != nil {
		return nil, "", fmt.Errorf("the CA of %s: %w", c.Name, err)
	}
	data := map[string][]byte{corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: ca.KeyPEM, caKey: ca.CertPEM}
	if _, err := h.writeSecret(ctx, c, guard, name, sec, data); err != nil {
		return nil, "", err
	}
	return ca, name, nil
}

// writeSecret creates the kubernetes.io/tls Secret name with data, or
// replaces the data of existing (an update: a concurrent change fails it
// and the pass is retried), and returns it as written.
func (h *ClusterHooks) writeSecret(ctx context.Context, c *v1alpha1.EtcdCluster, guard *corev1.ConfigMap, name string, existing *corev1.Secret, data map[string][]byte) (*corev1.Secret, error) {
	if existing != nil {
		existing.Data = data
		if err := h.Client.Update(ctx, heldBy(existing, guard)); err != nil {
			return nil, fmt.Errorf("renewing Secret %s: %w", name, err)
		}
		return existing, nil
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: selectorLabels(c)},
		Type:       corev1.SecretTypeTLS,
		Data:       data,
	}
	if err := controllerutil.SetControllerReference(c, sec, h.Client.Scheme()); err != nil {
		return nil, err
	}
	if err := h.Client.Create(ctx, heldBy(sec, guard)); err != nil {
		return nil, fmt.Errorf("creating Secret %s: %w", name, err)
	}
	return sec, nil
}

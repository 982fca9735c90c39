package webhook

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"fmt"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// inject writes the Secret's CA into each caBundle of c's targets that
// does not trust the mounted certificate, if that CA does. Every replica
// does, for its own targets: the rotator's one writer may be an older pod
// that does not name a target this one does (a rolling upgrade adding a
// webhook), and would go only once this one is ready. It writes what the
// rotator writes, so the two never fight; a certificate the Secret's CA
// does not sign (a CA rotation under way) is left to the rotator.
func (c *trusted) inject(ctx context.Context) error {
	leaf, err := c.leaf()
	if err != nil {
		return err
	}
	var s corev1.Secret
	if err := c.reader.Get(ctx, c.secret, &s); err != nil {
		return fmt.Errorf("reading Secret %s: %w", c.secret, err)
	}
	ca := s.Data["ca.crt"]
	if !trusts(ca, leaf, c.dnsName) {
		return nil
	}
	for _, t := range c.targets {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(targetKinds[t.Type])
		if err := c.reader.Get(ctx, client.ObjectKey{Name: t.Name}, obj); err != nil {
			return client.IgnoreNotFound(err)
		}
		if changed, err := setCABundles(obj, t.Type, ca, leaf, c.dnsName); err != nil || !changed {
			if err != nil {
				return err
			}
			continue
		}
		if err := c.writer.Update(ctx, obj); err != nil {
			return fmt.Errorf("writing the CA into %s %s: %w", obj.GetKind(), t.Name, err)
		}
	}
	return nil
}

// setCABundles sets each caBundle of obj that does not trust leaf to ca,
// and reports whether it changed any.
func setCABundles(obj *unstructured.Unstructured, typ rotator.WebhookType, ca []byte, leaf *x509.Certificate, dnsName string) (bool, error) {
	encoded := base64.StdEncoding.EncodeToString(ca)
	stale := func(s string) bool {
		b, err := base64.StdEncoding.DecodeString(s)
		return err != nil || !trusts(b, leaf, dnsName)
	}
	if typ == rotator.CRDConversion {
		if s, _, _ := unstructured.NestedString(obj.Object, "spec", "conversion", "strategy"); s != "Webhook" {
			return false, nil
		}
		path := []string{"spec", "conversion", "webhook", "clientConfig", "caBundle"}
		if s, _, _ := unstructured.NestedString(obj.Object, path...); !stale(s) {
			return false, nil
		}
		return true, unstructured.SetNestedField(obj.Object, encoded, path...)
	}
	hooks, _, _ := unstructured.NestedSlice(obj.Object, "webhooks")
	changed := false
	for _, h := range hooks {
		m, ok := h.(map[string]any)
		if !ok {
			continue
		}
		if s, _, _ := unstructured.NestedString(m, "clientConfig", "caBundle"); stale(s) {
			if err := unstructured.SetNestedField(m, encoded, "clientConfig", "caBundle"); err != nil {
				return false, err
			}
			changed = true
		}
	}
	if !changed {
		return false, nil
	}
	return true, unstructured.SetNestedSlice(obj.Object, hooks, "webhooks")
}

// trusts reports whether the PEM CA ca signs leaf for dnsName.
func trusts(ca []byte, leaf *x509.Certificate, dnsName string) bool {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return false
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: dnsName})
	return err == nil
}

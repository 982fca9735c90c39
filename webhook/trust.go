package webhook

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// trusted is ready once the server has started and the certificate in
// certFile verifies for dnsName against every caBundle of targets: once
// the API server trusts what this replica serves. It decides for itself
// rather than wait on cert-controller's IsReady, which only the leader's
// rotator closes, after backing off up to minutes behind the kubelet.
//
// It stays ready after its first success: a CA rotation would otherwise
// take every replica out of the Service at once.
type trusted struct {
	reader   client.Reader // uncached: an informer per replica for a probe is waste
	writer   client.Writer
	secret   types.NamespacedName
	certFile string
	dnsName  string
	targets  []rotator.WebhookInfo
	started  healthz.Checker
	ready    atomic.Bool
}

func (c *trusted) check(req *http.Request) error {
	if c.ready.Load() {
		return nil
	}
	ctx := context.Background()
	if req != nil {
		ctx = req.Context()
	}
	if err := c.verify(ctx); err != nil {
		if ierr := c.inject(ctx); ierr != nil {
			return fmt.Errorf("%w (%w)", err, ierr)
		}
		if err := c.verify(ctx); err != nil {
			return err
		}
	}
	if err := c.started(req); err != nil {
		return err
	}
	c.ready.Store(true)
	return nil
}

// leaf is the mounted serving certificate.
func (c *trusted) leaf() (*x509.Certificate, error) {
	data, err := os.ReadFile(c.certFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCertificatesNotReady, err)
	}
	leaf, err := parseLeaf(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCertificatesNotReady, c.certFile, err)
	}
	return leaf, nil
}

func (c *trusted) verify(ctx context.Context) error {
	leaf, err := c.leaf()
	if err != nil {
		return err
	}
	for _, t := range c.targets {
		bundles, err := c.caBundles(ctx, t)
		if err != nil {
			return fmt.Errorf("%w: reading %s %s: %w", ErrCertificatesNotReady, targetKinds[t.Type].Kind, t.Name, err)
		}
		for _, b := range bundles {
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(b) {
				return fmt.Errorf("%w: %s %s has no CA in its caBundle", ErrCertificatesNotReady, targetKinds[t.Type].Kind, t.Name)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: c.dnsName}); err != nil {
				return fmt.Errorf("%w: the caBundle of %s %s does not trust %s: %w", ErrCertificatesNotReady, targetKinds[t.Type].Kind, t.Name, c.certFile, err)
			}
		}
	}
	return nil
}

// caBundles are the decoded caBundles of t; none for a CRD that converts
// without a webhook. An absent t is an error: the rotator skips it, so a
// misnamed configuration would get no CA while this replica said ready.
func (c *trusted) caBundles(ctx context.Context, t rotator.WebhookInfo) ([][]byte, error) {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(targetKinds[t.Type])
	if err := c.reader.Get(ctx, client.ObjectKey{Name: t.Name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: name one the installer made in Certificates", err)
		}
		return nil, err
	}
	var encoded []string
	if t.Type == rotator.CRDConversion {
		// Another strategy (None) calls no webhook: nothing to trust.
		if s, _, _ := unstructured.NestedString(obj.Object, "spec", "conversion", "strategy"); s != "Webhook" {
			return nil, nil
		}
		s, _, _ := unstructured.NestedString(obj.Object, "spec", "conversion", "webhook", "clientConfig", "caBundle")
		encoded = append(encoded, s)
	} else {
		hooks, _, _ := unstructured.NestedSlice(obj.Object, "webhooks")
		for _, h := range hooks {
			m, _ := h.(map[string]any)
			s, _, _ := unstructured.NestedString(m, "clientConfig", "caBundle")
			encoded = append(encoded, s)
		}
	}
	out := make([][]byte, 0, len(encoded))
	for _, s := range encoded {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("caBundle: %w", err)
		}
		out = append(out, b)
	}
	return out, nil
}

var targetKinds = map[rotator.WebhookType]schema.GroupVersionKind{
	rotator.Validating:    {Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingWebhookConfiguration"},
	rotator.Mutating:      {Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingWebhookConfiguration"},
	rotator.CRDConversion: {Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
}

func parseLeaf(data []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

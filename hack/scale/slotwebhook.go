package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"

	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/shard"
)

// slotWebhook is the shards' labelling webhook (-slot-webhook): r0
// serves it on port with the certificate in dir, which the
// configuration trusts.
type slotWebhook struct {
	port int
	dir  string
	ca   []byte
}

// newSlotWebhook writes a self-signed certificate for 127.0.0.1 into
// tmp/webhook-certs.
func newSlotWebhook(tmp string) (*slotWebhook, error) {
	port, err := testkit.FreePort()
	if err != nil {
		return nil, err
	}
	crt, key, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", nil, nil)
	if err != nil {
		return nil, err
	}
	w := &slotWebhook{port: port, dir: filepath.Join(tmp, "webhook-certs"), ca: crt}
	if err := os.MkdirAll(w.dir, 0o700); err != nil {
		return nil, err
	}
	for name, b := range map[string][]byte{"tls.crt": crt, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(w.dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// args serve the webhooks, r0's; the other replicas serve none.
func (w *slotWebhook) args() []string {
	return []string{"--webhook-port", strconv.Itoa(w.port), "--webhook-cert-dir", w.dir}
}

// install points the API server at r0's webhook as the memcached
// chart's configuration does at the Service.
func (w *slotWebhook) install(ctx context.Context, e *env) error {
	ring := shard.Ring{Name: "memcached"}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "memcached-shard-webhook-configuration"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "slot.shard.opkit.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				URL:      ptr.To(fmt.Sprintf("https://127.0.0.1:%d%s", w.port, ring.WebhookPath())),
				CABundle: w.ca,
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"cache.opkit.dev"}, APIVersions: []string{"*"}, Resources: []string{"memcacheds"}},
			}},
			ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: ring.SlotLabel(), Operator: metav1.LabelSelectorOpDoesNotExist},
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To(int32(5)),
		}},
	}
	if err := e.client.Create(ctx, cfg); err != nil {
		return fmt.Errorf("creating the shard webhook's configuration: %w", err)
	}
	return nil
}

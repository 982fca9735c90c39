package shard_test

import (
	stdcmp "cmp"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/shard"
)

func TestWebhookWritesTheSlot(t *testing.T) {
	r := shard.Ring{Name: "widgets", Slots: 12, Namespaces: []string{"a", "b"}}
	slot := strconv.Itoa(r.Slot(types.NamespacedName{Namespace: "a", Name: "w"}))
	tests := []struct {
		name   string
		op     admissionv1.Operation
		reqNS  string
		meta   metav1.ObjectMeta
		labels map[string]string // after the patch
	}{
		{name: "no labels", meta: metav1.ObjectMeta{Namespace: "a", Name: "w"},
			labels: map[string]string{r.SlotLabel(): slot}},
		{name: "other labels", meta: metav1.ObjectMeta{Namespace: "a", Name: "w", Labels: map[string]string{"app": "x"}},
			labels: map[string]string{"app": "x", r.SlotLabel(): slot}},
		{name: "its slot", meta: metav1.ObjectMeta{Namespace: "a", Name: "w", Labels: map[string]string{r.SlotLabel(): "3"}},
			labels: map[string]string{r.SlotLabel(): "3"}},
		{name: "no slot", meta: metav1.ObjectMeta{Namespace: "a", Name: "w", Labels: map[string]string{r.SlotLabel(): "12"}},
			labels: map[string]string{r.SlotLabel(): slot}},
		{name: "not a number", meta: metav1.ObjectMeta{Namespace: "a", Name: "w", Labels: map[string]string{r.SlotLabel(): "x"}},
			labels: map[string]string{r.SlotLabel(): slot}},
		{name: "namespace of the request", reqNS: "a", meta: metav1.ObjectMeta{Name: "w"},
			labels: map[string]string{r.SlotLabel(): slot}},
		{name: "generateName", meta: metav1.ObjectMeta{Namespace: "a", GenerateName: "w-"}},
		{name: "namespace not the ring's", meta: metav1.ObjectMeta{Namespace: "c", Name: "w"}},
		{name: "update", op: admissionv1.Update, meta: metav1.ObjectMeta{Namespace: "a", Name: "w"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := json.Marshal(&testv1.Widget{ObjectMeta: tt.meta})
			testkit.Must(t, err)
			req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				Operation: stdcmp.Or(tt.op, admissionv1.Create), Namespace: stdcmp.Or(tt.reqNS, tt.meta.Namespace),
				Object: runtime.RawExtension{Raw: raw},
			}}
			resp := r.Webhook().Handle(t.Context(), req)
			if !resp.Allowed {
				t.Fatalf("denied: %v", resp.Result)
			}
			ops, err := json.Marshal(resp.Patches)
			testkit.Must(t, err)
			patch, err := jsonpatch.DecodePatch(ops)
			testkit.Must(t, err)
			patched, err := patch.Apply(raw)
			testkit.Must(t, err)
			var got testv1.Widget
			testkit.Must(t, json.Unmarshal(patched, &got))
			want := tt.meta.Labels
			if tt.labels != nil {
				want = tt.labels
			}
			if diff := cmp.Diff(want, got.Labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWebhookLabelsAtCreation has the API server call the webhook as
// SetupWebhookWithManager's godoc configures it: a Widget is stored
// with its slot, one already labelled is not sent, and one created
// while the webhook is down is stored without it.
func TestWebhookLabelsAtCreation(t *testing.T) {
	ns := env.Namespace(t)
	r := shard.Ring{Name: "admitted", Namespace: ns, Namespaces: []string{ns}}
	srv, calls, w := serveSlotWebhook(t, r, ns)
	if w.Labels == nil {
		t.Fatal("no Widget was labelled at creation in 10 s")
	}
	want := map[string]string{r.SlotLabel(): strconv.Itoa(r.Slot(client.ObjectKeyFromObject(w)))}
	if diff := cmp.Diff(want, w.Labels); diff != "" {
		t.Fatalf("labels at creation (-want +got):\n%s", diff)
	}

	n := calls.Load()
	labelled := map[string]string{r.SlotLabel(): "5"}
	if diff := cmp.Diff(labelled, createWidget(t, ns, "labelled", labelled).Labels); diff != "" {
		t.Errorf("labels of a labelled Widget (-want +got):\n%s", diff)
	}
	if got := calls.Load(); got != n {
		t.Errorf("the webhook was called %d times for a labelled Widget, want 0", got-n)
	}

	srv.Close()
	if got := createWidget(t, ns, "down", nil).Labels; got != nil {
		t.Errorf("created while the webhook was down: labels %v, want none (the Sharder's to write)", got)
	}
}

// BenchmarkCreateThroughTheWebhook times a Widget's create, one at a
// time, with and without the API server calling r's webhook over TLS
// on loopback.
func BenchmarkCreateThroughTheWebhook(b *testing.B) {
	for _, hooked := range []bool{false, true} {
		b.Run(map[bool]string{false: "without", true: "with"}[hooked], func(b *testing.B) {
			ns := env.Namespace(b)
			if hooked {
				r := shard.Ring{Name: "bench", Namespace: ns, Namespaces: []string{ns}}
				if _, _, w := serveSlotWebhook(b, r, ns); w.Labels == nil {
					b.Fatal("no Widget was labelled at creation in 10 s")
				}
			}
			for i := 0; b.Loop(); i++ {
				createWidget(b, ns, fmt.Sprintf("b-%d", i), nil)
			}
		})
	}
}

func createWidget(t testing.TB, ns, name string, labels map[string]string) *testv1.Widget {
	t.Helper()
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}}
	testkit.Must(t, env.Client.Create(t.Context(), w))
	return w
}

// serveSlotWebhook serves r's webhook over TLS and configures the API
// server to call it for Widgets of ns, as SetupWebhookWithManager's
// godoc says. It returns once a Widget it creates is labelled, or
// after 10 s, with that Widget: the API server reads configurations
// from an informer.
func serveSlotWebhook(t testing.TB, r shard.Ring, ns string) (*httptest.Server, *atomic.Int32, *testv1.Widget) {
	t.Helper()
	calls := new(atomic.Int32)
	hook := r.Webhook()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		calls.Add(1)
		hook.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "slot-" + ns},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "slot.shard.opkit.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				URL:      ptr.To(srv.URL + r.WebhookPath()),
				CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}),
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{testv1.GroupVersion.Group},
					APIVersions: []string{testv1.GroupVersion.Version}, Resources: []string{"widgets"}},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: r.SlotLabel(), Operator: metav1.LabelSelectorOpDoesNotExist},
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To(int32(5)),
		}},
	}
	testkit.Must(t, env.Client.Create(t.Context(), cfg))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cfg) })
	var w *testv1.Widget
	for i, end := 0, time.Now().Add(10*time.Second); ; i++ {
		if w = createWidget(t, ns, fmt.Sprintf("probe-%d", i), nil); w.Labels != nil || time.Now().After(end) {
			return srv, calls, w
		}
		time.Sleep(100 * time.Millisecond)
	}
}

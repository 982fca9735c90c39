package charts

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestChartWebhook: the memcached chart's webhook values. Under another
// release name every name the manager is given is the release's object;
// webhook.enable false drops the webhook and everything it needs, and
// with the conversion webhook v1alpha1, which it would convert;
// failurePolicy and extra volumes reach the objects.
func TestChartWebhook(t *testing.T) {
	const ns, release = "ops", "mc"
	const fullname = "mc-memcached-operator"
	tests := []struct {
		name   string
		values map[string]any
		check  func(t *testing.T, objs map[string]*unstructured.Unstructured)
	}{{
		name: "another release: the flags name its objects",
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			secret := mustGet(t, objs, "Secret/"+ns+"/"+fullname+"-webhook-server-cert")
			svc := mustGet(t, objs, "Service/"+ns+"/"+fullname+"-webhook-service")
			cfg := mustGet(t, objs, "ValidatingWebhookConfiguration//"+fullname+"-validating-webhook-configuration")
			mustGet(t, objs, "RoleBinding/"+ns+"/"+fullname+"-webhook-cert-rolebinding")
			crd := mustGet(t, objs, "CustomResourceDefinition//memcacheds.cache.opkit.dev")
			if conv, _, _ := unstructured.NestedStringMap(crd.Object, "spec", "conversion", "webhook", "clientConfig", "service"); conv["name"] != svc.GetName() || conv["namespace"] != ns {
				t.Errorf("the CRD converts through %s/%s, not the Service %s/%s", conv["namespace"], conv["name"], ns, svc.GetName())
			}
			if diff := cmp.Diff(map[string]bool{"v1alpha1": true, "v1beta1": true}, served(t, crd)); diff != "" {
				t.Errorf("versions served (-want +got):\n%s", diff)
			}
			want := []string{
				"--webhook-port=9443",
				"--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs",
				"--webhook-cert-secret=" + secret.GetName(),
				"--webhook-service=" + svc.GetName(),
				"--validating-webhook-configuration=" + cfg.GetName(),
			}
			var got []string
			for _, a := range managerArgs(t, objs) {
				if strings.HasPrefix(a, "--webhook-") || strings.HasPrefix(a, "--validating-webhook-") {
					got = append(got, a)
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("webhook flags (-want +got):\n%s", diff)
			}
			hooks, _, _ := unstructured.NestedSlice(cfg.Object, "webhooks")
			ref, _, _ := unstructured.NestedStringMap(hooks[0].(map[string]any), "clientConfig", "service")
			if ref["name"] != svc.GetName() || ref["namespace"] != ns {
				t.Errorf("the configuration calls %s/%s, not the Service %s/%s", ref["namespace"], ref["name"], ns, svc.GetName())
			}
			if p := hooks[0].(map[string]any)["failurePolicy"]; p != "Fail" {
				t.Errorf("failurePolicy %v by default, want Fail", p)
			}
		},
	}, {
		name:   "certManager.enable: cert-manager issues the certificate the pods mount and injects its CA",
		values: map[string]any{"certManager": map[string]any{"enable": true}},
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			const secret = fullname + "-webhook-server-cert"
			noneNamed(t, objs, "webhook-cert-role")
			if _, ok := objs["Secret/"+ns+"/"+secret]; ok {
				t.Errorf("the chart makes the Secret %s that cert-manager should", secret)
			}
			mustGet(t, objs, "Issuer/"+ns+"/"+fullname+"-selfsigned-issuer")
			cert := mustGet(t, objs, "Certificate/"+ns+"/"+fullname+"-serving-cert")
			if got, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName"); got != secret {
				t.Errorf("the Certificate's secretName = %q, want %q", got, secret)
			}
			wantNames := []any{fullname + "-webhook-service." + ns + ".svc", fullname + "-webhook-service." + ns + ".svc.cluster.local"}
			if got, _, _ := unstructured.NestedSlice(cert.Object, "spec", "dnsNames"); !cmp.Equal(wantNames, got) {
				t.Errorf("the Certificate's dnsNames = %v, want %v", got, wantNames)
			}
			for _, k := range []string{"ValidatingWebhookConfiguration//" + fullname + "-validating-webhook-configuration", "CustomResourceDefinition//memcacheds.cache.opkit.dev"} {
				if got := mustGet(t, objs, k).GetAnnotations()["cert-manager.io/inject-ca-from"]; got != ns+"/"+fullname+"-serving-cert" {
					t.Errorf("%s: cert-manager.io/inject-ca-from = %q, want %s/%s-serving-cert", k, got, ns, fullname)
				}
			}
			var got []string
			for _, a := range managerArgs(t, objs) {
				if strings.Contains(a, "webhook") {
					got = append(got, a)
				}
			}
			if diff := cmp.Diff([]string{"--webhook-port=9443", "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs"}, got); diff != "" {
				t.Errorf("webhook flags (-want +got):\n%s", diff)
			}
			vols, _, _ := unstructured.NestedSlice(mustGet(t, objs, "Deployment/"+ns+"/"+fullname+"-controller-manager").Object, "spec", "template", "spec", "volumes")
			if !slices.ContainsFunc(vols, func(v any) bool {
				name, _, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName")
				return name == secret
			}) {
				t.Errorf("no volume mounts the Secret %s: %v", secret, vols)
			}
		},
	}, {
		name:   "webhook.enable false: no webhook, Service, Secret, flags or volume",
		values: map[string]any{"webhook": map[string]any{"enable": false}},
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			noneNamed(t, objs, "webhook")
			crd := mustGet(t, objs, "CustomResourceDefinition//memcacheds.cache.opkit.dev")
			if conv, ok, _ := unstructured.NestedMap(crd.Object, "spec", "conversion"); ok {
				t.Errorf("the CRD converts through %v", conv)
			}
			if diff := cmp.Diff(map[string]bool{"v1alpha1": false, "v1beta1": true}, served(t, crd)); diff != "" {
				t.Errorf("versions served (-want +got):\n%s", diff)
			}
			if args := managerArgs(t, objs); slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, "webhook") }) {
				t.Errorf("args %v still serve the webhook", args)
			}
			if m := manager(t, objs); m["volumeMounts"] != nil {
				t.Errorf("volumeMounts %v", m["volumeMounts"])
			}
		},
	}, {
		name:   "webhook.failurePolicy Ignore",
		values: map[string]any{"webhook": map[string]any{"failurePolicy": "Ignore"}},
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			cfg := mustGet(t, objs, "ValidatingWebhookConfiguration//"+fullname+"-validating-webhook-configuration")
			hooks, _, _ := unstructured.NestedSlice(cfg.Object, "webhooks")
			if p := hooks[0].(map[string]any)["failurePolicy"]; p != "Ignore" {
				t.Errorf("failurePolicy %v, want Ignore", p)
			}
		},
	}, {
		name: "extra volumes beside the certificate's",
		values: map[string]any{"manager": map[string]any{
			"extraVolumes":      []any{map[string]any{"name": "cache", "emptyDir": map[string]any{}}},
			"extraVolumeMounts": []any{map[string]any{"name": "cache", "mountPath": "/cache"}},
		}},
		check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
			var mounts []string
			for _, m := range manager(t, objs)["volumeMounts"].([]any) {
				mounts = append(mounts, m.(map[string]any)["name"].(string))
			}
			if diff := cmp.Diff([]string{"cache", "webhook-cert"}, mounts); diff != "" {
				t.Errorf("volumeMounts (-want +got):\n%s", diff)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, byKey(render(t, "memcached", release, ns, tt.values)))
		})
	}
}

// served maps each version of crd to whether it is served.
func served(t *testing.T, crd *unstructured.Unstructured) map[string]bool {
	t.Helper()
	versions, _, err := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, v := range versions {
		m := v.(map[string]any)
		out[m["name"].(string)], _ = m["served"].(bool)
	}
	return out
}

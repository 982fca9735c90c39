package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const crd = `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  annotations:
    controller-gen.kubebuilder.io/version: v0.23.0
  name: things.example.com
spec:
  group: example.com
`

func TestCRDTemplate(t *testing.T) {
	got, name, err := crdTemplate([]byte(crd))
	if err != nil {
		t.Fatal(err)
	}
	want := `{{- if .Values.crd.enable }}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  annotations:
    {{- if .Values.crd.keep }}
    helm.sh/resource-policy: keep
    {{- end }}
    controller-gen.kubebuilder.io/version: v0.23.0
  name: things.example.com
spec:
  group: example.com
{{- end }}
`
	if diff := cmp.Diff(want, string(got)); diff != "" || name != "things.example.com" {
		t.Errorf("crdTemplate: name %q (-want +got):\n%s", name, diff)
	}
	for _, tt := range []struct{ name, in, wantErr string }{
		{"no annotations", strings.Replace(crd, "  annotations:\n    controller-gen.kubebuilder.io/version: v0.23.0\n", "", 1), `no "metadata:" line`},
		{"not a CRD", strings.Replace(crd, "kind: CustomResourceDefinition", "kind: ConfigMap", 1), "not a CustomResourceDefinition"},
		{"unknown field", crd + "bogus: 1\n", "unknown field"},
	} {
		if _, _, err := crdTemplate([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: crdTemplate error %v, want one containing %q", tt.name, err, tt.wantErr)
		}
	}
}

func TestRulesTemplate(t *testing.T) {
	role := "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: manager-role\nrules:\n- apiGroups: [\"\"]\n  resources: [pods]\n  verbs: [get, list]\n"
	got, err := rulesTemplate([]byte(role))
	if err != nil {
		t.Fatal(err)
	}
	want := `{{/* The rules of config/rbac/role.yaml (controller-gen), written by make chart. */}}
{{- define "chart.managerRules" }}
- apiGroups:
  - ""
  resources:
  - pods
  verbs:
  - get
  - list
{{- end }}
`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("rulesTemplate (-want +got):\n%s", diff)
	}
	if _, err := rulesTemplate([]byte("apiVersion: v1\nkind: ClusterRole\nmetadata:\n  name: x\n")); err == nil {
		t.Error("rulesTemplate of a ClusterRole without rules succeeded")
	}
}

func TestGuardTemplate(t *testing.T) {
	policy := `# a comment
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: op-guard
spec:
  failurePolicy: Fail
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: op-guard
spec:
  policyName: op-guard
`
	got, err := guardTemplate([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	want := `# config/guard/policy.yaml, written by make chart.
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ include "chart.fullname" . }}-guard
spec:
  failurePolicy: Fail
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ include "chart.fullname" . }}-guard
spec:
  policyName: {{ include "chart.fullname" . }}-guard
`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("guardTemplate (-want +got):\n%s", diff)
	}
	for _, tt := range []struct{ name, in, wantErr string }{
		{"a name not ending in -guard", strings.ReplaceAll(policy, "op-guard", "op"), "want a name ending in -guard"},
		{"another kind", strings.Replace(policy, "kind: ValidatingAdmissionPolicyBinding", "kind: ConfigMap", 1), "kind ConfigMap"},
		{"a binding without policyName", strings.Replace(policy, "  policyName: op-guard\n", "  x: 1\n", 1), "no spec.policyName"},
	} {
		if _, err := guardTemplate([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: guardTemplate error %v, want one containing %q", tt.name, err, tt.wantErr)
		}
	}
}

func TestWebhookTemplate(t *testing.T) {
	hooks := `---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- clientConfig:
    service:
      name: webhook-service
      namespace: system
      path: /validate-example-com-v1-thing
  failurePolicy: Fail
  name: vthing.example.com
`
	got, err := webhookTemplate([]byte(hooks), "")
	if err != nil {
		t.Fatal(err)
	}
	want := `# config/webhook/manifests.yaml (controller-gen), written by make chart.
{{- if include "chart.webhook" . }}
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  {{- if include "chart.certManager" . }}
  annotations:
    cert-manager.io/inject-ca-from: {{ include "chart.certManagerCA" . }}
  {{- end }}
  labels:
    {{- include "chart.labels" . | nindent 4 }}
  name: {{ include "chart.fullname" . }}-validating-webhook-configuration
webhooks:
- clientConfig:
    service:
      name: {{ include "chart.fullname" . }}-webhook-service
      namespace: {{ include "chart.namespace" . }}
      path: /validate-example-com-v1-thing
  failurePolicy: {{ .Values.webhook.failurePolicy }}
  name: vthing.example.com
{{- end }}
`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("webhookTemplate (-want +got):\n%s", diff)
	}
	// The matchConditions config/webhook's kustomize patch adds.
	patch := filepath.Join(t.TempDir(), "match_conditions.yaml")
	if err := os.WriteFile(patch, []byte("- op: add\n  path: /webhooks/0/matchConditions\n  value:\n  - name: not-being-deleted\n    expression: \"!has(object.metadata.deletionTimestamp)\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err = webhookTemplate([]byte(hooks), patch)
	if err != nil {
		t.Fatal(err)
	}
	withConds := strings.Replace(want, "  failurePolicy: {{ .Values.webhook.failurePolicy }}\n",
		"  failurePolicy: {{ .Values.webhook.failurePolicy }}\n  matchConditions:\n  - expression: '!has(object.metadata.deletionTimestamp)'\n    name: not-being-deleted\n", 1)
	if diff := cmp.Diff(withConds, string(got)); diff != "" {
		t.Errorf("webhookTemplate with match conditions (-want +got):\n%s", diff)
	}
	if err := os.WriteFile(patch, []byte("- op: replace\n  path: /webhooks/0/failurePolicy\n  value: Ignore\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := webhookTemplate([]byte(hooks), patch); err == nil || !strings.Contains(err.Error(), "want only add /webhooks/<n>/matchConditions") {
		t.Errorf("webhookTemplate with another patch: %v, want it refused", err)
	}
	for _, tt := range []struct{ name, in, wantErr string }{
		{"another kind", strings.Replace(hooks, "kind: ValidatingWebhookConfiguration", "kind: ConfigMap", 1), "kind ConfigMap"},
		{"a URL, not a Service", strings.Replace(hooks, "    service:\n      name: webhook-service\n      namespace: system\n      path: /validate-example-com-v1-thing\n", "    url: https://example.com\n", 1), "no clientConfig.service"},
	} {
		if _, err := webhookTemplate([]byte(tt.in), ""); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: webhookTemplate error %v, want one containing %q", tt.name, err, tt.wantErr)
		}
	}
}

// TestGenerateLeavesNothingHalfWritten: a config/ that cannot be made a
// chart leaves the old templates as they were.
func TestGenerateLeavesNothingHalfWritten(t *testing.T) {
	ex, shared := t.TempDir(), t.TempDir()
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(ex, "dist", "chart", "templates")
	write(filepath.Join(out, "old.yaml"), "old")
	write(filepath.Join(shared, "NOTES.txt"), "notes")
	write(filepath.Join(ex, "config", "crd", "bases", "example.com_things.yaml"), crd)
	write(filepath.Join(ex, "config", "rbac", "role.yaml"), "kind: ClusterRole\nmetadata:\n  name: x\n")
	if err := Generate(ex, shared, out); err == nil || !strings.Contains(err.Error(), "role.yaml") {
		t.Fatalf("Generate with a role without rules: %v, want an error naming role.yaml", err)
	}
	if b, err := os.ReadFile(filepath.Join(out, "old.yaml")); err != nil || string(b) != "old" {
		t.Errorf("a failed Generate changed the old templates: %q, %v", b, err)
	}
	write(filepath.Join(ex, "config", "rbac", "role.yaml"), "kind: ClusterRole\nmetadata:\n  name: x\nrules:\n- apiGroups: [\"\"]\n  resources: [pods]\n  verbs: [get]\n")
	if err := Generate(ex, shared, out); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := filepath.WalkDir(out, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(out, path)
			got = append(got, rel)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"NOTES.txt", "_crds.tpl", "crd/example.com_things.yaml", "rbac/_manager_rules.tpl"}, got); diff != "" {
		t.Errorf("templates written (-want +got):\n%s", diff)
	}
}

func TestConversionTemplate(t *testing.T) {
	tpl, _, err := crdTemplate([]byte(crd))
	if err != nil {
		t.Fatal(err)
	}
	patch := func(t *testing.T, body string) string {
		t.Helper()
		dir := t.TempDir()
		if body != "" {
			p := filepath.Join(dir, "config", "default", "webhook_in_things.yaml")
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	const conversion = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things.example.com\n" +
		"spec:\n  conversion:\n    strategy: Webhook\n    webhook:\n      clientConfig:\n        service:\n          namespace: system\n          name: webhook-service\n          path: /convert\n      conversionReviewVersions:\n      - v1\n"
	tpl = append(tpl[:len(tpl)-len("{{- end }}\n")], []byte("  versions:\n  - name: v1\n    served: true\n  - name: v2\n    served: false\n{{- end }}\n")...)
	got, err := conversionTemplate(tpl, patch(t, ""), "things.example.com")
	if err != nil || string(got) != string(tpl) {
		t.Errorf("without a patch: %v, changed %t", err, string(got) != string(tpl))
	}
	got, err = conversionTemplate(tpl, patch(t, conversion), "things.example.com")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"spec:\n  {{- if include \"chart.webhook\" . }}\n  conversion:\n    strategy: Webhook\n",
		"          name: {{ include \"chart.fullname\" . }}-webhook-service\n          namespace: {{ include \"chart.namespace\" . }}\n          path: /convert\n",
		"      conversionReviewVersions:\n      - v1\n  {{- end }}\n  group: example.com\n",
		"  - name: v1\n    served: true\n  - name: v2\n    served: {{ if include \"chart.webhook\" . }}true{{ else }}false{{ end }}\n",
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("the template lacks %q:\n%s", want, got)
		}
	}
	noPath := strings.Replace(conversion, "          path: /convert\n", "", 1)
	if _, err := conversionTemplate(tpl, patch(t, noPath), "things.example.com"); err == nil || !strings.Contains(err.Error(), "with a path") {
		t.Errorf("a patch without a path: %v, want an error", err)
	}
}

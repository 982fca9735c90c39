package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// Generate replaces out with the shared templates and those made from the
// example's config/. Nothing is written when config/ is not as expected.
func Generate(example, shared, out string) error {
	files := map[string][]byte{}
	if err := filepath.WalkDir(shared, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(shared, path)
		if err != nil {
			return err
		}
		files[rel], err = os.ReadFile(path)
		return err
	}); err != nil {
		return err
	}
	crds, err := filepath.Glob(filepath.Join(example, "config", "crd", "bases", "*.yaml"))
	if err != nil {
		return err
	}
	if len(crds) == 0 {
		return fmt.Errorf("no CRDs in %s/config/crd/bases: run make manifests", example)
	}
	var names []string
	for _, path := range crds {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		tpl, name, err := crdTemplate(b)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if tpl, err = conversionTemplate(tpl, example, name); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		files[filepath.Join("crd", filepath.Base(path))] = tpl
		names = append(names, name)
	}
	files["_crds.tpl"] = crdNames(names)
	role := filepath.Join(example, "config", "rbac", "role.yaml")
	b, err := os.ReadFile(role)
	if err != nil {
		return err
	}
	if files[filepath.Join("rbac", "_manager_rules.tpl")], err = rulesTemplate(b); err != nil {
		return fmt.Errorf("%s: %w", role, err)
	}
	// Optional inputs: an example without them has no such templates.
	for _, in := range []struct {
		rel      string // under config/, and under the templates
		template func([]byte) ([]byte, error)
	}{
		{filepath.Join("guard", "policy.yaml"), guardTemplate},
		{filepath.Join("webhook", "manifests.yaml"), func(b []byte) ([]byte, error) {
			return webhookTemplate(b, filepath.Join(example, "config", "webhook", "match_conditions.yaml"))
		}},
	} {
		path := filepath.Join(example, "config", in.rel)
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		if files[in.rel], err = in.template(b); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	for rel, b := range files {
		path := filepath.Join(out, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// crdTemplate returns the CRD manifest b behind crd.enable, with the keep
// policy behind crd.keep, and the CRD's name. The lines are inserted into
// controller-gen's text, which stays as it is.
func crdTemplate(b []byte) ([]byte, string, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(b, &crd); err != nil {
		return nil, "", err
	}
	if crd.Kind != "CustomResourceDefinition" || crd.Name == "" {
		return nil, "", fmt.Errorf("not a CustomResourceDefinition with a name (kind %q)", crd.Kind)
	}
	lines := strings.SplitAfter(string(b), "\n")
	at := slices.Index(lines, "metadata:\n")
	if at < 0 || at+1 >= len(lines) || lines[at+1] != "  annotations:\n" {
		return nil, "", errors.New(`no "metadata:" line followed by "  annotations:" to add the keep policy to (controller-gen writes both)`)
	}
	keep := []string{
		"    {{- if .Values.crd.keep }}\n",
		"    helm.sh/resource-policy: keep\n",
		"    {{- end }}\n",
	}
	lines = slices.Insert(lines, at+2, keep...)
	return []byte("{{- if .Values.crd.enable }}\n" + strings.Join(lines, "") + "{{- end }}\n"), crd.Name, nil
}

// conversionTemplate adds to CRD template tpl the conversion webhook of
// config/default/webhook_in_<plural>.yaml, when the example has one,
// calling the release's webhook Service, and serves the CRD's unserved
// versions with it, as config/default does: a version is served only
// where the webhook can convert it.
func conversionTemplate(tpl []byte, example, name string) ([]byte, error) {
	plural, _, _ := strings.Cut(name, ".")
	patch := filepath.Join(example, "config", "default", "webhook_in_"+plural+".yaml")
	b, err := os.ReadFile(patch)
	if errors.Is(err, fs.ErrNotExist) {
		return tpl, nil
	} else if err != nil {
		return nil, err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(b, &crd); err != nil {
		return nil, fmt.Errorf("%s: %w", patch, err)
	}
	if c := crd.Spec.Conversion; c == nil || c.Webhook == nil || c.Webhook.ClientConfig == nil || c.Webhook.ClientConfig.Service == nil || c.Webhook.ClientConfig.Service.Path == nil {
		return nil, fmt.Errorf("%s: want spec.conversion.webhook.clientConfig.service with a path", patch)
	}
	w := crd.Spec.Conversion.Webhook
	stanza := "  {{- if include \"chart.webhook\" . }}\n" +
		"  conversion:\n" +
		"    strategy: Webhook\n" +
		"    webhook:\n" +
		"      clientConfig:\n" +
		"        service:\n" +
		"          name: {{ include \"chart.fullname\" . }}-webhook-service\n" +
		"          namespace: {{ include \"chart.namespace\" . }}\n" +
		"          path: " + *w.ClientConfig.Service.Path + "\n" +
		"      conversionReviewVersions:\n"
	for _, v := range w.ConversionReviewVersions {
		stanza += "      - " + v + "\n"
	}
	stanza += "  {{- end }}\n"
	lines := strings.SplitAfter(string(tpl), "\n")
	at := slices.Index(lines, "spec:\n")
	if at < 0 {
		return nil, errors.New(`no "spec:" line to add the conversion webhook under`)
	}
	lines = slices.Insert(lines, at+1, stanza)
	// crdTemplate checked that annotations follow metadata.
	at = slices.Index(lines, "  annotations:\n")
	lines = slices.Insert(lines, at+1, injectCA("    "))
	for i, l := range lines {
		if l == "    served: false\n" {
			lines[i] = "    served: {{ if include \"chart.webhook\" . }}true{{ else }}false{{ end }}\n"
		}
	}
	return []byte(strings.Join(lines, "")), nil
}

// crdNames defines chart.crds, the CRDs' names one per line.
func crdNames(names []string) []byte {
	slices.Sort(names)
	return []byte("{{/* The CRDs of config/crd/bases, written by make chart. */}}\n" +
		"{{- define \"chart.crds\" }}\n" + strings.Join(names, "\n") + "\n{{- end }}\n")
}

// rulesTemplate defines chart.managerRules, the rules of the ClusterRole
// b (config/rbac/role.yaml).
func rulesTemplate(b []byte) ([]byte, error) {
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(b, &role); err != nil {
		return nil, err
	}
	if role.Kind != "ClusterRole" || len(role.Rules) == 0 {
		return nil, fmt.Errorf("want a ClusterRole with rules, got kind %q with %d rules", role.Kind, len(role.Rules))
	}
	rules, err := yaml.Marshal(role.Rules)
	if err != nil {
		return nil, err
	}
	return []byte("{{/* The rules of config/rbac/role.yaml (controller-gen), written by make chart. */}}\n" +
		"{{- define \"chart.managerRules\" }}\n" + string(rules) + "{{- end }}\n"), nil
}

// guardName stands for the release's guard name while the policy is
// YAML; it cannot occur in a policy (a name cannot hold "_").
const guardName = "__chart_fullname__-guard"

// guardTemplate returns config/guard's ValidatingAdmissionPolicy and its
// binding (b) with their names, and the binding's policyName, made the
// release's: <fullname>-guard.
func guardTemplate(b []byte) ([]byte, error) {
	var docs [][]byte
	for doc := range strings.SplitSeq(string(b), "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, err
		}
		meta, _ := obj["metadata"].(map[string]any)
		if name, _ := meta["name"].(string); !strings.HasSuffix(name, "-guard") {
			return nil, fmt.Errorf("%v %q: want a name ending in -guard", obj["kind"], name)
		}
		meta["name"] = guardName
		switch obj["kind"] {
		case "ValidatingAdmissionPolicy":
		case "ValidatingAdmissionPolicyBinding":
			spec, _ := obj["spec"].(map[string]any)
			if _, ok := spec["policyName"].(string); !ok {
				return nil, errors.New("the binding has no spec.policyName")
			}
			spec["policyName"] = guardName
		default:
			return nil, fmt.Errorf("kind %v: want the guard's ValidatingAdmissionPolicy and its binding", obj["kind"])
		}
		out, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		docs = append(docs, out)
	}
	out := bytes.Join(docs, []byte("---\n"))
	out = bytes.ReplaceAll(out, []byte(guardName), []byte(`{{ include "chart.fullname" . }}-guard`))
	return append([]byte("# config/guard/policy.yaml, written by make chart.\n"), out...), nil
}

// matchConditions reads the JSON patch at path that the kustomization of
// config/webhook applies to every webhook configuration, and returns the
// matchConditions it adds, by webhook index.
func matchConditions(path string) (map[int]any, error) {
	b, err := os.ReadFile(path)
	if path == "" || errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var ops []struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	if err := yaml.UnmarshalStrict(b, &ops); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[int]any{}
	for _, op := range ops {
		var i int
		if _, err := fmt.Sscanf(op.Path, "/webhooks/%d/matchConditions", &i); err != nil || op.Op != "add" || op.Path != fmt.Sprintf("/webhooks/%d/matchConditions", i) {
			return nil, fmt.Errorf("%s: %s %s: want only add /webhooks/<n>/matchConditions", path, op.Op, op.Path)
		}
		out[i] = op.Value
	}
	return out, nil
}

// Placeholders for the release's values while the webhook configurations
// are YAML; none can occur in a configuration (names hold no "_").
const (
	fullnamePart    = "__chart_fullname__"
	namespacePart   = "__chart_namespace__"
	failurePart     = "__chart_failure_policy__"
	labelsPart      = "__chart_labels__"
	annotationsPart = "__chart_annotations__"
)

// webhookTemplate returns controller-gen's webhook configurations (b)
// behind chart.webhook, with the chart's labels, their names, their
// Service's name and namespace made the release's, failurePolicy
// webhook.failurePolicy, and the matchConditions the kustomize patch at
// conditions adds (none when there is no such file).
func webhookTemplate(b []byte, conditions string) ([]byte, error) {
	matches, err := matchConditions(conditions)
	if err != nil {
		return nil, err
	}
	var docs [][]byte
	for doc := range strings.SplitSeq(strings.TrimPrefix(string(b), "---\n"), "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, err
		}
		if k := obj["kind"]; k != "ValidatingWebhookConfiguration" && k != "MutatingWebhookConfiguration" {
			return nil, fmt.Errorf("kind %v: want webhook configurations", k)
		}
		meta, _ := obj["metadata"].(map[string]any)
		meta["name"] = fullnamePart + "-" + fmt.Sprint(meta["name"])
		meta["labels"] = labelsPart
		meta["annotations"] = annotationsPart
		hooks, _ := obj["webhooks"].([]any)
		for i, h := range hooks {
			h, _ := h.(map[string]any)
			if m, ok := matches[i]; ok {
				h["matchConditions"] = m
			}
			cc, _ := h["clientConfig"].(map[string]any)
			svc, ok := cc["service"].(map[string]any)
			if !ok {
				return nil, fmt.Errorf("webhook %v: no clientConfig.service", h["name"])
			}
			svc["name"] = fullnamePart + "-" + fmt.Sprint(svc["name"])
			svc["namespace"] = namespacePart
			h["failurePolicy"] = failurePart
		}
		out, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		docs = append(docs, out)
	}
	out := string(bytes.Join(docs, []byte("---\n")))
	out = strings.NewReplacer(
		"labels: "+labelsPart, "labels:\n    {{- include \"chart.labels\" . | nindent 4 }}",
		"  annotations: "+annotationsPart+"\n", "  {{- if include \"chart.certManager\" . }}\n  annotations:\n    cert-manager.io/inject-ca-from: {{ include \"chart.certManagerCA\" . }}\n  {{- end }}\n",
		fullnamePart, `{{ include "chart.fullname" . }}`,
		namespacePart, `{{ include "chart.namespace" . }}`,
		failurePart, `{{ .Values.webhook.failurePolicy }}`,
	).Replace(out)
	return []byte("# config/webhook/manifests.yaml (controller-gen), written by make chart.\n" +
		"{{- if include \"chart.webhook\" . }}\n" + out + "{{- end }}\n"), nil
}

// injectCA is the annotation, indented, by which cert-manager's CA injector
// writes the CA of the chart's Certificate into a CRD, when
// certManager.enable.
func injectCA(indent string) string {
	return indent + "{{- if include \"chart.certManager\" . }}\n" +
		indent + "cert-manager.io/inject-ca-from: {{ include \"chart.certManagerCA\" . }}\n" +
		indent + "{{- end }}\n"
}

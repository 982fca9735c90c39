package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRender renders a small CRD and checks the rows a reader relies on:
// nested paths, defaults, constraints, CEL rules and descriptions.
func TestRender(t *testing.T) {
	crd := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        description: Widget is a test kind.
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size:
                description: |-
                  Size is how many.
                  Never zero.
                type: integer
                format: int32
                minimum: 1
                maximum: 5
              policy:
                type: object
                x-kubernetes-validations:
                - rule: has(self.a) || has(self.b)
                  message: set a or b
                properties:
                  a: {type: string, default: x, description: "A | B."}
          status:
            type: object
            properties:
              ready: {type: boolean}
`
	f := filepath.Join(t.TempDir(), "crd.yaml")
	if err := os.WriteFile(f, []byte(crd), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := render("Widgets", []string{f})
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{
		"# Widgets",
		"## Widget (example.com/v1)",
		"| `spec.size` | integer (int32) |  | required; min 1; max 5 | Size is how many. Never zero. |",
		"| `spec.policy` | object |  | set a or b (`has(self.a) \\|\\| has(self.b)`) |  |",
		"| `spec.policy.a` | string | `\"x\"` |  | A \\| B. |",
		"| `status.ready` | boolean |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("reference lacks %q:\n%s", want, got)
		}
	}
}

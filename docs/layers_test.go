package docs_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCoreImportsNoAddOn: the lifecycle packages do not drag in the
// add-ons a user opts into: an operator that never shards builds without
// package shard and what it imports.
func TestCoreImportsNoAddOn(t *testing.T) {
	const mod = "github.com/opkit-dev/opkit/"
	for _, tc := range []struct {
		pkg    string
		addOns []string
	}{
		{"reconcile", []string{"shard"}},
		{"ownership", []string{"shard", "reconcile"}},
		{"statusutil", []string{"shard", "reconcile"}},
	} {
		cmd := exec.Command("go", "list", "-deps", mod+tc.pkg)
		cmd.Dir = ".."
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", tc.pkg, err)
		}
		deps := strings.Fields(string(out))
		for _, a := range tc.addOns {
			for _, d := range deps {
				if d == mod+a {
					t.Errorf("%s imports %s (go list -deps)", tc.pkg, a)
				}
			}
		}
	}
}

package docs_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestPackageMapsAreComplete: the README's package tables and
// development.md's layout name every library package (the root module's
// and the library's own modules', internal ones aside), so that a new
// package cannot be left off the map.
func TestPackageMapsAreComplete(t *testing.T) {
	var pkgs []string
	for _, dir := range []string{"..", "../backup/s3", "../statusutil/e2estatus", "../statusutil/kstatustest"} {
		cmd := exec.Command("go", "list", "./...")
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v", dir, err)
		}
		for _, p := range strings.Fields(string(out)) {
			rel := strings.TrimPrefix(strings.TrimPrefix(p, "github.com/opkit-dev/opkit"), "/")
			if rel == "" || strings.HasPrefix(rel, "internal/") || strings.Contains(rel, "/internal/") || strings.HasPrefix(rel, "docs") ||
				strings.HasPrefix(rel, "examples") || strings.HasPrefix(rel, "compat") {
				continue
			}
			pkgs = append(pkgs, rel)
		}
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	dev, err := os.ReadFile("development.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		if !strings.Contains(string(readme), "[`"+p+"`]") {
			t.Errorf("README.md's package tables lack %s", p)
		}
		if !strings.Contains(string(dev), " "+p+"/") {
			t.Errorf("development.md's layout lacks %s/", p)
		}
	}
	if len(pkgs) < 15 {
		t.Errorf("only %d library packages listed: %v", len(pkgs), pkgs)
	}
}

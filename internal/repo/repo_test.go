package repo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRootFindsTheModule(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "internal", "repo", "repo.go")); err != nil {
		t.Errorf("Root() = %s, which does not hold internal/repo: %v", root, err)
	}
}

func TestToolNamesTheMakeTarget(t *testing.T) {
	t.Setenv("OPKIT_BIN", t.TempDir())
	_, err := Tool("versitygw", "versitygw")
	if err == nil || !strings.Contains(err.Error(), "run `make versitygw`") {
		t.Fatalf("Tool in an empty bin: %v, want an error naming `make versitygw`", err)
	}
	if err := os.WriteFile(filepath.Join(os.Getenv("OPKIT_BIN"), "versitygw"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if p, err := Tool("versitygw", "versitygw"); err != nil || filepath.Base(p) != "versitygw" {
		t.Errorf("Tool with the binary present = %q, %v", p, err)
	}
}

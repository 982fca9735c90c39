// Package repo locates this checkout of opkit and the tools that
// `make tools` puts in its bin/ directory, and names the example operators
// users install ([Operators]), for tests, e2e suites and hack/ programs.
// Nothing in the library uses it.
package repo

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Module is the path in the go.mod that marks the repository root.
const Module = "github.com/opkit-dev/opkit"

// Root returns the directory holding opkit's go.mod, found by walking up
// from the working directory (go test runs in the package's directory).
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module "+Module+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("finding the repository root: no go.mod of " + Module + " above the working directory; set OPKIT_BIN for tools")
		}
		dir = parent
	}
}

// BinDir returns $OPKIT_BIN, or bin/ under Root.
func BinDir() (string, error) {
	if d := os.Getenv("OPKIT_BIN"); d != "" {
		return filepath.Abs(d)
	}
	root, err := Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// Tool returns the path of the tool name in BinDir, or an error naming
// `make TARGET`, the make target that builds it.
func Tool(name, target string) (string, error) {
	bin, err := BinDir()
	if err != nil {
		return "", fmt.Errorf("%s: %w: run `make %s`", name, err, target)
	}
	path := filepath.Join(bin, name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s not found (%w): run `make %s`", path, err, target)
	}
	return path, nil
}

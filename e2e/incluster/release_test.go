package incluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/internal/repo"
)

// releaseVersion is the version of the release the suites install: one
// the CHANGELOG never holds.
const releaseVersion = "v0.0.0-e2e"

var (
	releaseOnce sync.Once
	releaseDir  string
	releaseErr  error
)

// versioned returns the directory of a release of both operators
// (hack/release, as make release makes one) pinned to their images in the
// real nodes' registry: <operator>/install-VERSION.yaml and
// <operator>/<operator>-VERSION.tgz. It is made once per run.
func versioned(ctx context.Context, t *testing.T) string {
	t.Helper()
	releaseOnce.Do(func() { releaseDir, releaseErr = makeRelease(ctx) })
	if releaseErr != nil {
		t.Fatal(releaseErr)
	}
	return releaseDir
}

func makeRelease(ctx context.Context) (string, error) {
	root, err := repo.Root()
	if err != nil {
		return "", err
	}
	var digests strings.Builder
	for _, op := range repo.Operators {
		img, err := harness.PushedImage(ctx, "opkit.dev/"+op.Name+":dev")
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&digests, "%s %s\n", op.Name, img)
	}
	dir, err := os.MkdirTemp("", "opkit-e2e-release-")
	if err != nil {
		return "", err
	}
	file := filepath.Join(dir, "digests.txt")
	if err := os.WriteFile(file, []byte(digests.String()), 0o644); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "run", "./release", "-version", releaseVersion, "-digests", file, "-out", dir)
	cmd.Dir = filepath.Join(root, "hack")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("hack/release: %w\n%s", err, out)
	}
	return dir, nil
}

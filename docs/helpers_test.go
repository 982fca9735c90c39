package docs

import (
	"os"
	"path/filepath"
	"testing"
)

// repoTools returns the checkout's root and its controller-gen, which the
// guides use.
func repoTools(t *testing.T) (repo, controllerGen string) {
	t.Helper()
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	controllerGen = filepath.Join(repo, "bin", "controller-gen")
	if _, err := os.Stat(controllerGen); err != nil {
		t.Fatalf("the guides use controller-gen: run `make controller-gen` (%v)", err)
	}
	return repo, controllerGen
}

// copyGoSum gives the module in dir opkit's go.sum, which covers every
// module the guides' projects need.
func copyGoSum(t *testing.T, repo, dir string) {
	t.Helper()
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "go.sum"), string(sum))
}

// copyTree copies the regular files under src into dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		write(t, filepath.Join(dst, rel), string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// write writes content to path, making its directory.
func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// envtestAssets returns the directory of envtest's binaries, for the
// guides' own tests: $KUBEBUILDER_ASSETS, else the repository's bin/.
func envtestAssets(t *testing.T, repo string) string {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(repo, "bin")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		t.Fatalf("the guide's tests need envtest's binaries: run `make envtest-assets` (%v)", err)
	}
	return assets
}

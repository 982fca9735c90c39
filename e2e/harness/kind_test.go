package harness

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/e2e-framework/support"
)

// archiveLoader records the archives it is asked to load.
type archiveLoader struct {
	support.E2EClusterProviderWithImageLoader
	loaded []string
}

func (l *archiveLoader) LoadImageArchive(_ context.Context, archive string, _ ...string) error {
	l.loaded = append(l.loaded, filepath.Base(archive))
	return nil
}

func TestLoadImageArchives(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"etcd-operator.tar", "toolbox.tar", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var l archiveLoader
	if err := loadImageArchives(t.Context(), &l, dir); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"etcd-operator.tar", "toolbox.tar"}, l.loaded); diff != "" {
		t.Errorf("archives loaded (-want +got):\n%s", diff)
	}
	err := loadImageArchives(t.Context(), &l, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "make images") {
		t.Errorf("an empty directory: %v, want an error saying to run make images", err)
	}
}

package harness

import (
	"context"
	"fmt"
	"path/filepath"

	"sigs.k8s.io/e2e-framework/support"
)

// loadImageArchives loads every image tarball in dir (make images) into
// the cluster, as `kind load image-archive` does: kind's nodes, like real
// nodes, have nothing of what make images built, and the suites' pods
// pull nothing (IfNotPresent, images no registry serves).
func loadImageArchives(ctx context.Context, loader support.E2EClusterProviderWithImageLoader, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no image tarballs in %s: run make images (or set %s)", dir, EnvImages)
	}
	for _, f := range files {
		if err := loader.LoadImageArchive(ctx, f); err != nil {
			return fmt.Errorf("loading image archive %s into the kind cluster: %w", f, err)
		}
	}
	return nil
}

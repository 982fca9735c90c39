package harness

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/opkit-dev/opkit/internal/localcluster/realnode"
)

// PushedImage returns ref (a tagged image of make images) as the real
// nodes' registry serves it, by digest: what a user installs with
// imagePullPolicy Always, pulled on every start.
func PushedImage(ctx context.Context, ref string) (string, error) {
	tag, err := realnode.RegistryRef(ref)
	if err != nil {
		return "", err
	}
	desc, err := remote.Head(tag, remote.WithContext(ctx))
	if err != nil {
		return "", fmt.Errorf("image %s in the real nodes' registry: %w", ref, err)
	}
	return tag.Context().Digest(desc.Digest.String()).String(), nil
}

package realnode

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// RegistryAddress is where the nodes' OCI registry (the CNCF distribution
// registry) listens, plain HTTP on loopback. Every node's containerd
// pulls every image through it: a pod's image must have been pushed there
// (Up pushes Spec.Images), under its repository without the registry
// (docker.io/library/memcached:1.6 as library/memcached:1.6).
const RegistryAddress = "127.0.0.1:5100"

// RegistryRef returns where ref is stored in the nodes' registry, by
// name: RegistryAddress/<repository>:<tag>.
func RegistryRef(ref string) (name.Tag, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return name.Tag{}, err
	}
	return name.NewTag(RegistryAddress + "/" + tag.RepositoryStr() + ":" + tag.TagStr())
}

// registryConfig is the registry's configuration: storage under the
// shared state directory, so Down's removal of it empties the registry.
func registryConfig() string {
	return strings.Join([]string{
		"version: 0.1",
		"log:",
		"  level: warn",
		"storage:",
		"  filesystem:",
		"    rootdirectory: " + sharedDir("registry", "data"),
		"  delete:",
		"    enabled: true",
		"http:",
		"  addr: " + RegistryAddress,
		"",
	}, "\n")
}

// hostsTOML sends every registry's pulls to the nodes' registry and no
// further (server is the registry itself): nothing leaves the machine.
// containerd reads it as certs.d/_default/hosts.toml, for any registry
// without a directory of its own.
func hostsTOML() string {
	return `server = "http://` + RegistryAddress + `"` + "\n"
}

// startRegistry starts the registry and waits until it answers.
func startRegistry(ctx context.Context, binDir string) error {
	path := sharedDir("registry", "config.yml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(registryConfig()), 0o644); err != nil {
		return err
	}
	d := daemon{
		name:    "registry",
		path:    filepath.Join(binDir, "registry"),
		args:    []string{"serve", path},
		logFile: sharedDir("logs", "registry.log"),
	}
	if err := d.start(); err != nil {
		return err
	}
	return waitFor(ctx, 30*time.Second, "the registry on "+RegistryAddress, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+RegistryAddress+"/v2/", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /v2/: %s", resp.Status)
		}
		return nil
	})
}

// pushImages pushes image tarballs (docker-archive, one image each, as
// make images writes them) to the registry under their tagged names.
func pushImages(ctx context.Context, tarballs []string) error {
	for _, file := range tarballs {
		manifest, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(file) })
		if err != nil {
			return fmt.Errorf("image %s: %w", file, err)
		}
		if len(manifest) != 1 || len(manifest[0].RepoTags) == 0 {
			return fmt.Errorf("image %s: want one image with a tag (make images writes them)", file)
		}
		img, err := tarball.ImageFromPath(file, nil)
		if err != nil {
			return fmt.Errorf("image %s: %w", file, err)
		}
		for _, ref := range manifest[0].RepoTags {
			dst, err := RegistryRef(ref)
			if err != nil {
				return fmt.Errorf("image %s: %w", file, err)
			}
			if err := remote.Write(dst, img, remote.WithContext(ctx)); err != nil {
				return fmt.Errorf("pushing %s to %s: %w", file, dst, err)
			}
		}
	}
	return nil
}

package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestPushedIndexHasEveryArch builds a Go program for amd64 and arm64 as
// the catalog builds the Go images, pushes the index to a registry on
// loopback and reads it back: one manifest per platform, each config and
// binary of its architecture. A second push of the same build is the same
// digest.
func TestPushedIndexHasEveryArch(t *testing.T) {
	dir := t.TempDir()
	for file, content := range map[string]string{
		"go.mod":  "module example.com/hello\n\ngo 1.26\n",
		"main.go": "package main\n\nfunc main() {}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	var imgs []Image
	for _, arch := range []string{"amd64", "arm64"} {
		out := filepath.Join(dir, "hello-"+arch)
		if err := goBuild(t.Context(), dir, ".", out, arch); err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, Image{Ref: "opkit.dev/hello:dev", Arch: arch,
			Files: []File{{Path: "/hello", Source: out, Mode: 0o755}}, Config: Config{Entrypoint: []string{"/hello"}}})
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := Target(u.Host+"/opkit", "opkit.dev/hello:dev")
	if err != nil {
		t.Fatal(err)
	}
	var pushed []name.Digest
	for range 2 {
		idx, err := Index(imgs)
		if err != nil {
			t.Fatal(err)
		}
		d, err := Push(t.Context(), dst, idx)
		if err != nil {
			t.Fatal(err)
		}
		pushed = append(pushed, d)
	}
	if pushed[0] != pushed[1] {
		t.Errorf("two pushes of one build: %s and %s, want one digest", pushed[0], pushed[1])
	}

	idx, err := remote.Index(pushed[0], remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, desc := range manifest.Manifests {
		platforms = append(platforms, desc.Platform.String())
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.OS + "/" + cfg.Architecture; got != desc.Platform.String() {
			t.Errorf("manifest of %s has a config for %s", desc.Platform, got)
		}
		bin := layerFile(t, img, "hello")
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("%s: /hello: %v", desc.Platform, err)
		}
		if want := machines[desc.Platform.Architecture]; f.Machine != want {
			t.Errorf("%s: /hello is for %v, want %v", desc.Platform, f.Machine, want)
		}
	}
	if diff := cmp.Diff([]string{"linux/amd64", "linux/arm64"}, platforms); diff != "" {
		t.Errorf("the index's platforms (-want +got):\n%s", diff)
	}
}

// layerFile returns the content of file in img's single layer.
func layerFile(t *testing.T, img v1.Image, file string) []byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v; want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("no %s in the layer", file)
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Name == file {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

func TestTarget(t *testing.T) {
	for _, tt := range []struct {
		registry, ref, want, wantErr string
	}{
		{registry: "127.0.0.1:5000", ref: "memcached:1.6", want: "127.0.0.1:5000/library/memcached:1.6"},
		{registry: "127.0.0.1:5000/", ref: "opkit.dev/etcd-operator:dev", want: "127.0.0.1:5000/etcd-operator:dev"},
		{registry: "registry.example.com/team", ref: "gcr.io/etcd-development/etcd:v3.6.16", want: "registry.example.com/team/etcd-development/etcd:v3.6.16"},
		{registry: "http://127.0.0.1:5000", ref: "memcached:1.6", wantErr: "want host[:port][/path]"},
		{registry: "", ref: "memcached:1.6", wantErr: "want host[:port][/path]"},
		{registry: "127.0.0.1:5000", ref: "memcached", wantErr: "has no tag"},
	} {
		got, err := Target(tt.registry, tt.ref)
		if tt.wantErr != "" {
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tt.wantErr)) {
				t.Errorf("Target(%q, %q) = %v, %v; want an error containing %q", tt.registry, tt.ref, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got.String() != tt.want {
			t.Errorf("Target(%q, %q) = %v, %v; want %s", tt.registry, tt.ref, got, err, tt.want)
		}
	}
}

func TestParsePlatforms(t *testing.T) {
	got, err := parsePlatforms("linux/amd64, linux/arm64,linux/amd64")
	if diff := cmp.Diff([]string{"amd64", "arm64"}, got); err != nil || diff != "" {
		t.Errorf("parsePlatforms: %v (-want +got):\n%s", err, diff)
	}
	for _, bad := range []string{"", "amd64", "windows/amd64", "linux/arm/v7"} {
		if _, err := parsePlatforms(bad); err == nil {
			t.Errorf("parsePlatforms(%q) succeeded, want an error", bad)
		}
	}
}

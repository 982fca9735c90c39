package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Index returns imgs, one per architecture of one image, as a multi-arch
// index (a Docker manifest list, as the images' manifests are Docker's).
func Index(imgs []Image) (v1.ImageIndex, error) {
	if len(imgs) == 0 {
		return nil, errors.New("an index of no images")
	}
	idx := mutate.IndexMediaType(empty.Index, types.DockerManifestList)
	var arches []string
	for _, img := range imgs {
		if img.Ref != imgs[0].Ref {
			return nil, fmt.Errorf("one index of two images, %s and %s", imgs[0].Ref, img.Ref)
		}
		if slices.Contains(arches, img.arch()) {
			return nil, fmt.Errorf("image %s: linux/%s twice", img.Ref, img.arch())
		}
		arches = append(arches, img.arch())
		_, image, err := img.build()
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        image,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: img.arch()}},
		})
	}
	return idx, nil
}

// Target returns where ref is pushed in registry ("host[:port][/path]"):
// the registry, then ref's repository without its registry, and its tag,
// so docker.io/library/memcached:1.6 goes to REGISTRY/library/memcached:1.6.
// This is what a containerd mirror of ref's registry asks the mirror for.
func Target(registry, ref string) (name.Tag, error) {
	registry = strings.TrimSuffix(registry, "/")
	if registry == "" || strings.Contains(registry, "://") {
		return name.Tag{}, fmt.Errorf("registry %q: want host[:port][/path], for example 127.0.0.1:5000 (plain HTTP on loopback)", registry)
	}
	norm, err := Normalize(ref)
	if err != nil {
		return name.Tag{}, err
	}
	src, err := name.NewTag(norm)
	if err != nil {
		return name.Tag{}, err
	}
	dst, err := name.NewTag(registry + "/" + src.RepositoryStr() + ":" + src.TagStr())
	if err != nil {
		return name.Tag{}, fmt.Errorf("registry %q: %w", registry, err)
	}
	return dst, nil
}

// Push writes idx to dst and returns dst by digest. A loopback registry is
// spoken to over plain HTTP (go-containerregistry's rule).
func Push(ctx context.Context, dst name.Tag, idx v1.ImageIndex) (name.Digest, error) {
	if err := remote.WriteIndex(dst, idx, remote.WithContext(ctx)); err != nil {
		return name.Digest{}, fmt.Errorf("pushing %s: %w", dst, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	return dst.Digest(d.String()), nil
}

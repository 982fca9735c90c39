// Command images builds the container images that real nodes of the local
// cluster (kubelet + containerd) and kind run, without Docker: one
// docker-archive tarball per image, written with go-containerregistry from
// binaries built here. `make images` runs it:
//
//	cd hack && go run ./images -out ../.local/images [-only NAME,...] [-tag dev] [-bin ../bin]
//
// Load a tarball with `ctr -n k8s.io images import FILE` or
// `kind load image-archive FILE`. Images are stored under their fully
// normalized names (docker.io/library/memcached:1.6), as containerd's CRI
// looks them up. See catalog.go for the images, build.go for the builder.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/opkit-dev/opkit/internal/repo"
)

func main() {
	out := flag.String("out", ".local/images", "directory the tarballs are written to")
	only := flag.String("only", "", "comma-separated images to build (default: all): "+strings.Join(names(Catalog(DefaultTag)), ", "))
	bin := flag.String("bin", "", "the repository's bin/ with hack/install-tool.sh's links (default: bin/ of this checkout)")
	tag := flag.String("tag", DefaultTag, "tag of the opkit.dev images (a tag other than "+DefaultTag+" is added to their file names)")
	memcached := flag.String("memcached", DefaultMemcached, "the memcached binary of the memcached image (Debian's package)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "images: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *out, *only, *bin, *tag, *memcached)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func names(specs []Spec) []string {
	var n []string
	for _, s := range specs {
		n = append(n, s.Name)
	}
	return n
}

// selectSpecs returns the specs named in only (comma-separated; empty:
// all), in catalog order.
func selectSpecs(specs []Spec, only string) ([]Spec, error) {
	if only == "" {
		return specs, nil
	}
	want := map[string]bool{}
	for n := range strings.SplitSeq(only, ",") {
		n = strings.TrimSpace(n)
		if !slices.Contains(names(specs), n) {
			return nil, fmt.Errorf("-only: no image %q; the images are %s", n, strings.Join(names(specs), ", "))
		}
		want[n] = true
	}
	var selected []Spec
	for _, s := range specs {
		if want[s.Name] {
			selected = append(selected, s)
		}
	}
	return selected, nil
}

func run(ctx context.Context, out, only, bin, tag, memcached string) error {
	specs, err := selectSpecs(Catalog(tag), only)
	if err != nil {
		return err
	}
	root, err := repo.Root()
	if err != nil {
		return err
	}
	if bin == "" {
		if bin, err = repo.BinDir(); err != nil {
			return err
		}
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "opkit-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	env := &Env{Root: root, Bin: bin, Tmp: tmp, Memcached: memcached}
	// One image at a time: each may run a go build.
	for _, s := range specs {
		img, err := s.Image(ctx, env)
		if errors.Is(err, errSkip) {
			fmt.Printf("note: %s: %v\n", s.Name, err)
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		file := filepath.Join(out, s.File)
		if err := Write(img, file); err != nil {
			return err
		}
		st, err := os.Stat(file)
		if err != nil {
			return err
		}
		fmt.Printf("%s\t%.1f MiB\t%s\n", file, float64(st.Size())/(1<<20), s.Ref)
	}
	return nil
}

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
// looks them up.
//
// With -push REGISTRY it writes no tarballs: it pushes each image as an
// index of the -platforms it can be built for (`make images-push`), and
// -digests FILE records each one by digest. See catalog.go for the images,
// build.go for the builder, push.go for the push.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/opkit-dev/opkit/internal/repo"
)

func main() {
	var o options
	flag.StringVar(&o.out, "out", ".local/images", "directory the tarballs are written to")
	flag.StringVar(&o.only, "only", "", "comma-separated images to build (default: all): "+strings.Join(names(Catalog(DefaultTag)), ", "))
	flag.StringVar(&o.bin, "bin", "", "the repository's bin/ with hack/install-tool.sh's links (default: bin/ of this checkout)")
	flag.StringVar(&o.tag, "tag", DefaultTag, "tag of the opkit.dev images (a tag other than "+DefaultTag+" is added to their file names)")
	flag.StringVar(&o.memcached, "memcached", DefaultMemcached, "the memcached binary of the memcached image (Debian's package)")
	flag.StringVar(&o.push, "push", "", "push to this registry (host[:port][/path]; plain HTTP on loopback) instead of writing tarballs")
	platforms := flag.String("platforms", "linux/"+runtime.GOARCH, "with -push: comma-separated platforms of each image's index")
	flag.StringVar(&o.digests, "digests", "", "with -push: write one line per image to this file: its name, then where it was pushed by digest")
	flag.BoolVar(&o.dryRun, "dry-run", false, "with -push: build the indexes and write -digests, but push nothing")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "images: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	var err error
	if o.arches, err = parsePlatforms(*platforms); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

// options are main's flags.
type options struct {
	out, only, bin, tag, memcached string
	push, digests                  string
	dryRun                         bool
	// arches are -platforms' GOARCHes.
	arches []string
}

// parsePlatforms returns the GOARCHes of a list such as
// "linux/amd64,linux/arm64".
func parsePlatforms(list string) ([]string, error) {
	var arches []string
	for p := range strings.SplitSeq(list, ",") {
		os, arch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || os != "linux" || arch == "" || strings.Contains(arch, "/") {
			return nil, fmt.Errorf("-platforms: %q is not linux/ARCH (for example linux/arm64)", p)
		}
		if !slices.Contains(arches, arch) {
			arches = append(arches, arch)
		}
	}
	return arches, nil
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

func run(ctx context.Context, o options) error {
	specs, err := selectSpecs(Catalog(o.tag), o.only)
	if err != nil {
		return err
	}
	root, err := repo.Root()
	if err != nil {
		return err
	}
	bin := o.bin
	if bin == "" {
		if bin, err = repo.BinDir(); err != nil {
			return err
		}
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "opkit-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	env := &Env{Root: root, Bin: bin, Tmp: tmp, Memcached: o.memcached}
	if o.push != "" {
		return push(ctx, env, specs, o)
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	// One image at a time: each may run a go build.
	for _, s := range specs {
		img, err := s.Image(ctx, env, runtime.GOARCH)
		if errors.Is(err, errSkip) {
			fmt.Printf("note: %s: %v\n", s.Name, err)
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		file := filepath.Join(o.out, s.File)
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

// push pushes each spec as an index of the arches it can be built for.
func push(ctx context.Context, env *Env, specs []Spec, o options) error {
	var digests strings.Builder
	for _, s := range specs {
		dst, err := Target(o.push, s.Ref)
		if err != nil {
			return err
		}
		var imgs []Image
		for _, arch := range o.arches {
			img, err := s.Image(ctx, env, arch)
			if errors.Is(err, errSkip) {
				fmt.Printf("note: %s: %v\n", s.Name, err)
				continue
			}
			if err != nil {
				return fmt.Errorf("%s: %w", s.Name, err)
			}
			imgs = append(imgs, img)
		}
		if len(imgs) == 0 {
			continue
		}
		idx, err := Index(imgs)
		if err != nil {
			return err
		}
		var pushed name.Digest
		if o.dryRun {
			d, err := idx.Digest()
			if err != nil {
				return err
			}
			pushed = dst.Digest(d.String())
		} else if pushed, err = Push(ctx, dst, idx); err != nil {
			return err
		}
		fmt.Printf("%s\t%s\n", s.Name, pushed)
		fmt.Fprintf(&digests, "%s %s\n", s.Name, pushed)
	}
	if o.digests == "" {
		return nil
	}
	return os.WriteFile(o.digests, []byte(digests.String()), 0o644)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// DefaultTag is the tag of the opkit.dev images unless -tag says otherwise.
const DefaultTag = "dev"

// EtcdVersions are the etcd releases with an image, as pinned in
// hack/install-tool.sh (ETCD_VERSION, ETCD35_VERSION) and built statically
// by `hack/install-tool.sh etcd-static` into bin/etcd-static-<version>/.
var EtcdVersions = []string{"v3.6.16", "v3.5.35"}

// etcdRepository is the etcd operator's default spec.repository; it names
// a member's image <repository>:v<version>.
const etcdRepository = "gcr.io/etcd-development/etcd"

// CertManagerVersion is the cert-manager release hack/tools/certmanager
// pins, the tag of its image.
const CertManagerVersion = "v1.21.2"

// pathEnv is PATH in images whose pods name their command without a path
// (the etcd operator runs "etcd" and "etcdutl", the memcached one
// "memcached").
const pathEnv = "PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin"

// nonRoot is the user of the opkit.dev images: distroless's nonroot,
// numeric so that runAsNonRoot pods accept it.
const nonRoot = "65532:65532"

// caBundle is the host's CA bundle (Debian's ca-certificates), copied into
// the opkit.dev images for TLS to S3 backup stores when present.
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

// errSkip marks an image that is left out on purpose (a package that does
// not exist yet); main prints it as a note.
var errSkip = errors.New("skipped")

// Spec is one image `make images` can build.
type Spec struct {
	// Name is what -only selects.
	Name string
	// File is the tarball's name in -out.
	File string
	// Ref is the image's fully normalized name and tag.
	Ref string
	// Build returns the image's files and configuration for the GOARCH
	// arch, building what it needs.
	Build func(ctx context.Context, e *Env, arch string) ([]File, Config, error)
	// AnyArch is set when Build builds for any GOARCH (Go built here);
	// otherwise it copies this machine's binaries, for its GOARCH only.
	AnyArch bool
}

// Image returns the image of s for the GOARCH arch, built.
func (s Spec) Image(ctx context.Context, e *Env, arch string) (Image, error) {
	if !s.AnyArch && arch != runtime.GOARCH {
		return Image{}, fmt.Errorf("%w: linux/%s: the image holds this machine's %s binaries", errSkip, arch, runtime.GOARCH)
	}
	files, cfg, err := s.Build(ctx, e, arch)
	if err != nil {
		return Image{}, err
	}
	return Image{Ref: s.Ref, Files: files, Config: cfg, Arch: arch}, nil
}

// Env is what Spec.Build may use.
type Env struct {
	// Root is the repository root; Go packages are built from it.
	Root string
	// Bin is the repository's bin/ (hack/install-tool.sh's links).
	Bin string
	// Tmp is a scratch directory removed after the run.
	Tmp string
	// Memcached is the memcached binary whose image is built (Debian's).
	Memcached string
}

// Catalog returns every image, in build order; the opkit.dev images are
// tagged tag.
func Catalog(tag string) []Spec {
	suffix := ""
	if tag != DefaultTag {
		// Two tags of an operator can sit side by side in -out.
		suffix = "-" + tag
	}
	specs := []Spec{
		goImage("memcached-operator", "opkit.dev/memcached-operator:"+tag, suffix, "./examples/memcached",
			Config{Entrypoint: []string{"/manager"}, User: nonRoot}),
		// The seed-restore init containers run this image with the
		// arguments fetch-backup / finish-restore (and runAsUser 0).
		goImage("etcd-operator", "opkit.dev/etcd-operator:"+tag, suffix, "./examples/etcd",
			Config{Entrypoint: []string{"/manager"}, User: nonRoot}),
		// The e2e suites' client pods: `kubectl exec POD -- toolbox ...`
		// finds it through PATH; with no arguments it sleeps.
		goImage("toolbox", "opkit.dev/toolbox:"+tag, suffix, "./hack/images/toolbox",
			Config{Entrypoint: []string{"/usr/local/bin/toolbox"}, Cmd: []string{"sleep"}, User: nonRoot, Env: []string{pathEnv}},
			File{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777}),
		// The pod sandbox image of containerd's CRI; the real one runs as
		// 65535 too.
		goImage("pause", "registry.k8s.io/pause:3.10", "", "./hack/images/pause",
			Config{Entrypoint: []string{"/pause"}, User: "65535:65535"}),
		memcachedImage(),
		versityGWImage(),
		// cert-manager's controllers and CA injector, for the suites'
		// cert-manager variant (hack/certmanager).
		goImage("cert-manager", "opkit.dev/cert-manager:"+CertManagerVersion, "", "./hack/tools/certmanager",
			Config{Entrypoint: []string{"/cert-manager"}, User: nonRoot}),
	}
	for _, v := range EtcdVersions {
		specs = append(specs, etcdImage(v))
	}
	return specs
}

// goImage is an image holding the Go main package pkg (relative to the
// repository root) built statically as cfg.Entrypoint[0], plus the extra
// files. The opkit.dev images also get the host's CA bundle. A package that
// does not exist is skipped with a note, so that an entry can precede its
// package.
func goImage(name, ref, suffix, pkg string, cfg Config, extra ...File) Spec {
	binPath := cfg.Entrypoint[0]
	return Spec{
		Name:    name,
		File:    name + suffix + ".tar",
		Ref:     ref,
		AnyArch: true,
		Build: func(ctx context.Context, e *Env, arch string) ([]File, Config, error) {
			dir := filepath.Join(e.Root, filepath.FromSlash(pkg))
			if goFiles, _ := filepath.Glob(filepath.Join(dir, "*.go")); len(goFiles) == 0 {
				return nil, Config{}, fmt.Errorf("%w: no Go package in %s", errSkip, pkg)
			}
			out := filepath.Join(e.Tmp, name+"-"+arch)
			// The operators log their version: the image's tag, so that
			// two tags are two builds.
			var ldflags []string
			if repo, tag, ok := strings.Cut(ref, ":"); ok && strings.HasPrefix(repo, "opkit.dev/") {
				ldflags = append(ldflags, "-X", "main.version="+tag)
			}
			// In the package's directory: the examples are modules of
			// their own.
			if err := goBuild(ctx, dir, ".", out, arch, ldflags...); err != nil {
				return nil, Config{}, err
			}
			files := append([]File{{Path: binPath, Source: out, Mode: 0o755}}, extra...)
			if strings.HasPrefix(ref, "opkit.dev/") {
				if _, err := os.Stat(caBundle); err == nil {
					files = append(files, File{Path: caBundle, Source: caBundle, Mode: 0o644})
				} else {
					fmt.Fprintf(os.Stderr, "note: %s: no %s on this machine, the image has no CA certificates\n", ref, caBundle)
				}
			}
			return files, cfg, nil
		},
	}
}

// goBuild builds the main package pkg for linux/arch statically
// (CGO_ENABLED=0, for images without a C library) into out, running the go
// command in dir, with ldflags added to the linker's flags.
func goBuild(ctx context.Context, dir, pkg, out, arch string, ldflags ...string) error {
	flags := strings.Join(append([]string{"-s", "-w"}, ldflags...), " ")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags="+flags, "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s in %s: %w", pkg, dir, err)
	}
	return nil
}

// checkEtcd fails unless the binary etcd is etcd version.
func checkEtcd(ctx context.Context, etcd, version string) error {
	out, err := exec.CommandContext(ctx, etcd, "--version").Output()
	if err != nil {
		return fmt.Errorf("%s --version: %w: run `make etcd-static` (hack/install-tool.sh etcd-static)", etcd, err)
	}
	if want := "etcd Version: " + strings.TrimPrefix(version, "v") + "\n"; !strings.Contains(string(out), want) {
		return fmt.Errorf("%s is not etcd %s (it says %q): run `make etcd-static`", etcd, version, out)
	}
	return nil
}

// etcdImage is etcd at version (vX.Y.Z) as the etcd operator runs it:
// tagged <etcdRepository>:vX.Y.Z, with etcd, etcdctl and etcdutl in
// /usr/local/bin as in the upstream image, found through PATH (the
// operator's containers run "etcd" and "etcdutl"). Like upstream, it runs
// as root. Another arch is cross-built from the same pinned module.
func etcdImage(version string) Spec {
	return Spec{
		Name:    "etcd-" + version,
		File:    "etcd-" + version + ".tar",
		Ref:     etcdRepository + ":" + version,
		AnyArch: true,
		Build: func(ctx context.Context, e *Env, arch string) ([]File, Config, error) {
			dir := filepath.Join(e.Bin, "etcd-static-"+version)
			if arch != runtime.GOARCH {
				var err error
				if dir, err = crossEtcd(ctx, e, version, arch); err != nil {
					return nil, Config{}, err
				}
			} else if err := checkEtcd(ctx, filepath.Join(dir, "etcd"), version); err != nil {
				return nil, Config{}, err
			}
			files := []File{
				{Path: "/var/etcd", Mode: fs.ModeDir | 0o700},
				{Path: "/var/lib/etcd", Mode: fs.ModeDir | 0o700},
				{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
			}
			for _, b := range []string{"etcd", "etcdctl", "etcdutl"} {
				files = append(files, File{Path: "/usr/local/bin/" + b, Source: filepath.Join(dir, b), Mode: 0o755})
			}
			return files, Config{
				Cmd:        []string{"/usr/local/bin/etcd"},
				Env:        []string{pathEnv},
				WorkingDir: "/var/etcd",
				Labels: map[string]string{
					"org.opencontainers.image.version":     version,
					"org.opencontainers.image.description": "etcd " + version + " built statically from go.etcd.io/etcd by hack/install-tool.sh etcd-static",
				},
			}, nil
		},
	}
}

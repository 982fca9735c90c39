package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// VersityGWVersion is the versitygw release of the S3 store image, as
// pinned in hack/install-tool.sh (VERSITYGW_VERSION).
const VersityGWVersion = "v1.8.0"

// The directories of the S3 store image: the gateway's root (every
// directory in it is a bucket) and its metadata sidecar.
const (
	versityGWRoot    = "/data"
	versityGWSidecar = "/meta"
	// versityGWBucket exists from the start, so that the etcd operator's
	// sample store needs no step to create it.
	versityGWBucket = "etcd-backups"
)

// versityGWBinary returns the versitygw binary for linux/arch and the
// shared libraries it loads: for this machine's arch the one `make
// versitygw` built, for another one a static cross-build.
func versityGWBinary(ctx context.Context, e *Env, arch string) (string, []string, error) {
	if arch != runtime.GOARCH {
		out := filepath.Join(e.Tmp, "versitygw-"+arch)
		err := crossModule(ctx, "github.com/versity/versitygw", VersityGWVersion, "./cmd/versitygw", out, arch)
		return out, nil, err
	}
	link := filepath.Join(e.Bin, "versitygw")
	bin, err := filepath.EvalSymlinks(link)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w: run `make versitygw`", link, err)
	}
	// hack/install-tool.sh installs into <cache>/versitygw-<version>/.
	if got := filepath.Base(filepath.Dir(bin)); got != "versitygw-"+VersityGWVersion {
		return "", nil, fmt.Errorf("%s is %s, not versitygw %s: run `make versitygw`", link, bin, VersityGWVersion)
	}
	libs, err := sharedLibraries(ctx, bin)
	return bin, libs, err
}

// versityGWImage is an S3 server for the local cluster: the versitygw
// binary `make versitygw` built (with its shared libraries) serving its
// posix backend on :7070, root /data holding the bucket etcd-backups,
// metadata in the sidecar directory /meta (so that the container's file
// system need not support extended attributes). ROOT_ACCESS_KEY and
// ROOT_SECRET_KEY set its credentials. Objects live in the container: a
// store for demos and tests, not for backups anyone needs.
func versityGWImage() Spec {
	return Spec{
		Name:    "versitygw",
		File:    "versitygw.tar",
		Ref:     "opkit.dev/versitygw:" + VersityGWVersion,
		AnyArch: true,
		Build: func(ctx context.Context, e *Env, arch string) ([]File, Config, error) {
			bin, libs, err := versityGWBinary(ctx, e, arch)
			if err != nil {
				return nil, Config{}, err
			}
			files := []File{
				{Path: "/usr/local/bin/versitygw", Source: bin, Mode: 0o755},
				{Path: versityGWRoot, Mode: fs.ModeDir | 0o755, UID: 65532, GID: 65532},
				{Path: versityGWRoot + "/" + versityGWBucket, Mode: fs.ModeDir | 0o755, UID: 65532, GID: 65532},
				{Path: versityGWSidecar, Mode: fs.ModeDir | 0o755, UID: 65532, GID: 65532},
			}
			for _, lib := range libs {
				st, err := os.Stat(lib)
				if err != nil {
					return nil, Config{}, err
				}
				files = append(files, File{Path: lib, Source: lib, Mode: st.Mode().Perm()})
			}
			return files, Config{
				Entrypoint: []string{"/usr/local/bin/versitygw"},
				Cmd:        []string{"--port", ":7070", "posix", "--sidecar", versityGWSidecar, versityGWRoot},
				User:       nonRoot,
				Env:        []string{pathEnv},
				Labels: map[string]string{
					"org.opencontainers.image.version":     VersityGWVersion,
					"org.opencontainers.image.description": "versitygw " + VersityGWVersion + " (S3 gateway, posix backend) for the local cluster, bucket " + versityGWBucket + "; built by opkit's hack/images",
				},
			}, nil
		},
	}
}

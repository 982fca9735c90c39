package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// memcacheUID is the uid and gid of the memcache user in the official
// memcached image, which the memcached operator's pods run as.
const memcacheUID = 11211

// DefaultMemcached is Debian's memcached binary (package memcached).
const DefaultMemcached = "/usr/bin/memcached"

// memcachedImage is docker.io/library/memcached:1.6, the memcached
// operator's default spec.image, made from the host's memcached binary
// (Debian's package, not the Docker Hub image) and the shared libraries
// ldd lists for it. The binary is /usr/local/bin/memcached, as in the
// official image, found through PATH: the operator's pods run the command
// "memcached" with -p and -m, as user 11211 with a read-only root
// filesystem.
func memcachedImage() Spec {
	return Spec{
		Name: "memcached",
		File: "memcached.tar",
		Ref:  "docker.io/library/memcached:1.6",
		Build: func(ctx context.Context, e *Env, _ string) ([]File, Config, error) {
			out, err := exec.CommandContext(ctx, e.Memcached, "-V").Output()
			if err != nil {
				return nil, Config{}, fmt.Errorf("%s -V: %w: install Debian's memcached (apt-get install memcached, done by `make images`)", e.Memcached, err)
			}
			version := strings.TrimSpace(string(out)) // "memcached 1.6.18"
			if !strings.HasPrefix(version, "memcached 1.6.") {
				return nil, Config{}, fmt.Errorf("%s -V says %q, want memcached 1.6.x for the tag 1.6", e.Memcached, version)
			}
			libs, err := sharedLibraries(ctx, e.Memcached)
			if err != nil {
				return nil, Config{}, err
			}
			files := []File{{Path: "/usr/local/bin/memcached", Source: e.Memcached, Mode: 0o755}}
			for _, lib := range libs {
				st, err := os.Stat(lib)
				if err != nil {
					return nil, Config{}, err
				}
				// The ELF interpreter must keep its execute bit.
				files = append(files, File{Path: lib, Source: lib, Mode: st.Mode().Perm()})
			}
			id := strconv.Itoa(memcacheUID)
			files = append(files,
				File{Path: "/etc/passwd", Mode: 0o644, Data: []byte(
					"root:x:0:0:root:/root:/sbin/nologin\n" +
						"memcache:x:" + id + ":" + id + ":memcached:/nonexistent:/sbin/nologin\n")},
				File{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nmemcache:x:" + id + ":\n")},
			)
			return files, Config{
				Entrypoint: []string{"memcached"},
				User:       id + ":" + id,
				Env:        []string{pathEnv},
				Labels: map[string]string{
					"org.opencontainers.image.version": strings.TrimPrefix(version, "memcached "),
					"org.opencontainers.image.description": version + " from this machine's Debian package with its shared libraries; " +
						"not the Docker Hub image (built by opkit's hack/images)",
				},
			}, nil
		},
	}
}

// sharedLibraries returns the ELF interpreter and the shared libraries ldd
// lists for binary, as absolute paths.
func sharedLibraries(ctx context.Context, binary string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ldd", binary).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", binary, err)
	}
	libs, err := parseLdd(string(out))
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", binary, err)
	}
	return libs, nil
}

// parseLdd returns the paths in glibc ldd's output:
//
//	linux-vdso.so.1 (0x...)                            (in the kernel: none)
//	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)
//	/lib64/ld-linux-x86-64.so.2 (0x...)                (the interpreter)
//	libfoo.so.1 => not found                           (an error)
func parseLdd(out string) ([]string, error) {
	var libs []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.Index(line, " (0x"); i >= 0 {
			line = line[:i]
		}
		soname, lib, mapped := strings.Cut(line, " => ")
		if !mapped {
			lib = soname
		}
		switch {
		case lib == "not found":
			return nil, fmt.Errorf("%s not found", soname)
		case strings.HasPrefix(lib, "/"):
			libs = append(libs, lib)
		}
	}
	return libs, sc.Err()
}

package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// layerEntry is what the tests compare of a layer's tar entry.
type layerEntry struct {
	Type     byte
	Mode     int64
	UID, GID int
	Content  string
}

// readBack reads the docker-archive file as containerd would: its
// manifest.json tags, its config and its single layer's entries.
func readBack(t *testing.T, file string) (tags []string, cfg *v1.ConfigFile, entries map[string]layerEntry) {
	t.Helper()
	manifest, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(file) })
	if err != nil {
		t.Fatalf("LoadManifest(%s): %v", file, err)
	}
	if len(manifest) != 1 {
		t.Fatalf("manifest.json has %d images, want 1", len(manifest))
	}
	img, err := tarball.ImageFromPath(file, nil)
	if err != nil {
		t.Fatalf("ImageFromPath(%s): %v", file, err)
	}
	if cfg, err = img.ConfigFile(); err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("image has %d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	entries = map[string]layerEntry{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		content, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		entries[hdr.Name] = layerEntry{Type: hdr.Typeflag, Mode: hdr.Mode, UID: hdr.Uid, GID: hdr.Gid, Content: string(content)}
	}
	return manifest[0].RepoTags, cfg, entries
}

func TestWriteReadsBack(t *testing.T) {
	src := filepath.Join(t.TempDir(), "manager")
	if err := os.WriteFile(src, []byte("#!binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := func(mode int64) layerEntry { return layerEntry{Type: tar.TypeDir, Mode: mode} }
	tests := []struct {
		name        string
		img         Image
		wantTags    []string
		wantConfig  v1.Config
		wantEntries map[string]layerEntry
	}{{
		name: "operator from a source file",
		img: Image{
			Ref:    "opkit.dev/memcached-operator:dev",
			Files:  []File{{Path: "/manager", Source: src, Mode: 0o755}},
			Config: Config{Entrypoint: []string{"/manager"}, User: "65532:65532"},
		},
		wantTags:    []string{"opkit.dev/memcached-operator:dev"},
		wantConfig:  v1.Config{Entrypoint: []string{"/manager"}, User: "65532:65532"},
		wantEntries: map[string]layerEntry{"manager": {Type: tar.TypeReg, Mode: 0o755, Content: "#!binary"}},
	}, {
		name: "docker hub short name, nested files and directories",
		img: Image{
			Ref: "memcached:1.6",
			Files: []File{
				{Path: "/usr/local/bin/memcached", Data: []byte("mc"), Mode: 0o755},
				{Path: "/etc/passwd", Data: []byte("root:x:0:0::/:/x\n"), Mode: 0o644},
				{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
				{Path: "/var/lib/etcd", Mode: fs.ModeDir | 0o700},
				{Path: "/data", Mode: fs.ModeDir | 0o755, UID: 65532, GID: 65532},
			},
			Config: Config{
				Entrypoint: []string{"memcached"}, Cmd: []string{"-v"}, User: "11211:11211",
				Env: []string{"PATH=/usr/local/bin"}, WorkingDir: "/tmp", Labels: map[string]string{"a": "b"},
			},
		},
		wantTags: []string{"docker.io/library/memcached:1.6"},
		wantConfig: v1.Config{
			Entrypoint: []string{"memcached"}, Cmd: []string{"-v"}, User: "11211:11211",
			Env: []string{"PATH=/usr/local/bin"}, WorkingDir: "/tmp", Labels: map[string]string{"a": "b"},
		},
		wantEntries: map[string]layerEntry{
			"data/":                   {Type: tar.TypeDir, Mode: 0o755, UID: 65532, GID: 65532},
			"etc/":                    dir(0o755),
			"etc/passwd":              {Type: tar.TypeReg, Mode: 0o644, Content: "root:x:0:0::/:/x\n"},
			"tmp/":                    dir(0o1777),
			"usr/":                    dir(0o755),
			"usr/local/":              dir(0o755),
			"usr/local/bin/":          dir(0o755),
			"usr/local/bin/memcached": {Type: tar.TypeReg, Mode: 0o755, Content: "mc"},
			"var/":                    dir(0o755),
			"var/lib/":                dir(0o755),
			"var/lib/etcd/":           dir(0o700),
		},
	}, {
		name:        "gcr.io name kept as is",
		img:         Image{Ref: "gcr.io/etcd-development/etcd:v3.6.16", Files: []File{{Path: "/x", Data: []byte{}, Mode: 0o644}}},
		wantTags:    []string{"gcr.io/etcd-development/etcd:v3.6.16"},
		wantEntries: map[string]layerEntry{"x": {Type: tar.TypeReg, Mode: 0o644}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "image.tar")
			if err := Write(tt.img, file); err != nil {
				t.Fatalf("Write: %v", err)
			}
			tags, cfg, entries := readBack(t, file)
			if diff := cmp.Diff(tt.wantTags, tags); diff != "" {
				t.Errorf("RepoTags (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantConfig, cfg.Config); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
			if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH {
				t.Errorf("platform = %s/%s, want linux/%s", cfg.OS, cfg.Architecture, runtime.GOARCH)
			}
			if diff := cmp.Diff(tt.wantEntries, entries); diff != "" {
				t.Errorf("layer entries (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWriteIsReproducible(t *testing.T) {
	dir := t.TempDir()
	img := Image{Ref: "opkit.dev/x:dev", Files: []File{{Path: "/a/b", Data: []byte("b"), Mode: 0o644}}}
	var files [2][]byte
	for i := range files {
		file := filepath.Join(dir, "x.tar")
		if err := Write(img, file); err != nil {
			t.Fatal(err)
		}
		var err error
		if files[i], err = os.ReadFile(file); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Error("two writes of the same image differ")
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		ref, want, wantErr string
	}{
		{ref: "memcached:1.6", want: "docker.io/library/memcached:1.6"},
		{ref: "docker.io/library/memcached:1.6", want: "docker.io/library/memcached:1.6"},
		{ref: "index.docker.io/library/memcached:1.6", want: "docker.io/library/memcached:1.6"},
		{ref: "bitnami/memcached:1", want: "docker.io/bitnami/memcached:1"},
		{ref: "registry.k8s.io/pause:3.10", want: "registry.k8s.io/pause:3.10"},
		{ref: "localhost:5000/x:dev", want: "localhost:5000/x:dev"},
		{ref: "opkit.dev/toolbox", wantErr: "has no tag"},
		{ref: "localhost:5000/x", wantErr: "has no tag"},
		{ref: "x@sha256:" + strings.Repeat("0", 64), wantErr: "digest"},
		{ref: "Bad/Name:1", wantErr: "repository"},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			got, err := Normalize(tt.ref)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Normalize(%q) = %q, %v; want an error containing %q", tt.ref, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Normalize(%q) = %q, %v; want %q", tt.ref, got, err, tt.want)
			}
		})
	}
}

// fakeELF returns a minimal x86-64 ELF executable with the given PT_INTERP
// (none when empty) and DT_NEEDED entries: enough for debug/elf, not to run.
func fakeELF(t *testing.T, interp string, needed ...string) []byte {
	t.Helper()
	le := binary.LittleEndian
	const ehsize, phentsize, shentsize = 64, 56, 64
	nprog := 0
	if interp != "" {
		nprog = 1
	}
	var data bytes.Buffer // everything after the headers
	base := uint64(ehsize + nprog*phentsize)
	interpOff := base
	if interp != "" {
		data.WriteString(interp + "\x00")
	}
	dynstrOff := base + uint64(data.Len())
	dynstr := []byte{0}
	var dyn []elf.Dyn64
	for _, n := range needed {
		dyn = append(dyn, elf.Dyn64{Tag: int64(elf.DT_NEEDED), Val: uint64(len(dynstr))})
		dynstr = append(append(dynstr, n...), 0)
	}
	dyn = append(dyn, elf.Dyn64{Tag: int64(elf.DT_NULL)})
	data.Write(dynstr)
	for data.Len()%8 != 0 {
		data.WriteByte(0)
	}
	dynamicOff := base + uint64(data.Len())
	if err := binary.Write(&data, le, dyn); err != nil {
		t.Fatal(err)
	}
	shstrtab := "\x00.dynstr\x00.dynamic\x00.shstrtab\x00"
	shstrtabOff := base + uint64(data.Len())
	data.WriteString(shstrtab)
	for data.Len()%8 != 0 {
		data.WriteByte(0)
	}
	shoff := base + uint64(data.Len())

	var out bytes.Buffer
	hdr := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Phoff: ehsize, Shoff: shoff, Ehsize: ehsize,
		Phentsize: phentsize, Phnum: uint16(nprog), Shentsize: shentsize, Shnum: 4, Shstrndx: 3,
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	hdr.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	hdr.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	sections := []elf.Section64{
		{},
		{Name: 1, Type: uint32(elf.SHT_STRTAB), Off: dynstrOff, Size: uint64(len(dynstr)), Addralign: 1},
		{Name: 9, Type: uint32(elf.SHT_DYNAMIC), Off: dynamicOff, Size: uint64(len(dyn) * 16), Link: 1, Addralign: 8, Entsize: 16},
		{Name: 18, Type: uint32(elf.SHT_STRTAB), Off: shstrtabOff, Size: uint64(len(shstrtab)), Addralign: 1},
	}
	parts := []any{hdr}
	if interp != "" {
		parts = append(parts, elf.Prog64{Type: uint32(elf.PT_INTERP), Flags: uint32(elf.PF_R),
			Off: interpOff, Filesz: uint64(len(interp) + 1), Memsz: uint64(len(interp) + 1), Align: 1})
	}
	parts = append(parts, data.Bytes(), sections)
	for _, p := range parts {
		if err := binary.Write(&out, le, p); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes()
}

func TestFakeELF(t *testing.T) {
	l, ok, err := readLinking(bytes.NewReader(fakeELF(t, "/lib64/ld.so", "libc.so.6", "libm.so.6")))
	if err != nil || !ok {
		t.Fatalf("readLinking = %v, %v", ok, err)
	}
	if diff := cmp.Diff(linking{interpreter: "/lib64/ld.so", needed: []string{"libc.so.6", "libm.so.6"}}, l,
		cmp.AllowUnexported(linking{})); diff != "" {
		t.Errorf("linking (-want +got):\n%s", diff)
	}
}

func TestWriteRefusesIncompleteImages(t *testing.T) {
	const interp = "/lib64/ld-linux-x86-64.so.2"
	dynamic := fakeELF(t, interp, "libevent-2.1.so.7", "libc.so.6")
	src := filepath.Join(t.TempDir(), "memcached")
	if err := os.WriteFile(src, dynamic, 0o755); err != nil {
		t.Fatal(err)
	}
	lib := func(p string) File { return File{Path: p, Data: []byte("lib"), Mode: 0o755} }
	tests := []struct {
		name    string
		img     Image
		wantErr []string // substrings; none: Write succeeds
	}{{
		name: "dynamic binary alone",
		img:  Image{Ref: "opkit.dev/x:dev", Files: []File{{Path: "/usr/bin/memcached", Source: src, Mode: 0o755}}},
		wantErr: []string{"/usr/bin/memcached (from " + src + ") is dynamically linked",
			"ELF interpreter " + interp, "libevent-2.1.so.7", "libc.so.6", "CGO_ENABLED=0", "ldd"},
	}, {
		name: "a library missing",
		img: Image{Ref: "opkit.dev/x:dev", Files: []File{
			{Path: "/m", Data: dynamic, Mode: 0o755}, lib(interp), lib("/lib/x86_64-linux-gnu/libc.so.6"),
		}},
		wantErr: []string{"/m is dynamically linked but the image lacks libevent-2.1.so.7:"},
	}, {
		name: "a library outside the library directories",
		img: Image{Ref: "opkit.dev/x:dev", Files: []File{
			{Path: "/m", Data: dynamic, Mode: 0o755}, lib(interp), lib("/lib/x86_64-linux-gnu/libc.so.6"), lib("/opt/libevent-2.1.so.7"),
		}},
		wantErr: []string{"lacks libevent-2.1.so.7:"},
	}, {
		name: "interpreter and libraries included",
		img: Image{Ref: "opkit.dev/x:dev", Files: []File{
			{Path: "/usr/local/bin/memcached", Source: src, Mode: 0o755},
			lib(interp), lib("/lib/x86_64-linux-gnu/libc.so.6"), lib("/usr/lib/x86_64-linux-gnu/libevent-2.1.so.7"),
		}},
	}, {
		name:    "relative path",
		img:     Image{Ref: "opkit.dev/x:dev", Files: []File{{Path: "manager", Data: []byte{}}}},
		wantErr: []string{`"manager" must be absolute`},
	}, {
		name:    "listed twice",
		img:     Image{Ref: "opkit.dev/x:dev", Files: []File{{Path: "/a", Data: []byte{}}, {Path: "/a", Data: []byte{}}}},
		wantErr: []string{"/a is listed twice"},
	}, {
		name:    "file under a file",
		img:     Image{Ref: "opkit.dev/x:dev", Files: []File{{Path: "/a", Data: []byte{}}, {Path: "/a/b", Data: []byte{}}}},
		wantErr: []string{"/a is a file but /a/b is under it"},
	}, {
		name:    "missing source",
		img:     Image{Ref: "opkit.dev/x:dev", Files: []File{{Path: "/a", Source: "/nonexistent/a"}}},
		wantErr: []string{"/nonexistent/a"},
	}, {
		name:    "no tag",
		img:     Image{Ref: "opkit.dev/x", Files: []File{{Path: "/a", Data: []byte{}}}},
		wantErr: []string{"has no tag"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "image.tar")
			err := Write(tt.img, file)
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Write: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Write succeeded, want an error containing %q", tt.wantErr)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Write error %q does not contain %q", err, want)
				}
			}
			if _, statErr := os.Stat(file); !errors.Is(statErr, fs.ErrNotExist) {
				t.Errorf("a failed Write left %s behind (%v)", file, statErr)
			}
		})
	}
}

// TestGoBuildIsStatic builds a program as the catalog builds the Go
// images, and checks that it needs nothing from a scratch image.
func TestGoBuildIsStatic(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"go.mod":  "module example.com/hello\n\ngo 1.26\n",
		"main.go": "package main\n\nimport \"os\"\n\nfunc main() { os.Exit(0) }\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "hello")
	if err := goBuild(t.Context(), dir, ".", out, runtime.GOARCH); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l, ok, err := readLinking(f)
	if err != nil || !ok {
		t.Fatalf("readLinking(%s) = %v, %v; want an ELF file", out, ok, err)
	}
	if !l.static() {
		t.Errorf("%s built with CGO_ENABLED=0 is not static: %+v", out, l)
	}
	if err := Write(Image{Ref: "opkit.dev/hello:dev", Files: []File{{Path: "/hello", Source: out, Mode: 0o755}}},
		filepath.Join(dir, "hello.tar")); err != nil {
		t.Errorf("Write of a static binary alone: %v", err)
	}
}

func TestReadLinkingOfNonELF(t *testing.T) {
	for _, content := range []string{"", "\x7fE", "#!/bin/sh\n"} {
		if _, ok, err := readLinking(strings.NewReader(content)); ok || err != nil {
			t.Errorf("readLinking(%q) = %v, %v; want not ELF", content, ok, err)
		}
	}
}

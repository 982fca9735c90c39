package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one entry of an image's single layer.
type File struct {
	// Path is the absolute path in the image, for example /manager.
	Path string
	// Source is the file on this machine whose content is copied
	// (symbolic links are followed). When empty, Data is the content.
	Source string
	// Data is the content when Source is empty.
	Data []byte
	// Mode is the entry's permission bits (0o755 for an executable),
	// plus fs.ModeDir for a directory (then Source and Data are unused)
	// and fs.ModeSticky if wanted (/tmp: fs.ModeDir|fs.ModeSticky|0o777).
	Mode fs.FileMode
	// UID and GID own the entry; 0:0 (root) unless set, for example to
	// a directory the image's non-root user writes.
	UID, GID int
}

// Config is the part of an image's runtime configuration we set. Anything
// else (exposed ports, volumes) is left empty.
type Config struct {
	// Entrypoint and Cmd are the process, as in a Dockerfile. A relative
	// Entrypoint[0] is looked up in the PATH of Env.
	Entrypoint, Cmd []string
	// User is "uid:gid". Keep it numeric: the kubelet can only check
	// runAsNonRoot against a numeric user. Empty means root.
	User string
	// Env is KEY=VALUE pairs.
	Env []string
	// WorkingDir is the process's working directory ("/" when empty).
	WorkingDir string
	// Labels are the image's labels.
	Labels map[string]string
}

// Image is what Write turns into a docker-archive tarball: one tar layer on
// an empty base.
type Image struct {
	// Ref is the image's name and tag. Write stores it fully normalized,
	// as containerd's CRI looks images up (see Normalize).
	Ref string
	// Files are the layer's entries. Their parent directories are added
	// (0o755) unless listed.
	Files []File
	// Config is the runtime configuration.
	Config Config
	// Arch is the GOARCH of the image's binaries; empty means this
	// machine's.
	Arch string
}

// epoch is the modification time of every layer entry and the image's
// creation time, so that the same inputs give the same image ID.
var epoch = time.Unix(0, 0).UTC()

// Normalize returns ref fully qualified as containerd names images:
// registry, repository path (with library/ for official Docker Hub images)
// and tag, for example memcached:1.6 -> docker.io/library/memcached:1.6.
// A reference without a tag or with a digest is rejected: the kubelet
// pulls IfNotPresent by the exact tag the pod names.
func Normalize(ref string) (string, error) {
	if strings.Contains(ref, "@") {
		return "", fmt.Errorf("image %q: a digest reference cannot be loaded as a tag; name it repository:tag", ref)
	}
	tag, err := name.NewTag(ref, name.WithDefaultTag(""))
	if err != nil {
		return "", fmt.Errorf("image %q: %w", ref, err)
	}
	if tag.TagStr() == "" {
		return "", fmt.Errorf("image %q has no tag; name it repository:tag (for example %s:dev)", ref, ref)
	}
	registry := tag.RegistryStr()
	if registry == name.DefaultRegistry { // index.docker.io
		registry = "docker.io"
	}
	return registry + "/" + tag.RepositoryStr() + ":" + tag.TagStr(), nil
}

// Write builds img and writes it to file as a docker-archive tarball (what
// `docker save` writes; `ctr images import` and `kind load image-archive`
// read it). The file is replaced only once complete. It refuses a
// dynamically linked ELF executable whose interpreter or libraries are not
// in the image.
func Write(img Image, file string) error {
	tag, image, err := img.build()
	if err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, image); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("image %s: writing %s: %w", tag, file, err)
	}
	return os.Rename(tmp, file)
}

// build returns img as a v1.Image and its normalized tag.
func (img Image) build() (name.Tag, v1.Image, error) {
	ref, err := Normalize(img.Ref)
	if err != nil {
		return name.Tag{}, nil, err
	}
	// name.Tag keeps the string it was parsed from for manifest.json's
	// RepoTags: the normalized name, not go-containerregistry's
	// index.docker.io spelling.
	tag, err := name.NewTag(ref)
	if err != nil {
		return name.Tag{}, nil, fmt.Errorf("image %s: %w", ref, err)
	}
	fail := func(err error) (name.Tag, v1.Image, error) {
		return name.Tag{}, nil, fmt.Errorf("image %s: %w", ref, err)
	}
	entries, err := layerEntries(img.Files)
	if err != nil {
		return fail(err)
	}
	if err := checkLinking(entries); err != nil {
		return fail(err)
	}
	var layerTar bytes.Buffer
	if err := writeLayer(&layerTar, entries); err != nil {
		return fail(err)
	}
	layerBytes := layerTar.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	}, tarball.WithCompressedCaching)
	if err != nil {
		return fail(fmt.Errorf("layer: %w", err))
	}
	image, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "opkit hack/images"},
	})
	if err != nil {
		return fail(err)
	}
	cfg, err := image.ConfigFile()
	if err != nil {
		return fail(err)
	}
	cfg = cfg.DeepCopy()
	cfg.Created = v1.Time{Time: epoch}
	cfg.OS = "linux"
	cfg.Architecture = img.arch()
	cfg.Config = v1.Config{
		Entrypoint: img.Config.Entrypoint,
		Cmd:        img.Config.Cmd,
		User:       img.Config.User,
		Env:        img.Config.Env,
		WorkingDir: img.Config.WorkingDir,
		Labels:     img.Config.Labels,
	}
	if image, err = mutate.ConfigFile(image, cfg); err != nil {
		return fail(err)
	}
	return tag, image, nil
}

func (img Image) arch() string {
	if img.Arch == "" {
		return runtime.GOARCH
	}
	return img.Arch
}

// entry is a File with its parents resolved, in layer order.
type entry struct {
	File
	// size is the content's size (regular files).
	size int64
}

func (e entry) isDir() bool { return e.Mode.IsDir() }

// open returns the entry's content.
func (e entry) open() (io.ReadCloser, error) {
	if e.Source == "" {
		return io.NopCloser(bytes.NewReader(e.Data)), nil
	}
	return os.Open(e.Source)
}

// layerEntries validates files and returns them with their missing parent
// directories, sorted by path (parents first).
func layerEntries(files []File) ([]entry, error) {
	byPath := map[string]entry{}
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return nil, fmt.Errorf("file path %q must be absolute and clean, for example /usr/local/bin/etcd", f.Path)
		}
		if _, dup := byPath[f.Path]; dup {
			return nil, fmt.Errorf("%s is listed twice", f.Path)
		}
		if f.Mode&^(fs.ModeDir|fs.ModeSticky|fs.ModePerm) != 0 {
			return nil, fmt.Errorf("%s: mode %v: only permission bits, fs.ModeDir and fs.ModeSticky are supported", f.Path, f.Mode)
		}
		e := entry{File: f}
		if !f.Mode.IsDir() {
			if f.Source != "" && f.Data != nil {
				return nil, fmt.Errorf("%s: set Source or Data, not both", f.Path)
			}
			e.size = int64(len(f.Data))
			if f.Source != "" {
				st, err := os.Stat(f.Source)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", f.Path, err)
				}
				if !st.Mode().IsRegular() {
					return nil, fmt.Errorf("%s: source %s is not a regular file", f.Path, f.Source)
				}
				e.size = st.Size()
			}
		}
		byPath[f.Path] = e
	}
	for p := range byPath {
		for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
			if parent, ok := byPath[dir]; !ok {
				byPath[dir] = entry{File: File{Path: dir, Mode: fs.ModeDir | 0o755}}
			} else if !parent.isDir() {
				return nil, fmt.Errorf("%s is a file but %s is under it", dir, p)
			}
		}
	}
	entries := make([]entry, 0, len(byPath))
	for _, e := range byPath {
		entries = append(entries, e)
	}
	// Sorting by path puts every directory before its contents.
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.Path, b.Path) })
	return entries, nil
}

// writeLayer writes entries as an uncompressed layer tar.
func writeLayer(w io.Writer, entries []entry) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		hdr := &tar.Header{
			Name:    strings.TrimPrefix(e.Path, "/"),
			Mode:    int64(e.Mode.Perm()),
			Uid:     e.UID,
			Gid:     e.GID,
			ModTime: epoch,
			Format:  tar.FormatPAX,
		}
		if e.Mode&fs.ModeSticky != 0 {
			hdr.Mode |= 0o1000 // c_ISVTX
		}
		if e.isDir() {
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
		} else {
			hdr.Typeflag = tar.TypeReg
			hdr.Size = e.size
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", e.Path, err)
		}
		if e.isDir() {
			continue
		}
		if err := copyContent(tw, e); err != nil {
			return err
		}
	}
	return tw.Close()
}

func copyContent(w io.Writer, e entry) error {
	r, err := e.open()
	if err != nil {
		return fmt.Errorf("%s: %w", e.Path, err)
	}
	defer r.Close()
	n, err := io.Copy(w, r)
	if err != nil {
		return fmt.Errorf("%s: copying %s: %w", e.Path, e.Source, err)
	}
	if n != e.size {
		return errors.New(e.Path + ": " + e.Source + " changed size while being copied")
	}
	return nil
}

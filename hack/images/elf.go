package main

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// linking is what an ELF file needs from the image to run.
type linking struct {
	// interpreter is the PT_INTERP path (the dynamic loader), empty for a
	// statically linked executable or a library.
	interpreter string
	// needed are the DT_NEEDED sonames, searched in the standard library
	// directories and runpath.
	needed []string
	// runpath are the DT_RUNPATH and DT_RPATH directories.
	runpath []string
}

// static reports whether the file runs without anything else in the
// image: no ELF interpreter and no shared libraries.
func (l linking) static() bool { return l.interpreter == "" && len(l.needed) == 0 }

// readLinking returns the linking of the ELF file in r, and ok false when
// r is not an ELF file.
func readLinking(r io.ReaderAt) (l linking, ok bool, err error) {
	magic := make([]byte, len(elf.ELFMAG))
	// A read error here means a file shorter than the magic: not ELF.
	if n, _ := r.ReadAt(magic, 0); n < len(magic) || string(magic) != elf.ELFMAG {
		return linking{}, false, nil
	}
	f, err := elf.NewFile(r)
	if err != nil {
		return linking{}, true, err
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return linking{}, true, fmt.Errorf("reading PT_INTERP: %w", err)
		}
		l.interpreter = string(bytes.TrimRight(b, "\x00"))
	}
	if l.needed, err = f.ImportedLibraries(); err != nil {
		return linking{}, true, fmt.Errorf("reading DT_NEEDED: %w", err)
	}
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		paths, err := f.DynString(tag)
		if err != nil {
			return linking{}, true, fmt.Errorf("reading %v: %w", tag, err)
		}
		for _, p := range paths {
			l.runpath = append(l.runpath, strings.Split(p, ":")...)
		}
	}
	return l, true, nil
}

// fileLinking is readLinking of an image entry's content.
func fileLinking(e entry) (linking, bool, error) {
	if e.Source == "" {
		return readLinking(bytes.NewReader(e.Data))
	}
	f, err := os.Open(e.Source)
	if err != nil {
		return linking{}, false, err
	}
	defer f.Close()
	return readLinking(f)
}

// isLibDir reports whether dir is one the dynamic loader searches by
// default (glibc's trusted directories, multiarch ones included).
func isLibDir(dir string) bool {
	switch dir {
	case "/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib":
		return true
	}
	parent := path.Dir(dir)
	return (parent == "/lib" || parent == "/usr/lib") && strings.Contains(path.Base(dir), "-linux-")
}

// checkLinking refuses ELF files that would not start in the image: a
// dynamically linked one whose interpreter or libraries are missing. A
// scratch image has no C library, so its binaries must be static.
func checkLinking(entries []entry) error {
	files := map[string]bool{}
	for _, e := range entries {
		if !e.isDir() {
			files[e.Path] = true
		}
	}
	var errs []error
	for _, e := range entries {
		if e.isDir() {
			continue
		}
		l, ok, err := fileLinking(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", e.Path, err))
			continue
		}
		if !ok || l.static() {
			continue
		}
		var missing []string
		if l.interpreter != "" && !files[l.interpreter] {
			missing = append(missing, "ELF interpreter "+l.interpreter)
		}
		for _, lib := range l.needed {
			if !hasLibrary(files, lib, l.runpath, path.Dir(e.Path)) {
				missing = append(missing, lib)
			}
		}
		if len(missing) == 0 {
			continue
		}
		from := ""
		if e.Source != "" {
			from = " (from " + e.Source + ")"
		}
		errs = append(errs, fmt.Errorf("%s%s is dynamically linked but the image lacks %s: "+
			"build it statically (for Go, CGO_ENABLED=0), or add its ELF interpreter and every library `ldd` lists for it to the image",
			e.Path, from, strings.Join(missing, ", ")))
	}
	return errors.Join(errs...)
}

// hasLibrary reports whether the soname lib is in files, in a standard
// library directory or in runpath ($ORIGIN being origin).
func hasLibrary(files map[string]bool, lib string, runpath []string, origin string) bool {
	if strings.Contains(lib, "/") {
		return files[path.Clean(lib)]
	}
	for _, dir := range runpath {
		dir = strings.NewReplacer("$ORIGIN", origin, "${ORIGIN}", origin).Replace(dir)
		if files[path.Join(dir, lib)] {
			return true
		}
	}
	for f := range files {
		if path.Base(f) == lib && isLibDir(path.Dir(f)) {
			return true
		}
	}
	return false
}

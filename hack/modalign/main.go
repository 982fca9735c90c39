// Command modalign fails when modules of this repository that are built
// on one machine select different versions of a dependency they all
// compile.
//
// The Go build cache keys a compiled package by its source and by its
// dependencies' compiled packages. When two of our modules compile the
// same dependency at different versions, a cold cache (a fresh CI
// machine) compiles it, and every package above it, once for each: a
// single differing golang.org/x module costs minutes of CI. The modules of
// one group are meant to select the same version of every module they
// both compile; this command names each one that does not, with the
// versions and the modules selecting them.
//
// Each argument is a module directory relative to -root, or the root
// module with another go.mod (a path ending in .mod, used with -modfile):
//
//	cd hack && go run ./modalign -root .. e2e examples/memcached examples/etcd hack internal/localcluster compat/controller-runtime-v0.25.mod
//
// make verify runs it for each group of modules (Makefile, ALIGNED_*).
// Only what go list -deps -test reports is compared: a module in a build
// list that none of a module's packages imports is never compiled, and
// modules replaced by a directory (ours) are built from their files.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/semver"
)

func main() {
	root := flag.String("root", ".", "the repository's root directory; module arguments are relative to it")
	flag.Parse()
	if flag.NArg() < 2 {
		fmt.Fprintln(os.Stderr, "usage: modalign [-root DIR] MODULE MODULE...  (a directory, or a go.mod file used with -modfile)")
		os.Exit(2)
	}
	var sel []selection
	for _, m := range flag.Args() {
		versions, err := listModule(*root, m)
		if err != nil {
			fmt.Fprintf(os.Stderr, "modalign: %s: %v\n", m, err)
			os.Exit(1)
		}
		sel = append(sel, selection{module: m, versions: versions})
	}
	bad := mismatches(sel)
	for _, m := range bad {
		fmt.Fprintln(os.Stderr, m)
	}
	if len(bad) > 0 {
		fmt.Fprintf(os.Stderr, "modalign: %d dependencies are compiled at different versions by %s: require the same version in each, or they are compiled once per version on a cold build cache\n",
			len(bad), strings.Join(flag.Args(), ", "))
		os.Exit(1)
	}
}

// selection is the version of each module whose packages one of our
// modules compiles (its tests included).
type selection struct {
	module   string            // as given on the command line
	versions map[string]string // module path -> version
}

// listModule runs go list -deps -test in module m (a directory under
// root, or a go.mod under root used with -modfile from root).
func listModule(root, m string) (map[string]string, error) {
	dir, args := filepath.Join(root, m), []string{"list", "-deps", "-test", "-json=Module"}
	if strings.HasSuffix(m, ".mod") {
		dir, args = root, append(args, "-modfile="+m)
	}
	cmd := exec.Command("go", append(args, "./...")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return parseList(bytes.NewReader(out))
}

// listed is what parseList reads of go list's JSON.
type listed struct {
	Module *struct {
		Path, Version string
		Main          bool
		Replace       *struct{ Path, Version string }
	}
}

// parseList reads the output of go list -json=Module: the version each
// module's packages are compiled at, leaving out std, the main module and
// modules replaced by a directory.
func parseList(r io.Reader) (map[string]string, error) {
	versions := map[string]string{}
	dec := json.NewDecoder(r)
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return versions, nil
		} else if err != nil {
			return nil, fmt.Errorf("reading go list's output: %w", err)
		}
		m := p.Module
		if m == nil || m.Main {
			continue
		}
		v := m.Version
		if m.Replace != nil {
			if m.Replace.Version == "" {
				continue // a directory
			}
			v = m.Replace.Version
		}
		if had, ok := versions[m.Path]; ok && had != v {
			return nil, fmt.Errorf("go list reports %s at %s and at %s", m.Path, had, v)
		}
		versions[m.Path] = v
	}
}

// mismatch is a module compiled at more than one version.
type mismatch struct {
	path string
	by   map[string][]string // version -> our modules selecting it
}

// versions are the versions selected, newest first: the first is the one
// to require everywhere.
func (m mismatch) versions() []string {
	return slices.SortedFunc(maps.Keys(m.by), func(a, b string) int { return semver.Compare(b, a) })
}

// String says which modules select which version, and what to run.
func (m mismatch) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:", m.path)
	versions := m.versions()
	for i, v := range versions {
		sep := ";"
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(&b, "%s %s in %s", sep, v, strings.Join(m.by[v], ", "))
	}
	fmt.Fprintf(&b, " (go get %s@%s in the others)", m.path, versions[0])
	return b.String()
}

// mismatches lists, by module path, every module that two or more of sel
// compile at different versions.
func mismatches(sel []selection) []mismatch {
	by := map[string]map[string][]string{} // path -> version -> modules
	for _, s := range sel {
		for path, v := range s.versions {
			if by[path] == nil {
				by[path] = map[string][]string{}
			}
			by[path][v] = append(by[path][v], s.module)
		}
	}
	var out []mismatch
	for _, path := range slices.Sorted(maps.Keys(by)) {
		if len(by[path]) < 2 {
			continue
		}
		out = append(out, mismatch{path: path, by: by[path]})
	}
	return out
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"sigs.k8s.io/yaml"

	"github.com/opkit-dev/opkit/internal/repo"
)

// Release is one release of the repository at Root.
type Release struct {
	// Root is the repository's root.
	Root string
	// Version is vMAJOR.MINOR.PATCH (a pre-release suffix allowed).
	Version string
	// Images are the operators' images for Version by digest, by
	// operator name (memcached-operator: REGISTRY/memcached-operator@sha256:...).
	Images map[string]string
	// Out is where the release's files go.
	Out string
	// Date is the release's date in the CHANGELOG.
	Date time.Time
	// DryRun leaves the tree as it is.
	DryRun bool
}

// ParseDigests reads hack/images -digests output: "NAME REF@DIGEST" lines.
func ParseDigests(b []byte) (map[string]string, error) {
	images := map[string]string{}
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: %q: want NAME REF@DIGEST", i+1, line)
		}
		if _, err := name.NewDigest(fields[1]); err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		images[fields[0]] = fields[1]
	}
	return images, nil
}

// Run writes the release's files and, unless DryRun, changes the tree;
// it returns the plan (also written to Out/RELEASE.txt).
func (r Release) Run(ctx context.Context) (string, error) {
	newChangelog, section, err := r.changelog()
	if err != nil {
		return "", err
	}
	for _, op := range repo.Operators {
		if r.Images[op.Name] == "" {
			return "", fmt.Errorf("no image of %s by digest: push it first (make images-push, which make release runs)", op.Name)
		}
	}
	mods, err := libraryModules(r.Root)
	if err != nil {
		return "", err
	}
	var plan strings.Builder
	fmt.Fprintf(&plan, "opkit %s\n\nImages:\n", r.Version)
	for _, op := range repo.Operators {
		fmt.Fprintf(&plan, "  %s\n", r.Images[op.Name])
	}
	if err := os.MkdirAll(r.Out, 0o755); err != nil {
		return "", err
	}
	plan.WriteString("\nFiles:\n")
	for _, op := range repo.Operators {
		files, err := r.operatorFiles(ctx, op)
		if err != nil {
			return "", fmt.Errorf("%s: %w", op.Name, err)
		}
		for _, f := range files {
			fmt.Fprintf(&plan, "  %s\n", f)
		}
	}
	if err := os.WriteFile(filepath.Join(r.Out, "CHANGELOG.md"), []byte(section), 0o644); err != nil {
		return "", err
	}
	fmt.Fprintf(&plan, "  %s\n", filepath.Join(r.Out, "CHANGELOG.md"))

	plan.WriteString("\nIn the tree:\n  CHANGELOG.md: Unreleased becomes " + r.Version + "\n")
	tags := []string{r.Version}
	for _, m := range mods {
		fmt.Fprintf(&plan, "  %s/go.mod: require %s %s (now %s)\n", m.dir, repo.Module, r.Version, m.requires)
		tags = append(tags, m.dir+"/"+r.Version)
	}
	if r.DryRun {
		plan.WriteString("  (dry run: nothing changed; make release VERSION=" + r.Version + " DRY_RUN=0 pushes the images and makes these changes)\n")
	} else {
		if err := os.WriteFile(filepath.Join(r.Root, "CHANGELOG.md"), []byte(newChangelog), 0o644); err != nil {
			return "", err
		}
		for _, m := range mods {
			if err := requireRoot(filepath.Join(r.Root, m.dir, "go.mod"), r.Version); err != nil {
				return "", err
			}
		}
	}
	plan.WriteString("\nThen commit those changes and push one tag per module:\n")
	for _, t := range tags {
		fmt.Fprintf(&plan, "  git tag -a %s -m 'opkit %s'\n", t, r.Version)
	}
	fmt.Fprintf(&plan, "  git push origin %s\n", strings.Join(tags, " "))
	out := plan.String()
	return out, os.WriteFile(filepath.Join(r.Out, "RELEASE.txt"), []byte(out), 0o644)
}

// Check returns what makes Version unreleasable before anything is built:
// not vMAJOR.MINOR.PATCH, already in the CHANGELOG, or nothing in its
// Unreleased section.
func (r Release) Check() error {
	_, _, err := r.changelog()
	return err
}

// changelog checks Version and returns releaseChangelog of the tree's
// CHANGELOG.md.
func (r Release) changelog() (newChangelog, section string, err error) {
	if !semver.IsValid(r.Version) || semver.Canonical(r.Version) != r.Version || semver.Build(r.Version) != "" {
		return "", "", fmt.Errorf("VERSION %q: want vMAJOR.MINOR.PATCH, for example v0.1.0", r.Version)
	}
	b, err := os.ReadFile(filepath.Join(r.Root, "CHANGELOG.md"))
	if err != nil {
		return "", "", err
	}
	if newChangelog, section, err = releaseChangelog(string(b), r.Version, r.Date); err != nil {
		return "", "", fmt.Errorf("CHANGELOG.md: %w", err)
	}
	return newChangelog, section, nil
}

// operatorFiles writes op's install-VERSION.yaml and chart package, both
// running its image by digest, and returns their paths.
func (r Release) operatorFiles(ctx context.Context, op repo.Operator) ([]string, error) {
	img := r.Images[op.Name]
	dir := filepath.Join(r.Out, op.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	installer := filepath.Join(dir, "install-"+r.Version+".yaml")
	cmd := exec.CommandContext(ctx, "make", "-s", "-C", filepath.Join(r.Root, "examples", op.Dir), "build-installer", "IMG="+img, "INSTALLER="+installer)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("make build-installer: %w\n%s", err, out)
	}
	b, err := os.ReadFile(installer)
	if err != nil {
		return nil, err
	}
	if !bytes.Contains(b, []byte("image: "+img+"\n")) {
		return nil, fmt.Errorf("%s does not run %s", installer, img)
	}
	pkg, err := packageChart(filepath.Join(r.Root, "examples", op.Dir, "dist", "chart"), r.Version, img, dir)
	if err != nil {
		return nil, err
	}
	return []string{installer, pkg}, nil
}

// packageChart writes the chart in dir as a package into out, versioned
// version (chart and app), its default image img (by digest).
func packageChart(dir, version, img, out string) (string, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return "", err
	}
	ch.Metadata.Version, ch.Metadata.AppVersion = version, version
	i := slices.IndexFunc(ch.Raw, func(f *common.File) bool { return f.Name == chartutil.ValuesfileName })
	if i < 0 {
		return "", fmt.Errorf("%s has no %s", dir, chartutil.ValuesfileName)
	}
	// The raw file is what the package holds, comments and all: edit its
	// one repository line, then check the result parses to img.
	values, n := pinImage(string(ch.Raw[i].Data), img)
	var parsed struct {
		Manager struct {
			Image struct{ Repository, Tag string }
		}
	}
	if err := yaml.Unmarshal([]byte(values), &parsed); err != nil {
		return "", fmt.Errorf("%s: %w", chartutil.ValuesfileName, err)
	}
	if got := parsed.Manager.Image; n != 1 || got.Repository != img || got.Tag != "" {
		return "", fmt.Errorf(`%s: want one "    repository:" line under manager.image, with tag "" (found %d; pinned: %+v)`, chartutil.ValuesfileName, n, got)
	}
	ch.Raw[i] = &common.File{Name: chartutil.ValuesfileName, Data: []byte(values), ModTime: ch.Raw[i].ModTime}
	return chartutil.Save(ch, out)
}

// pinImage returns values with the repository line of manager.image set
// to img, and how many such lines it found.
func pinImage(values, img string) (string, int) {
	lines := strings.SplitAfter(values, "\n")
	var top, second string
	n := 0
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "#") || strings.TrimSpace(l) == "":
		case !strings.HasPrefix(l, " "):
			top, second = l, ""
		case strings.HasPrefix(l, "  ") && !strings.HasPrefix(l, "   "):
			second = l
		case top == "manager:\n" && second == "  image:\n" && strings.HasPrefix(l, "    repository: "):
			lines[i] = "    repository: " + img + "\n"
			n++
		}
	}
	return strings.Join(lines, ""), n
}

// module is a library sub-module and the version of the root module it
// requires.
type module struct {
	dir, requires string
}

// libraryModules returns the sub-modules users go get (not examples, e2e,
// hack or internal), which must require the root module at a released
// version: a replace directive does not apply to their users.
func libraryModules(root string) ([]module, error) {
	var mods []module
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			top, _, _ := strings.Cut(rel, string(filepath.Separator))
			if strings.HasPrefix(d.Name(), ".") && rel != "." || slices.Contains([]string{"examples", "e2e", "hack", "internal", "docs", "bin"}, top) || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "go.mod" || rel == "go.mod" {
			return nil
		}
		f, err := parseMod(path)
		if err != nil {
			return err
		}
		for _, req := range f.Require {
			if req.Mod.Path == repo.Module {
				mods = append(mods, module{dir: filepath.ToSlash(filepath.Dir(rel)), requires: req.Mod.Version})
				return nil
			}
		}
		return fmt.Errorf("%s does not require %s", rel, repo.Module)
	})
	return mods, err
}

// requireRoot makes the go.mod at path require the root module at version.
func requireRoot(path, version string) error {
	f, err := parseMod(path)
	if err != nil {
		return err
	}
	if err := f.AddRequire(repo.Module, version); err != nil {
		return err
	}
	out, err := f.Format()
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

func parseMod(path string) (*modfile.File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return modfile.Parse(path, b, nil)
}

// releaseChangelog returns the CHANGELOG with its Unreleased section made
// version's (under a new, empty Unreleased), and that section alone.
func releaseChangelog(changelog, version string, date time.Time) (string, string, error) {
	const unreleased = "\n## Unreleased\n"
	start := strings.Index(changelog, unreleased)
	if start < 0 {
		return "", "", errors.New(`no "## Unreleased" section`)
	}
	if strings.Contains(changelog, "\n## "+version+" ") {
		return "", "", fmt.Errorf("%s is already released", version)
	}
	body := changelog[start+len(unreleased):]
	end := strings.Index(body, "\n## ")
	if end < 0 {
		end = len(body)
	}
	if strings.TrimSpace(body[:end]) == "" {
		return "", "", errors.New("the Unreleased section is empty: nothing to release")
	}
	heading := "## " + version + " (" + date.Format(time.DateOnly) + ")\n"
	section := "# opkit " + version + "\n\n" + heading + body[:end]
	if !strings.HasSuffix(section, "\n") {
		section += "\n"
	}
	return changelog[:start] + unreleased + "\n" + heading + body, section, nil
}

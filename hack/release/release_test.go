package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/chart/v2/loader"

	"github.com/opkit-dev/opkit/internal/repo"
)

// TestDryRun releases this tree as v0.1.0 in a dry run: each operator's
// installer and chart package run its image by digest, the CHANGELOG
// section and the plan are written, and nothing in the tree changes.
func TestDryRun(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	images, err := ParseDigests([]byte(
		"memcached-operator registry.example.com/opkit/memcached-operator@sha256:" + strings.Repeat("a", 64) + "\n" +
			"etcd-operator registry.example.com/opkit/etcd-operator@sha256:" + strings.Repeat("b", 64) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	tree := map[string][]byte{}
	mods, err := libraryModules(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append([]string{"CHANGELOG.md"}, modPaths(mods)...) {
		if tree[f], err = os.ReadFile(filepath.Join(root, f)); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	r := Release{Root: root, Version: "v0.1.0", Images: images, Out: out, DryRun: true,
		Date: time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)}
	plan, err := r.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	for _, op := range repo.Operators {
		img := images[op.Name]
		installer, err := os.ReadFile(filepath.Join(out, op.Name, "install-v0.1.0.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(installer), "image: "+img+"\n") {
			t.Errorf("%s's installer does not run %s", op.Name, img)
		}
		ch, err := loader.Load(filepath.Join(out, op.Name, op.Name+"-v0.1.0.tgz"))
		if err != nil {
			t.Fatal(err)
		}
		if ch.Metadata.Version != "v0.1.0" || ch.Metadata.AppVersion != "v0.1.0" {
			t.Errorf("%s chart: version %q, appVersion %q; want v0.1.0 both", op.Name, ch.Metadata.Version, ch.Metadata.AppVersion)
		}
		image, _ := ch.Values["manager"].(map[string]any)["image"].(map[string]any)
		if image["repository"] != img || image["tag"] != "" {
			t.Errorf("%s chart: manager.image %v, want repository %s and no tag", op.Name, image, img)
		}
		if !strings.Contains(plan, img) || !strings.Contains(plan, filepath.Join(out, op.Name, op.Name+"-v0.1.0.tgz")) {
			t.Errorf("the plan names neither %s nor its chart package:\n%s", img, plan)
		}
	}
	section, err := os.ReadFile(filepath.Join(out, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(section), "# opkit v0.1.0\n\n## v0.1.0 (2026-11-28)\n") {
		t.Errorf("CHANGELOG section starts %q", strings.SplitN(string(section), "\n", 4)[:3])
	}
	for _, want := range []string{
		"CHANGELOG.md: Unreleased becomes v0.1.0",
		"backup/s3/go.mod: require github.com/opkit-dev/opkit v0.1.0",
		"git tag -a v0.1.0 -m 'opkit v0.1.0'",
		"git tag -a backup/s3/v0.1.0 -m 'opkit v0.1.0'",
		"git tag -a statusutil/kstatustest/v0.1.0",
		"git push origin v0.1.0 ",
		"(dry run: nothing changed;",
	} {
		if !strings.Contains(plan, want) {
			t.Errorf("the plan lacks %q:\n%s", want, plan)
		}
	}
	if written, err := os.ReadFile(filepath.Join(out, "RELEASE.txt")); err != nil || string(written) != plan {
		t.Errorf("RELEASE.txt is not the plan (%v)", err)
	}
	for f, before := range tree {
		if after, err := os.ReadFile(filepath.Join(root, f)); err != nil || string(after) != string(before) {
			t.Errorf("a dry run changed %s (%v)", f, err)
		}
	}
}

func modPaths(mods []module) []string {
	var paths []string
	for _, m := range mods {
		paths = append(paths, filepath.Join(m.dir, "go.mod"))
	}
	return paths
}

func TestRunRefusesBadInput(t *testing.T) {
	img := "r.example/x@sha256:" + strings.Repeat("c", 64)
	all := map[string]string{"memcached-operator": img, "etcd-operator": img}
	for _, tt := range []struct {
		name, version string
		images        map[string]string
		wantErr       string
	}{
		{"no v", "0.1.0", all, "want vMAJOR.MINOR.PATCH"},
		{"short", "v0.1", all, "want vMAJOR.MINOR.PATCH"},
		{"build metadata", "v0.1.0+x", all, "want vMAJOR.MINOR.PATCH"},
		{"an operator's image missing", "v0.1.0", map[string]string{"memcached-operator": img}, "no image of etcd-operator by digest"},
		{"released before", "v0.0.9", all, "CHANGELOG.md: v0.0.9 is already released"},
	} {
		root := t.TempDir()
		if err := os.WriteFile(filepath.Join(root, "CHANGELOG.md"), []byte("# Changelog\n\n## Unreleased\n\n- a fix\n\n## v0.0.9 (2026-01-01)\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r := Release{Root: root, Version: tt.version, Images: tt.images, Out: t.TempDir()}
		if _, err := r.Run(t.Context()); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: Run error %v, want one containing %q", tt.name, err, tt.wantErr)
		}
	}
	for _, bad := range []string{"memcached-operator", "x r.example/x:v1", "a b c"} {
		if _, err := ParseDigests([]byte(bad)); err == nil {
			t.Errorf("ParseDigests(%q) succeeded", bad)
		}
	}
}

func TestReleaseChangelog(t *testing.T) {
	date := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	in := "# Changelog\n\nintro\n\n## Unreleased\n\n### Added\n\n- a thing\n\n## v0.0.9 (2026-01-01)\n\n- old\n"
	got, section, err := releaseChangelog(in, "v0.1.0", date)
	if err != nil {
		t.Fatal(err)
	}
	want := "# Changelog\n\nintro\n\n## Unreleased\n\n## v0.1.0 (2026-11-28)\n\n### Added\n\n- a thing\n\n## v0.0.9 (2026-01-01)\n\n- old\n"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CHANGELOG (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("# opkit v0.1.0\n\n## v0.1.0 (2026-11-28)\n\n### Added\n\n- a thing\n", section); diff != "" {
		t.Errorf("section (-want +got):\n%s", diff)
	}
	for _, tt := range []struct{ in, wantErr string }{
		{"# Changelog\n", "no \"## Unreleased\""},
		{"x\n## Unreleased\n\n## v0.0.9 (2026-01-01)\n", "empty: nothing to release"},
		{got, "already released"},
	} {
		if _, _, err := releaseChangelog(tt.in, "v0.1.0", date); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("releaseChangelog error %v, want one containing %q", err, tt.wantErr)
		}
	}
}

func TestRequireRoot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "go.mod")
	in := "module github.com/opkit-dev/opkit/backup/s3\n\ngo 1.26\n\nrequire github.com/opkit-dev/opkit v0.0.0-00010101000000-000000000000\n\nreplace github.com/opkit-dev/opkit => ../..\n"
	if err := os.WriteFile(path, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := requireRoot(path, "v0.1.0"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(strings.Replace(in, "v0.0.0-00010101000000-000000000000", "v0.1.0", 1), string(b)); diff != "" {
		t.Errorf("go.mod (-want +got):\n%s", diff)
	}
}

func TestPinImage(t *testing.T) {
	values := "# c\nmanager:\n  replicas: 2\n  image:\n    # the image\n    repository: opkit.dev/x\n    tag: \"\"\n  other:\n    repository: z\nother:\n  image:\n    repository: y\n"
	got, n := pinImage(values, "r.example/x@sha256:abc")
	want := strings.Replace(values, "repository: opkit.dev/x", "repository: r.example/x@sha256:abc", 1)
	if diff := cmp.Diff(want, got); diff != "" || n != 1 {
		t.Errorf("pinImage: %d lines (-want +got):\n%s", n, diff)
	}
}

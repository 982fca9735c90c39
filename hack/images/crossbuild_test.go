package main

import (
	"debug/elf"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// TestCrossModule builds a module served by a file proxy for an arch other
// than this machine's, as versitygw is built for arm64.
func TestCrossModule(t *testing.T) {
	proxy, cache := t.TempDir(), t.TempDir()
	mod := module.Version{Path: "example.com/hello", Version: "v1.0.0"}
	files := map[string]string{
		"go.mod":            "module example.com/hello\n\ngo 1.22\n",
		"cmd/hello/main.go": "package main\n\nfunc main() { println(\"hello\") }\n",
	}
	src := t.TempDir()
	for name, content := range files {
		write(t, filepath.Join(src, name), content)
	}
	dir := filepath.Join(proxy, "example.com", "hello", "@v")
	write(t, filepath.Join(dir, "list"), mod.Version+"\n")
	write(t, filepath.Join(dir, mod.Version+".info"), `{"Version":"v1.0.0"}`)
	write(t, filepath.Join(dir, mod.Version+".mod"), files["go.mod"])
	zf, err := os.Create(filepath.Join(dir, mod.Version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	if err := modzip.CreateFromDir(zf, mod, src); err != nil {
		t.Fatal(err)
	}
	if err := zf.Close(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOPROXY", "file://"+proxy)
	t.Setenv("GOSUMDB", "off")
	t.Setenv("GOMODCACHE", cache)
	t.Setenv("GOFLAGS", "-modcacherw") // so that t.TempDir can remove it

	for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		out := filepath.Join(t.TempDir(), "hello")
		if err := crossModule(t.Context(), mod.Path, mod.Version, "./cmd/hello", out, arch); err != nil {
			t.Fatal(err)
		}
		f, err := elf.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		if f.Machine != machine {
			t.Errorf("linux/%s: built for %v, want %v", arch, f.Machine, machine)
		}
		f.Close()
	}
	if err := crossModule(t.Context(), mod.Path, "v9.9.9", "./cmd/hello", filepath.Join(t.TempDir(), "x"), "arm64"); err == nil {
		t.Error("a version the proxy does not have built")
	}
}

// TestEtcdModulesPinEtcdVersions: every etcd image can be cross-built from
// the module hack/install-tool.sh builds it from.
func TestEtcdModulesPinEtcdVersions(t *testing.T) {
	var got []string
	for v := range etcdModules {
		got = append(got, v)
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(EtcdVersions))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("etcdModules' versions (-EtcdVersions +etcdModules):\n%s", diff)
	}
	for v, rel := range etcdModules {
		gomod, err := os.ReadFile(filepath.Join("..", "..", rel, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(gomod), "go.etcd.io/etcd/server/v3 "+v+"\n") {
			t.Errorf("%s/go.mod does not require go.etcd.io/etcd/server/v3 %s", rel, v)
		}
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

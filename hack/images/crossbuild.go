package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// etcdModules maps an etcd release to the module of hack/tools pinning it,
// the one `hack/install-tool.sh etcd-static` builds from.
var etcdModules = map[string]string{
	"v3.6.16": "hack/tools/etcd",
	"v3.5.35": "hack/tools/etcd35",
}

// crossEtcd builds etcd, etcdctl and etcdutl of version for linux/arch into
// a scratch directory, from the same pinned module and flags as
// etcd-static, and returns the directory.
func crossEtcd(ctx context.Context, e *Env, version, arch string) (string, error) {
	rel, ok := etcdModules[version]
	if !ok {
		return "", fmt.Errorf("etcd %s: no module of hack/tools pins it (etcdModules)", version)
	}
	mod := filepath.Join(e.Root, filepath.FromSlash(rel))
	gomod, err := os.ReadFile(filepath.Join(mod, "go.mod"))
	if err != nil {
		return "", err
	}
	if !strings.Contains(string(gomod), "go.etcd.io/etcd/server/v3 "+version+"\n") {
		return "", fmt.Errorf("%s/go.mod does not pin go.etcd.io/etcd/server/v3 %s", rel, version)
	}
	dir := filepath.Join(e.Tmp, "etcd-"+version+"-"+arch)
	for _, b := range []string{"etcd:server", "etcdctl:etcdctl", "etcdutl:etcdutl"} {
		name, pkg, _ := strings.Cut(b, ":")
		if err := goBuild(ctx, mod, "go.etcd.io/etcd/"+pkg+"/v3", filepath.Join(dir, name), arch); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// crossModule builds the main package pkg of module mod at version for
// linux/arch, statically, into out. It builds in the module cache's copy, as
// `go install mod@version` does, because go install refuses to cross-compile
// into GOBIN.
func crossModule(ctx context.Context, mod, version, pkg, out, arch string) error {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod+"@"+version)
	cmd.Stderr = os.Stderr
	raw, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go mod download %s@%s: %w", mod, version, err)
	}
	var dl struct{ Dir, Error string }
	if err := json.Unmarshal(raw, &dl); err != nil {
		return fmt.Errorf("go mod download %s@%s: %w", mod, version, err)
	}
	if dl.Error != "" || dl.Dir == "" {
		return fmt.Errorf("go mod download %s@%s: %q", mod, version, dl.Error)
	}
	return goBuild(ctx, dl.Dir, pkg, out, arch)
}

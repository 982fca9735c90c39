package realnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// cgroupHierarchies returns the mounted cgroup hierarchies: one per
// controller group with cgroup v1 (this VM's hybrid layout), or the one
// unified hierarchy with cgroup v2.
func cgroupHierarchies() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}
	}
	var hs []string
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range entries {
		dir := filepath.Join("/sys/fs/cgroup", e.Name())
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err == nil && e.IsDir() {
			hs = append(hs, dir)
		}
	}
	return hs
}

// makeCgroupRoot creates node n's cgroup root in every hierarchy: the
// kubelet refuses a cgroupRoot that does not exist. A new cpuset cgroup
// (v1) starts with no CPUs and no memory nodes, so it gets its parent's.
func makeCgroupRoot(n node) error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, n.cgroupRoot())
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			parent, err := os.ReadFile(filepath.Join(h, f))
			if err != nil {
				continue // not the cpuset hierarchy
			}
			if err := os.WriteFile(filepath.Join(dir, f), []byte(strings.TrimSpace(string(parent))), 0o644); err != nil {
				return fmt.Errorf("setting %s of %s: %w", f, dir, err)
			}
		}
	}
	return nil
}

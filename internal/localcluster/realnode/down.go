package realnode

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
)

// Down stops the real nodes and removes everything Up made: processes
// (daemons, containerd shims and every container process), mounts, cgroups,
// network namespaces, iptables rules (kube-proxy's and the guard chain),
// bridges, sysctls and the state directories. It is safe to run when
// nothing, or only part of it, exists: after a normal run, after an
// interrupted Up, after a SIGKILLed test.
//
// binDir must hold kube-proxy (for kube-proxy --cleanup).
func Down(ctx context.Context, binDir string) error {
	if os.Geteuid() != 0 {
		return errNotRoot
	}
	var errs []error
	// The kubelet first, so that it restarts no container while the rest
	// stops; then every daemon and shim (their command lines name the
	// state or run directory).
	if err := killAll(ctx, "--root-dir="+StateDir, 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	for _, marker := range []string{StateDir, RunDir} {
		if err := killAll(ctx, marker, 10*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if err := killCgroups(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := unmountUnder(StateDir, RunDir); err != nil {
		errs = append(errs, err)
	}
	if _, err := os.Stat(filepath.Join(binDir, "kube-proxy")); err == nil {
		if err := cleanupKubeProxy(ctx, binDir); err != nil {
			errs = append(errs, err)
		}
	}
	// removeChains also removes the guard chain (ownChain).
	if err := removeChains(); err != nil {
		errs = append(errs, err)
	}
	brs, err := bridges()
	if err != nil {
		errs = append(errs, err)
	}
	for _, br := range brs {
		if err := run(ctx, "ip", "link", "del", br); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeContainerLogLinks(); err != nil {
		errs = append(errs, err)
	}
	if err := restoreSysctls(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		for _, dir := range []string{StateDir, RunDir} {
			if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, err)
			}
			// The parent (/var/lib/opkit, /run/opkit) goes when empty.
			_ = os.Remove(filepath.Dir(dir))
		}
	}
	return errors.Join(errs...)
}

// cgroupDirs returns the cgroup directories of the nodes' pods in every
// mounted hierarchy (cgroup v1 has one per controller), deepest first.
func cgroupDirs() []string { return cgroupDirsUnder(cgroupPrefix + "*") }

// cgroupDirsUnder is cgroupDirs for the roots matching pattern in each
// hierarchy.
func cgroupDirsUnder(pattern string) []string {
	var dirs []string
	for _, h := range cgroupHierarchies() {
		roots, _ := filepath.Glob(filepath.Join(h, pattern))
		for _, root := range roots {
			_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, path)
				}
				return nil
			})
		}
	}
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	return dirs
}

// killCgroups kills every process left in the nodes' cgroups (containers
// whose shim is gone) and removes the cgroups.
func killCgroups(ctx context.Context) error {
	if err := killCgroupProcs(ctx, "the real nodes' cgroups", cgroupDirs); err != nil {
		return err
	}
	var errs []error
	for _, dir := range cgroupDirs() {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killCgroupProcs sends SIGKILL to the processes of dirs until none is
// left.
func killCgroupProcs(ctx context.Context, what string, dirs func() []string) error {
	return waitFor(ctx, 20*time.Second, "the processes in "+what+" to exit", func() error {
		var pids []int
		for _, dir := range dirs() {
			pids = append(pids, cgroupProcs(dir)...)
		}
		return killPids(pids)
	})
}

func cgroupProcs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// mountsUnder returns the mount points below any of dirs, deepest first.
func mountsUnder(dirs ...string) ([]string, error) {
	infos, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return !slices.ContainsFunc(dirs, func(d string) bool {
			return m.Mountpoint == d || strings.HasPrefix(m.Mountpoint, d+"/")
		}), false
	})
	if err != nil {
		return nil, err
	}
	var mounts []string
	for _, m := range infos {
		mounts = append(mounts, m.Mountpoint)
	}
	// Deepest first; equal paths (stacked mounts) side by side for Compact.
	slices.SortFunc(mounts, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	return slices.Compact(mounts), nil
}

// unmountUnder unmounts everything below dirs (pod volumes, overlay
// rootfs, network namespace files), deepest first, detaching busy ones.
func unmountUnder(dirs ...string) error {
	for range 5 {
		mounts, err := mountsUnder(dirs...)
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			return nil
		}
		for _, m := range mounts {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	}
	mounts, _ := mountsUnder(dirs...)
	if len(mounts) > 0 {
		return fmt.Errorf("mounts still present: %v", mounts)
	}
	return nil
}

// containerLogLinks is where the kubelet links container logs (a path it
// does not let us choose).
const containerLogLinks = "/var/log/containers"

// removeContainerLogLinks removes the kubelet's links into the nodes'
// pod log directories.
func removeContainerLogLinks() error {
	entries, err := os.ReadDir(containerLogLinks)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(containerLogLinks, e.Name())
		target, err := os.Readlink(p)
		if err == nil && strings.HasPrefix(target, StateDir+"/") {
			if err := os.Remove(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

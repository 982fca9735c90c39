package realnode

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/opkit-dev/opkit/internal/localcluster/procs"
)

// Kill stops real node i as a power loss would: its kubelet, containerd,
// provisioner, shims and every container process get SIGKILL at once. Its
// Node object, volumes, bridge and pod network namespaces stay, so the
// cluster sees a node that stopped reporting. It cannot be started again;
// Down removes what is left.
func Kill(ctx context.Context, i int) error {
	n := node{index: i}
	// The trailing slash keeps real-node-1 from matching real-node-10.
	for _, marker := range []string{n.dir() + "/", n.runDir() + "/"} {
		if err := waitFor(ctx, 20*time.Second, "the daemons of "+n.name()+" to die", func() error {
			return killPids(procs.With(marker))
		}); err != nil {
			return err
		}
	}
	return killCgroupProcs(ctx, "the cgroups of "+n.name(), func() []string {
		return cgroupDirsUnder(strings.TrimPrefix(n.cgroupRoot(), "/"))
	})
}

// killPids sends SIGKILL to pids and reports those it signalled, so that
// a waitFor loop ends once none is left.
func killPids(pids []int) error {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if len(pids) > 0 {
		return fmt.Errorf("pids %v (%s)", pids, describe(pids))
	}
	return nil
}

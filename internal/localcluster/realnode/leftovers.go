package realnode

import (
	"context"
	"os"
	"strings"

	"github.com/opkit-dev/opkit/internal/localcluster/procs"
)

// Leftovers lists what of the real nodes exists on this machine: processes,
// mounts, cgroups, iptables chains, bridges, state directories and saved
// sysctls. After Down it is empty; tests assert that.
func Leftovers(ctx context.Context) []string {
	var left []string
	for _, marker := range []string{StateDir, RunDir} {
		if pids := procs.With(marker); len(pids) > 0 {
			left = append(left, "processes: "+describe(pids))
		}
	}
	if mounts, err := mountsUnder(StateDir, RunDir); err != nil || len(mounts) > 0 {
		left = append(left, "mounts: "+strings.Join(mounts, ", "))
	}
	if dirs := cgroupDirs(); len(dirs) > 0 {
		left = append(left, "cgroups: "+strings.Join(dirs, ", "))
	}
	for name, ipt := range iptablesFamilies() {
		for _, table := range iptablesTables {
			chains, jumps, err := ownRules(ipt, table)
			if err != nil {
				left = append(left, name+" "+table+": "+err.Error())
			}
			for _, ch := range chains {
				left = append(left, name+" "+table+" chain "+ch)
			}
			for _, j := range jumps {
				left = append(left, name+" "+table+" rule "+j.rule)
			}
		}
	}
	if brs, _ := bridges(); len(brs) > 0 {
		left = append(left, "bridges: "+strings.Join(brs, ", "))
	}
	for _, dir := range []string{StateDir, RunDir} {
		if _, err := os.Stat(dir); err == nil {
			left = append(left, "directory "+dir)
		}
	}
	return left
}

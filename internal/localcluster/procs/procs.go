// Package procs finds this machine's processes by their command line. The
// local cluster's daemons (kwokctl's components, the real nodes' containerd,
// kubelets and the rest) outlive the process that started them, so that is
// how they are found again: by a path of theirs in their arguments.
package procs

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// With returns the pids of the processes, other than this one, whose
// command line contains s.
func With(s string) []int {
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Name returns the base name of pid's executable as it was started
// (argv[0]), or "" when the process is gone.
func Name(pid int) string {
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || len(cmdline) == 0 {
		return ""
	}
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	return filepath.Base(string(argv0))
}

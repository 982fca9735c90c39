package main

import (
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
)

// userHZ is the kernel's USER_HZ, the unit of utime and stime in
// /proc/<pid>/stat: 100 on every Linux architecture Go supports.
const userHZ = 100

// cpuSeconds returns the user plus system CPU time pid has used.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may contain spaces; the fields after its
	// closing parenthesis start with the state (field 3).
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q", pid, f[11], f[12])
	}
	return (utime + stime) / userHZ, nil
}

// cpuSnapshot is the CPU time used so far by the operator, by each of the
// cluster's components and by this program, keyed by process name.
func (b *bench) cpuSnapshot() map[string]float64 {
	pids := b.e.cluster.Processes()
	pids["operator"] = b.e.op.cmd.Process.Pid
	pids["benchmark"] = os.Getpid()
	out := map[string]float64{}
	for name, pid := range pids {
		if s, err := cpuSeconds(pid); err == nil {
			out[name] = s
		}
	}
	return out
}

// cpuDelta is after - before for the processes in both.
func cpuDelta(before, after map[string]float64) map[string]float64 {
	out := maps.Clone(after)
	for k, v := range out {
		b, ok := before[k]
		if !ok {
			delete(out, k)
			continue
		}
		out[k] = v - b
	}
	return out
}

package main

import (
	"maps"
	"os"

	"github.com/prometheus/procfs"
)

// cpuSeconds returns the user plus system CPU time pid has used (procfs).
func cpuSeconds(pid int) (float64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return st.CPUTime(), nil
}

// cpuSnapshot is the CPU time used so far by the contender's operator (all
// its replicas), by each of the cluster's components and by this program,
// keyed by process name.
func (b *bench) cpuSnapshot() map[string]float64 {
	pids := b.e.cluster.Processes()
	pids["benchmark"] = os.Getpid()
	out := map[string]float64{}
	for name, pid := range pids {
		if s, err := cpuSeconds(pid); err == nil {
			out[name] = s
		}
	}
	var ops []*operator
	switch {
	case b.cur.watcher != nil:
		ops = []*operator{b.cur.watcher}
	case len(b.e.replicas) > 0 && b.cur.op == b.e.replicas[0]:
		ops = b.e.replicas
	case b.cur.op != nil:
		ops = []*operator{b.cur.op}
	}
	for _, op := range ops {
		if s, err := cpuSeconds(op.pid()); err == nil {
			out["operator"] += s
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

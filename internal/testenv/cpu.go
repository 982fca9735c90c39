package testenv

import (
	"fmt"
	"net/url"

	"github.com/prometheus/procfs"
)

// APIServerCPUSeconds returns the CPU time (user plus system) e's
// kube-apiserver has used so far, read from /proc: the process whose
// command line serves the port of Config.Host. Benchmarks report the API
// server's cost of an operation as the difference of two readings divided
// by the operations between them.
func APIServerCPUSeconds(e *Env) (float64, error) {
	u, err := url.Parse(e.Config.Host)
	if err != nil {
		return 0, fmt.Errorf("parsing the API server's address %q: %w", e.Config.Host, err)
	}
	procs, err := procfs.AllProcs()
	if err != nil {
		return 0, fmt.Errorf("listing processes: %w", err)
	}
	for _, p := range procs {
		comm, err := p.Comm()
		if err != nil || comm != "kube-apiserver" {
			continue
		}
		args, err := p.CmdLine()
		if err != nil || !servesPort(args, u.Port()) {
			continue
		}
		st, err := p.Stat()
		if err != nil {
			return 0, fmt.Errorf("reading kube-apiserver's /proc/%d/stat: %w", p.PID, err)
		}
		return st.CPUTime(), nil
	}
	return 0, fmt.Errorf("no kube-apiserver process serves port %s", u.Port())
}

// servesPort reports whether args set the secure port to port, in either
// of the forms kube-apiserver accepts.
func servesPort(args []string, port string) bool {
	for i, a := range args {
		if a == "--secure-port="+port || (a == "--secure-port" && i+1 < len(args) && args[i+1] == port) {
			return true
		}
	}
	return false
}

package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/opkit-dev/opkit/internal/localcluster"
)

// machine describes where the run happened.
type machine struct {
	CPU               string  `json:"cpu"`
	Cores             int     `json:"cores"`
	MemoryGB          float64 `json:"memoryGB"`
	Kernel            string  `json:"kernel"`
	Go                string  `json:"go"`
	Kubernetes        string  `json:"kubernetes"`
	Etcd              string  `json:"etcd"`
	Kwok              string  `json:"kwok"`
	ControllerRuntime string  `json:"controllerRuntime"`
	ClientGo          string  `json:"clientGo"`
	Commit            string  `json:"commit"`
}

func describe(e *env) machine {
	m := machine{Cores: runtime.NumCPU(), Go: runtime.Version(), Kubernetes: e.kubeVersion, Etcd: localcluster.EtcdVersion}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		_ = f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var kb float64
			if _, err := fmt.Sscanf(sc.Text(), "MemTotal: %f kB", &kb); err == nil {
				m.MemoryGB = kb / (1 << 20)
				break
			}
		}
		_ = f.Close()
	}
	if v, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(v))
	}
	if out, err := exec.Command(e.cluster.Kwokctl(), "--version").Output(); err == nil {
		m.Kwok = strings.TrimSpace(string(out))
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "sigs.k8s.io/controller-runtime":
				m.ControllerRuntime = d.Version
			case "k8s.io/client-go":
				m.ClientGo = d.Version
			}
		}
	}
	if out, err := exec.Command("git", "-C", e.root, "describe", "--always", "--dirty").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
	}
	return m
}

type report struct {
	Command string   `json:"command"`
	Machine machine  `json:"machine"`
	Results *results `json:"results"`
}

func writeResults(dir string, cfg config, e *env, res *results) error {
	rep := report{Command: "cd hack && go run ./scale " + strings.Join(os.Args[1:], " "), Machine: describe(e), Results: res}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "scale.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	md := markdown(rep, cfg)
	if err := os.WriteFile(filepath.Join(dir, "scale.md"), []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Fprint(os.Stderr, "\n"+md)
	f, err := os.Create(filepath.Join(dir, "scale.png"))
	if err != nil {
		return err
	}
	if err := plot(f, fmt.Sprintf("%d objects until ready", res.N), res.CreateOp, res.CreateDirect); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// markdown renders the results as tables.
func markdown(rep report, cfg config) string {
	r := rep.Results
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	perCR := func(v float64) string { return num(v / float64(r.N)) }

	w("Command: `%s` (commit %s, %s UTC)\n\n", rep.Command, rep.Machine.Commit, r.Started.Format("2006-01-02 15:04"))
	w("| step | operator | direct | operator / direct | target |\n|---|---|---|---|---|\n")
	createRatio := r.CreateOp.Seconds / r.CreateDirect.Seconds
	w("| create %d, until all Ready / Available | %.1f s | %.1f s | %s | <= 1.10 (%s) |\n", r.N, r.CreateOp.Seconds, r.CreateDirect.Seconds, ratio(r.CreateOp.Seconds, r.CreateDirect.Seconds), verdict(createRatio <= 1.10))
	resizeRatio := r.ResizeOp.Seconds / r.ResizeDirect.Seconds
	w("| resize %d from 1 to 2 pods, until Ready / Available | %.1f s | %.1f s | %s | <= 1.2 (%s) |\n", r.Resize, r.ResizeOp.Seconds, r.ResizeDirect.Seconds, ratio(r.ResizeOp.Seconds, r.ResizeDirect.Seconds), verdict(resizeRatio <= 1.2))
	deleteRatio := r.DeleteOp.Seconds / r.DeleteDirect.Seconds
	w("| delete %d, until they and all they own (Deployments, ReplicaSets, Pods, Services, PDBs) are gone | %.1f s | %.1f s | %s | <= 1.5 (%s) |\n", r.N, r.DeleteOp.Seconds, r.DeleteDirect.Seconds, ratio(r.DeleteOp.Seconds, r.DeleteDirect.Seconds), verdict(deleteRatio <= 1.5))
	w("| delete %d, until the deleted objects themselves are gone | %.1f s | %.1f s | %s | |\n\n", r.N, r.DeleteOp.Extra["objectsGoneSeconds"], r.DeleteDirect.Extra["objectsGoneSeconds"], ratio(r.DeleteOp.Extra["objectsGoneSeconds"], r.DeleteDirect.Extra["objectsGoneSeconds"]))

	c, s, z, d := r.CreateOp.Requests, r.Steady.Requests, r.ResizeOp.Requests, r.DeleteOp.Requests
	w("| operator cost | value | target |\n|---|---|---|\n")
	w("| write requests per Memcached until Ready | %s (%s) | <= 3 (%s) |\n", perCR(c.Writes), methodsWrites(c.ByMethod, r.N), verdict(c.Writes/float64(r.N) <= 3))
	w("| all requests per Memcached until Ready | %s (%s) | |\n", perCR(c.Total), methods(c.ByMethod, r.N))
	w("| 409 conflicts, whole run | %s | 0 (%s) |\n", num(r.Whole.Conflicts), verdict(r.Whole.Conflicts == 0))
	w("| reconciles until Ready (per Memcached) | %s (%s) | |\n", num(c.Reconciles), perCR(c.Reconciles))
	w("| status writes until Ready (per Memcached) | %s (%s) | |\n", num(c.StatusWrites["written"]), perCR(c.StatusWrites["written"]))
	w("| steady state, %s with a %s resync: reconciles | %s | |\n", cfg.Steady, cfg.SyncPeriod, num(s.Reconciles))
	w("| steady state: write requests (all requests) | %s (%s) | 0 (%s) |\n", num(s.Writes), num(s.Total), verdict(s.Writes == 0))
	w("| resize %d: write requests per Memcached | %s (%s) | |\n", r.Resize, num(z.Writes/float64(max(r.Resize, 1))), methodsWrites(z.ByMethod, max(r.Resize, 1)))
	w("| delete %d: write requests per Memcached | %s (%s) | |\n", r.N, perCR(d.Writes), methodsWrites(d.ByMethod, r.N))
	w("| peak RSS (VmHWM), whole run | %s | <= 77 MB (%s) |\n", mb(r.PeakRSSBytes), verdict(r.PeakRSSBytes <= 77<<20))
	w("| peak RSS after the create step (Go heap in use then) | %s (%s) | |\n\n", mb(r.RSSAfterCreate), mb(int64(r.CreateOp.HeapInuseBytes)))

	cpuTable(w, r)
	clusterWritesTable(w, r)

	w("Machine: %s, %d cores, %.0f GB RAM, Linux %s. Versions: %s, Kubernetes %s (kube-apiserver, kube-controller-manager, kube-scheduler), etcd %s, %s, controller-runtime %s, client-go %s. %d kwok nodes, QPS limits off (`kwokctl create cluster --disable-qps-limits`).\n",
		rep.Machine.CPU, rep.Machine.Cores, rep.Machine.MemoryGB, rep.Machine.Kernel, rep.Machine.Go, rep.Machine.Kubernetes, rep.Machine.Etcd, firstLine(rep.Machine.Kwok), rep.Machine.ControllerRuntime, rep.Machine.ClientGo, r.Nodes)
	return b.String()
}

// cpuTable renders the CPU time each process used per phase: where the
// machine's two cores went.
func cpuTable(w func(string, ...any), r *results) {
	phases := []phase{r.CreateOp, r.CreateDirect, r.Steady, r.ResizeOp, r.ResizeDirect, r.DeleteOp, r.DeleteDirect}
	procs := []string{"operator", "kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok-controller", "benchmark"}
	seen := map[string]bool{}
	for _, p := range phases {
		for k := range p.CPUSeconds {
			seen[k] = true
		}
	}
	for _, k := range procs {
		delete(seen, k)
	}
	procs = append(procs, slices.Sorted(maps.Keys(seen))...)
	w("CPU seconds (user + system) per process and phase:\n\n| phase | wall |")
	for _, k := range procs {
		w(" %s |", k)
	}
	w(" all |\n|---|---:|")
	for range procs {
		w("---:|")
	}
	w("---:|\n")
	for _, p := range phases {
		if p.CPUSeconds == nil {
			continue
		}
		w("| %s | %.1f s |", p.Name, p.Seconds)
		var all float64
		for _, k := range procs {
			v, ok := p.CPUSeconds[k]
			all += v
			if !ok {
				w(" - |")
				continue
			}
			w(" %.1f |", v)
		}
		w(" %.1f |\n", all)
	}
	w("\n")
}

// clusterWritesTable renders the write requests the API server served in
// the create, resize and delete steps, from every client, by resource: the
// work the operator adds to the control plane's.
func clusterWritesTable(w func(string, ...any), r *results) {
	for _, step := range []struct {
		what    string
		n       int
		op, dir map[string]float64
	}{
		{"create", r.N, r.CreateOp.ClusterWrites, r.CreateDirect.ClusterWrites},
		{"resize", r.Resize, r.ResizeOp.ClusterWrites, r.ResizeDirect.ClusterWrites},
		{"delete", r.N, r.DeleteOp.ClusterWrites, r.DeleteDirect.ClusterWrites},
	} {
		if step.op == nil || step.dir == nil {
			continue
		}
		keys := map[string]bool{}
		var opAll, dirAll float64
		for k, v := range step.op {
			keys[k] = true
			opAll += v
		}
		for k, v := range step.dir {
			keys[k] = true
			dirAll += v
		}
		n := float64(max(step.n, 1))
		w("Write requests the API server served during the %s steps, from every client (benchmark, operator, controller-manager, scheduler, kwok), per object:\n\n", step.what)
		w("| resource | operator (per Memcached) | direct (per Deployment) |\n|---|---:|---:|\n")
		sorted := slices.Sorted(maps.Keys(keys))
		slices.SortStableFunc(sorted, func(a, b string) int {
			return cmp.Compare(step.op[b]+step.dir[b], step.op[a]+step.dir[a])
		})
		for _, k := range sorted {
			w("| %s | %.2f | %.2f |\n", k, step.op[k]/n, step.dir[k]/n)
		}
		w("| **all** | **%.2f** | **%.2f** (operator / direct %s) |\n\n", opAll/n, dirAll/n, ratio(opAll, dirAll))
	}
}

// methodsWrites is methods restricted to write verbs.
func methodsWrites(m map[string]float64, n int) string {
	w := map[string]float64{}
	for k, v := range m {
		if isWrite(k) {
			w[k] = v
		}
	}
	return methods(w, n)
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

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
	if fs, err := procfs.NewDefaultFS(); err == nil {
		if cpus, err := fs.CPUInfo(); err == nil && len(cpus) > 0 {
			m.CPU = cpus[0].ModelName
		}
		if mem, err := fs.Meminfo(); err == nil && mem.MemTotal != nil {
			m.MemoryGB = float64(*mem.MemTotal) / (1 << 20)
		}
	}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		m.Kernel = unix.ByteSliceToString(uts.Release[:])
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
	Config  config   `json:"config"`
	Results *results `json:"results"`
}

func writeResults(dir string, cfg config, m machine, res *results) error {
	return writeReport(dir, report{Command: "cd hack && go run ./scale " + strings.Join(os.Args[1:], " "), Machine: m, Config: cfg, Results: res})
}

// writeReport writes rep to scale.json in dir and renders it.
func writeReport(dir string, rep report) error {
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "scale.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	return render(dir, rep)
}

// rerender writes scale.md and scale.png again from the scale.json in dir
// (-rerender): for a change of the tables, without measuring again. With
// profiles (the -profile directory of the run), it first splits the CPU
// profiles of the primary N's phases found there (splitPhases) and writes
// scale.json again with them.
func rerender(dir, profiles string) error {
	data, err := os.ReadFile(filepath.Join(dir, "scale.json"))
	if err != nil {
		return err
	}
	var rep report
	if err := json.Unmarshal(data, &rep); err != nil {
		return fmt.Errorf("reading %s: %w", filepath.Join(dir, "scale.json"), err)
	}
	if rep.Config.Steady == 0 {
		// Written before the configuration was recorded: the defaults.
		rep.Config.Steady, rep.Config.SyncPeriod = time.Minute, 15*time.Second
	}
	if profiles != "" {
		if err := splitPhases(rep.Results, profiles); err != nil {
			return err
		}
		return writeReport(dir, rep)
	}
	return render(dir, rep)
}

// render writes scale.md and scale.png from rep into dir.
func render(dir string, rep report) error {
	cfg, res := rep.Config, rep.Results
	md := markdown(rep, cfg)
	if err := os.WriteFile(filepath.Join(dir, "scale.md"), []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Fprint(os.Stderr, "\n"+md)
	r := res.run(res.Primary)
	if r == nil {
		return nil
	}
	var lines []plotLine
	for _, name := range plotOrder {
		if c := r.Contenders[name]; c != nil {
			lines = append(lines, plotLine{name: name, p: c.Create, color: lineColors[name]})
		}
	}
	return plotReady(filepath.Join(dir, "scale.png"), fmt.Sprintf("%d objects of size 1 created, until ready", r.N), lines)
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

// tableOrder is the order of the tables' columns, of the contenders a run
// measured (columns); plotOrder is that of the plot's lines.
var (
	tableOrder = []string{contOpkit, contTutorial, contDirect, contFloor, contWatched}
	plotOrder  = []string{contDirect, contOpkit, contTutorial, contFloor, contWatched}
)

// columns returns the contenders r measured, in tableOrder.
func columns(r *runResult) []string {
	var out []string
	for _, name := range tableOrder {
		if r.Contenders[name] != nil {
			out = append(out, name)
		}
	}
	return out
}

// header renders a table header: first, then a right-aligned column per
// contender of r.
func header(r *runResult, first string) string {
	cols := columns(r)
	return fmt.Sprintf("| %s | %s |\n|---|%s\n", first, strings.Join(cols, " | "), strings.Repeat("---:|", len(cols)))
}

// Targets at the primary N (issue: scale).
const (
	targetCreateVsDirect   = 1.25
	targetCreateVsTutorial = 0.65
	targetDeleteVsDirect   = 1.2
	targetResizeVsDirect   = 1.3
	targetWritesPerCR      = 3
	targetPeakRSS          = 72 << 20
	targetCurveDrift       = 0.10
)

// markdown renders the results as tables.
func markdown(rep report, cfg config) string {
	res := rep.Results
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("Command: `%s` (commit %s, %s UTC)\n\n", rep.Command, rep.Machine.Commit, res.Started.Format("2006-01-02 15:04"))
	r := res.run(res.Primary)
	if r == nil {
		return b.String()
	}
	d, o, t := r.Contenders[contDirect], r.Contenders[contOpkit], r.Contenders[contTutorial]
	n := float64(r.N)

	w("| step (N=%d) | opkit | tutorial | direct | opkit / direct | target | opkit / tutorial | target |\n|---|---:|---:|---:|---:|---|---:|---|\n", r.N)
	w("| create %d of size 1, until all Ready / available | %.1f s | %.1f s | %.1f s | %s | <= %.2f (%s) | %s | <= %.2f (%s) |\n", r.N,
		o.Create.Seconds, t.Create.Seconds, d.Create.Seconds, ratio(o.Create.Seconds, d.Create.Seconds), targetCreateVsDirect, verdict(o.Create.Seconds <= targetCreateVsDirect*d.Create.Seconds),
		ratio(o.Create.Seconds, t.Create.Seconds), targetCreateVsTutorial, verdict(o.Create.Seconds <= targetCreateVsTutorial*t.Create.Seconds))
	w("| resize %d from 1 to 2 pods, until Ready / available | %.1f s | %.1f s | %.1f s | %s | <= %.2f (%s) | %s | |\n", r.Resize,
		o.Resize.Seconds, t.Resize.Seconds, d.Resize.Seconds, ratio(o.Resize.Seconds, d.Resize.Seconds), targetResizeVsDirect, verdict(o.Resize.Seconds <= targetResizeVsDirect*d.Resize.Seconds),
		ratio(o.Resize.Seconds, t.Resize.Seconds))
	w("| delete %d, until they and all they own (Deployments, ReplicaSets, Pods, Services, PDBs) are gone | %.1f s | %.1f s | %.1f s | %s | <= %.2f (%s) | %s | |\n", r.N,
		o.Delete.Seconds, t.Delete.Seconds, d.Delete.Seconds, ratio(o.Delete.Seconds, d.Delete.Seconds), targetDeleteVsDirect, verdict(o.Delete.Seconds <= targetDeleteVsDirect*d.Delete.Seconds),
		ratio(o.Delete.Seconds, t.Delete.Seconds))
	og, tg, dg := o.Delete.Extra["objectsGoneSeconds"], t.Delete.Extra["objectsGoneSeconds"], d.Delete.Extra["objectsGoneSeconds"]
	w("| delete %d, until the deleted objects themselves are gone | %.1f s | %.1f s | %.1f s | %s | | %s | |\n\n", r.N, og, tg, dg, ratio(og, dg), ratio(og, tg))
	floorTable(w, r)
	roundsTable(w, r)

	w("| operator cost (N=%d) | opkit | tutorial | target (opkit) |\n|---|---|---|---|\n", r.N)
	row := func(what string, f func(c *contenderResult) string, target string) {
		w("| %s | %s | %s | %s |\n", what, f(o), f(t), target)
	}
	oc := o.Create.Requests
	row("write requests per Memcached until Ready", func(c *contenderResult) string {
		return fmt.Sprintf("%s (%s)", num(c.Create.Requests.Writes/n), methodsWrites(c.Create.Requests.ByMethod, r.N))
	}, fmt.Sprintf("<= %d (%s)", targetWritesPerCR, verdict(oc.Writes/n <= targetWritesPerCR)))
	row("all requests per Memcached until Ready", func(c *contenderResult) string {
		return fmt.Sprintf("%s (%s)", num(c.Create.Requests.Total/n), methods(c.Create.Requests.ByMethod, r.N))
	}, "")
	row("Memcached writes per Memcached until Ready (API server: memcacheds, memcacheds/status)", func(c *contenderResult) string {
		return fmt.Sprintf("%s (status %s)", num(kindWrites(c.Create.APIKinds, "memcacheds", "memcacheds/status")/n), num(kindWrites(c.Create.APIKinds, "memcacheds/status")/n))
	}, "")
	row("reconciles until Ready, per Memcached", func(c *contenderResult) string { return num(c.Create.Requests.Reconciles / n) }, "")
	row("409 conflicts, all phases", func(c *contenderResult) string { return num(c.Whole.Conflicts) }, fmt.Sprintf("0 (%s)", verdict(o.Whole.Conflicts == 0)))
	row(fmt.Sprintf("steady state, %s with a %s resync: reconciles", cfg.Steady, cfg.SyncPeriod), func(c *contenderResult) string { return num(c.Steady.Requests.Reconciles) }, "")
	row("steady state: write requests (all requests)", func(c *contenderResult) string {
		return fmt.Sprintf("%s (%s)", num(c.Steady.Requests.Writes), num(c.Steady.Requests.Total))
	}, fmt.Sprintf("0 (%s)", verdict(o.Steady.Requests.Writes == 0)))
	row(fmt.Sprintf("resize %d: write requests per Memcached", r.Resize), func(c *contenderResult) string {
		return fmt.Sprintf("%s (%s)", num(c.Resize.Requests.Writes/float64(max(r.Resize, 1))), methodsWrites(c.Resize.Requests.ByMethod, max(r.Resize, 1)))
	}, "")
	row(fmt.Sprintf("delete %d: write requests per Memcached", r.N), func(c *contenderResult) string {
		return fmt.Sprintf("%s (%s)", num(c.Delete.Requests.Writes/n), methodsWrites(c.Delete.Requests.ByMethod, r.N))
	}, "")
	row("peak RSS (VmHWM)", func(c *contenderResult) string { return mb(c.PeakRSSBytes) }, fmt.Sprintf("<= %s (%s)", mb(targetPeakRSS), verdict(o.PeakRSSBytes <= targetPeakRSS)))
	row("of which the executable's pages before the create step (RssFile); the operator's own peak (RssAnon)", func(c *contenderResult) string {
		return fmt.Sprintf("%s; %s", mb(c.FileRSSBeforeCreate), mb(c.PeakAnonBytes))
	}, "reported")
	row("RSS growth over the create step, per Memcached (Go heap in use after it)", func(c *contenderResult) string {
		return fmt.Sprintf("%.1f KB (%s)", c.rssPerCR(r.N)/1024, mb(int64(c.Create.HeapInuseBytes)))
	}, "reported")
	w("\n")

	curveTable(w, res)
	reportLagTable(w, r)
	cpuTable(w, r)
	cpuActivityTables(w, r)
	apiKindsTables(w, r)
	watchEventsTable(w, r)
	clusterWritesTable(w, r)

	w("Machine: %s, %d cores, %.0f GB RAM, Linux %s. Versions: %s, Kubernetes %s (kube-apiserver, kube-controller-manager, kube-scheduler), etcd %s, %s, controller-runtime %s, client-go %s. %d kwok nodes, QPS limits off (`kwokctl create cluster --disable-qps-limits`); every client's rate limits off.\n",
		rep.Machine.CPU, rep.Machine.Cores, rep.Machine.MemoryGB, rep.Machine.Kernel, rep.Machine.Go, rep.Machine.Kubernetes, rep.Machine.Etcd, firstLine(rep.Machine.Kwok), rep.Machine.ControllerRuntime, rep.Machine.ClientGo, res.Nodes)
	return b.String()
}

// kindWrites sums the write requests of the given resources in kinds.
func kindWrites(kinds map[string]apiKind, resources ...string) float64 {
	var t float64
	for k, v := range kinds {
		verb, res, _ := strings.Cut(k, " ")
		if isWrite(verb) && slices.Contains(resources, res) {
			t += v.Count
		}
	}
	return t
}

// curveTable renders the ratios and the opkit operator's memory at every
// N, against the primary N's: the median of its rounds' create ratios when
// it has rounds (one round's ratio moves by +-0.2, as much as the drift
// the curve is judged on), else its only one.
func curveTable(w func(string, ...any), res *results) {
	if len(res.Runs) < 2 {
		return
	}
	base := res.run(res.Primary)
	baseRatio := base.Contenders[contOpkit].Create.Seconds / base.Contenders[contDirect].Create.Seconds
	baseName := fmt.Sprintf("N=%d", res.Primary)
	if xs := createVsDirect.of(base.Rounds); len(xs) > 1 {
		baseRatio = median(xs)
		baseName += fmt.Sprintf(" (the median of %d rounds)", len(xs))
	}
	w("Scaling curve: each N on a fresh cluster with fresh operators. The create ratio should stay within %.0f%% of its value at %s.\n\n", targetCurveDrift*100, baseName)
	w("| N | create opkit / direct | vs %s | create opkit / tutorial | resize opkit / direct | delete opkit / direct | opkit peak RSS (RssAnon) | opkit RSS growth per Memcached | tutorial peak RSS (RssAnon) |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|\n", baseName)
	for _, r := range res.Runs {
		d, o, t := r.Contenders[contDirect], r.Contenders[contOpkit], r.Contenders[contTutorial]
		cr := o.Create.Seconds / d.Create.Seconds
		shown := fmt.Sprintf("%.2f", cr)
		if r == base && baseRatio != cr {
			shown = fmt.Sprintf("%.2f (the median; round 1: %.2f)", baseRatio, cr)
			cr = baseRatio
		}
		drift := cr/baseRatio - 1
		w("| %d | %s | %+.0f%% (%s) | %s | %s | %s | %s | %.1f KB | %s |\n", r.N, shown, drift*100, verdict(math.Abs(drift) <= targetCurveDrift),
			ratio(o.Create.Seconds, t.Create.Seconds), ratio(o.Resize.Seconds, d.Resize.Seconds), ratio(o.Delete.Seconds, d.Delete.Seconds),
			withAnon(o), o.rssPerCR(r.N)/1024, withAnon(t))
	}
	w("\n")
}

// floorTable renders the floor's steps (with -floor): what the custom
// resource itself costs, and the operator's overhead over it.
func floorTable(w func(string, ...any), r *runResult) {
	f, o, d := r.Contenders[contFloor], r.Contenders[contOpkit], r.Contenders[contDirect]
	if f == nil {
		return
	}
	w("| step (N=%d) | floor | opkit / floor: the operator's own overhead | floor / direct: the custom resource's |\n|---|---:|---:|---:|\n", r.N)
	for _, s := range []struct {
		what    string
		f, o, d float64
	}{
		{"create", f.Create.Seconds, o.Create.Seconds, d.Create.Seconds},
		{"resize", f.Resize.Seconds, o.Resize.Seconds, d.Resize.Seconds},
		{"delete", f.Delete.Seconds, o.Delete.Seconds, d.Delete.Seconds},
	} {
		w("| %s | %.1f s | %s | %s |\n", s.what, s.f, ratio(s.o, s.f), ratio(s.f, s.d))
	}
	w("\n")
}

// contenderPhases lists the phases of r in order, named.
func contenderPhases(r *runResult) []phase {
	var out []phase
	for _, name := range columns(r) {
		c := r.Contenders[name]
		out = append(out, c.Create)
		if c.Steady != nil {
			out = append(out, *c.Steady)
		}
		out = append(out, c.Resize, c.Delete)
	}
	return out
}

// cpuTable renders the CPU time each process used per phase: where the
// machine's two cores went.
func cpuTable(w func(string, ...any), r *runResult) {
	phases := contenderPhases(r)
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
	w("CPU seconds (user + system) per process and phase (N=%d; operator: the contender's):\n\n| phase | wall |", r.N)
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

// apiKindsTables renders apiKindsTable for the create, resize and delete
// steps: reads too, since the garbage collector's cascade through an owner
// is mostly GETs.
func apiKindsTables(w func(string, ...any), r *runResult) {
	apiKindsTable(w, r, "create", "object", r.N, func(c *contenderResult) map[string]apiKind { return c.Create.APIKinds })
	apiKindsTable(w, r, "resize", "resized object", r.Resize, func(c *contenderResult) map[string]apiKind { return c.Resize.APIKinds })
	apiKindsTable(w, r, "delete", "object", r.N, func(c *contenderResult) map[string]apiKind { return c.Delete.APIKinds })
}

// apiKindsTable renders the API server's own account of one step by
// request kind: requests per unit (n of them) and handler seconds, for
// each contender, the 20 kinds of most handler seconds and a total. It
// attributes the control plane's extra work to what causes it. A step no
// contender has the account of is left out.
func apiKindsTable(w func(string, ...any), r *runResult, step, unit string, n int, get func(*contenderResult) map[string]apiKind) {
	cols := columns(r)
	keys := map[string]float64{}
	for _, name := range cols {
		for k, v := range get(r.Contenders[name]) {
			keys[k] += v.Seconds
		}
	}
	if len(keys) == 0 {
		return
	}
	per := float64(max(n, 1))
	sorted := largestFirst(keys)
	w("The API server's work during the %s step (N=%d), by request kind, from every client (its `apiserver_request_total` and `apiserver_request_duration_seconds`; watches left out): requests per %s, and the seconds its handlers took in all:\n\n", step, r.N, unit)
	w("%s", header(r, "request kind"))
	totals := map[string]apiKind{}
	for i, k := range sorted {
		if i < 20 {
			w("| %s |", k)
		}
		for _, name := range cols {
			v := get(r.Contenders[name])[k]
			t := totals[name]
			t.Count += v.Count
			t.Seconds += v.Seconds
			totals[name] = t
			if i < 20 {
				w(" %.2f, %.1f s |", v.Count/per, v.Seconds)
			}
		}
		if i < 20 {
			w("\n")
		}
	}
	w("| **all** |")
	for _, name := range cols {
		w(" **%.2f, %.1f s** |", totals[name].Count/per, totals[name].Seconds)
	}
	w("\n\n")
}

// watchEventsTable renders the watch events the API server sent during
// the create step, per object, by resource: every write's fan-out.
func watchEventsTable(w func(string, ...any), r *runResult) {
	get := func(c *contenderResult) map[string]float64 { return c.Create.WatchEvents }
	if !slices.ContainsFunc(columns(r), func(name string) bool { return len(get(r.Contenders[name])) > 0 }) {
		return
	}
	w("Watch events the API server sent during the create step (N=%d), per object, by resource:\n\n", r.N)
	// Rows under 0.01 per object for every contender are counted in all only.
	perObjectTable(w, r, "resource", float64(r.N), get, 0.005, func(map[string]float64) string { return "" })
}

// clusterWritesTable renders the write requests the API server served in
// the create, resize and delete steps, from every client, by resource: the
// work each operator adds to the control plane's.
func clusterWritesTable(w func(string, ...any), r *runResult) {
	steps := []struct {
		what string
		n    int
		get  func(c *contenderResult) map[string]float64
	}{
		{"create", r.N, func(c *contenderResult) map[string]float64 { return c.Create.ClusterWrites }},
		{"resize", r.Resize, func(c *contenderResult) map[string]float64 { return c.Resize.ClusterWrites }},
		{"delete", r.N, func(c *contenderResult) map[string]float64 { return c.Delete.ClusterWrites }},
	}
	for _, step := range steps {
		w("Write requests the API server served during the %s step (N=%d), from every client (benchmark, operator, controller-manager, scheduler, kwok), per object:\n\n", step.what, r.N)
		perObjectTable(w, r, "resource", float64(max(step.n, 1)), step.get, 0, func(all map[string]float64) string {
			return " (opkit / direct " + ratio(all[contOpkit], all[contDirect]) + ")"
		})
	}
}

// perObjectTable renders the maps get returns for each contender as a
// table of values per object (divided by n), one row per key, largest sum
// first, and a row of totals followed by note(totals). A row whose values
// are all under hide per object is left out (it still counts in the
// totals).
func perObjectTable(w func(string, ...any), r *runResult, keyName string, n float64, get func(*contenderResult) map[string]float64, hide float64, note func(map[string]float64) string) {
	cols := columns(r)
	sums, totals := map[string]float64{}, map[string]float64{}
	for _, name := range cols {
		for k, v := range get(r.Contenders[name]) {
			sums[k] += v
			totals[name] += v
		}
	}
	w("%s", header(r, keyName))
	for _, k := range largestFirst(sums) {
		if !slices.ContainsFunc(cols, func(name string) bool { return get(r.Contenders[name])[k]/n >= hide }) {
			continue
		}
		w("| %s |", k)
		for _, name := range cols {
			w(" %.2f |", get(r.Contenders[name])[k]/n)
		}
		w("\n")
	}
	w("| **all** |")
	for i, name := range cols {
		end := ""
		if i == len(cols)-1 {
			end = note(totals)
		}
		w(" **%.2f**%s |", totals[name]/n, end)
	}
	w("\n\n")
}

// largestFirst sorts the keys of sums by their value, largest first, and
// equal values by key, so that a report rendered twice reads the same.
func largestFirst(sums map[string]float64) []string {
	return slices.SortedFunc(maps.Keys(sums), func(a, b string) int {
		return cmp.Or(cmp.Compare(sums[b], sums[a]), cmp.Compare(a, b))
	})
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

// withAnon is c's peak resident set with its peak anonymous part.
func withAnon(c *contenderResult) string {
	if c.PeakAnonBytes == 0 {
		return mb(c.PeakRSSBytes) // recorded before RssAnon was
	}
	return fmt.Sprintf("%s (%s)", mb(c.PeakRSSBytes), mb(c.PeakAnonBytes))
}

package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/google/pprof/profile"
)

// cpuActivity is one line of a CPU split: the samples whose stack holds a
// function whose name contains one of frames.
type cpuActivity struct {
	name   string
	frames []string
}

// activityRest is the split's line for the samples no activity claims.
const activityRest = "everything else"

// apiServerActivities split the API server's CPU profile of a phase by what
// it was doing. A sample goes to the first activity with a matching frame,
// so the lines add up to the profile's total. The garbage collector's
// background workers come first; its assists stay with the allocating
// request, which is what caused them.
var apiServerActivities = []cpuActivity{
	{"Go garbage collection (background)", []string{"runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge"}},
	{"custom resources: status writes", []string{"customresource.(*StatusREST).Update"}},
	// Before the custom resources' other requests: their watches are
	// served under the CRD handler too. Only frames of watching: the
	// watch cache's read and write paths are in every GET, LIST and write.
	{"watches: serving, watch cache, etcd watch", []string{
		"handlers.(*WatchServer)", "handlers.serveWatch", "cacher.(*cacheWatcher)", "cacher.(*watchEncoder)",
		"cacher.(*Cacher).dispatchEvent", "processEvent", "etcd3.(*watchChan)", "etcd3.(*watcher)",
		"clientv3.(*watchGrpcStream)", "client/v3.(*watchGrpcStream)",
	}},
	{"custom resources: other requests", []string{"k8s.io/apiextensions-apiserver/"}},
	{"built-in kinds: writes", []string{"handlers/finisher.finishRequest"}},
	{"HTTP serving and filters (authn, authz, admission, decoding, reads)", []string{"net/http.", "golang.org/x/net/http2."}},
}

// operatorActivities split an operator's CPU profile of a phase.
var operatorActivities = []cpuActivity{
	{"Go garbage collection (background)", []string{"runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge"}},
	{"passes (reconcile, with their requests)", []string{"controller.(*Controller["}},
	{"watches: decoding, informers", []string{"k8s.io/client-go/tools/cache.", "k8s.io/apimachinery/pkg/watch.", "k8s.io/client-go/rest/watch."}},
	{"HTTP/2 client", []string{"golang.org/x/net/http2.", "net/http."}},
	{"Go scheduler", []string{"runtime.schedule", "runtime.findRunnable", "runtime.mcall"}},
}

// splitCPU sums p's CPU time by activity, in seconds.
func splitCPU(p *profile.Profile, activities []cpuActivity) (map[string]float64, error) {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			idx = i
		}
	}
	if idx < 0 {
		return nil, errors.New("not a CPU profile: no cpu/nanoseconds sample type")
	}
	nanos := map[string]int64{}
	for _, s := range p.Sample {
		name := activityRest
		for _, a := range activities {
			if stackHas(s, a.frames) {
				name = a.name
				break
			}
		}
		nanos[name] += s.Value[idx]
	}
	out := make(map[string]float64, len(nanos))
	for k, v := range nanos {
		out[k] = float64(v) / 1e9
	}
	return out, nil
}

// stackHas reports whether a function of s's stack contains one of frames.
func stackHas(s *profile.Sample, frames []string) bool {
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			if line.Function == nil {
				continue
			}
			for _, f := range frames {
				if strings.Contains(line.Function.Name, f) {
					return true
				}
			}
		}
	}
	return false
}

// splitCPUFile reads the CPU profile at path and splits it.
func splitCPUFile(path string, activities []cpuActivity) (map[string]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	split, err := splitCPU(p, activities)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return split, nil
}

// cpuActivityTables renders the create step's CPU splits: the API
// server's for every contender profiled, and the operators'.
func cpuActivityTables(w func(string, ...any), r *runResult) {
	activityTable(w, r, fmt.Sprintf("The API server's CPU seconds in the create step (N=%d) by what it was doing, from its CPU profile (`-profile`; a sample counts in the first line whose frames it has, in this order: %s):", r.N, activityOrder(apiServerActivities)),
		func(c *contenderResult) map[string]float64 { return c.Create.APIServerCPU })
	activityTable(w, r, fmt.Sprintf("The operator's CPU seconds in the create step (N=%d) by what it was doing, from its CPU profile (in this order: %s):", r.N, activityOrder(operatorActivities)),
		func(c *contenderResult) map[string]float64 { return c.Create.OperatorCPU })
}

// activityOrder lists the activities' names in matching order.
func activityOrder(activities []cpuActivity) string {
	names := make([]string, len(activities))
	for i, a := range activities {
		names[i] = a.name
	}
	return strings.Join(names, "; ")
}

// activityTable renders get's split for the contenders that have one, one
// row per activity, largest first, and their total. A CPU profile samples
// less than /proc counts (the profiler misses time in the kernel and in
// threads it does not see), so the totals are below the CPU table's.
func activityTable(w func(string, ...any), r *runResult, title string, get func(*contenderResult) map[string]float64) {
	var cols []string
	sums := map[string]float64{}
	for _, name := range columns(r) {
		split := get(r.Contenders[name])
		if len(split) == 0 {
			continue
		}
		cols = append(cols, name)
		for k, v := range split {
			sums[k] += v
		}
	}
	if len(cols) == 0 {
		return
	}
	w("%s\n\n| activity |", title)
	for _, name := range cols {
		w(" %s |", name)
	}
	w("\n|---|%s\n", strings.Repeat("---:|", len(cols)))
	rows := largestFirst(sums)
	for _, k := range rows {
		w("| %s |", k)
		for _, name := range cols {
			w(" %.1f s |", get(r.Contenders[name])[k])
		}
		w("\n")
	}
	w("| **all** |")
	for _, name := range cols {
		// In the rows' order: a sum in map order can round either way.
		var all float64
		for _, k := range rows {
			all += get(r.Contenders[name])[k]
		}
		w(" **%.1f s** |", all)
	}
	w("\n\n")
}

// splitPhases fills in the CPU splits of the primary N's phases from the
// profiles a run wrote to dir (-profile), for results measured before the
// splits were recorded. A phase whose profile is not there keeps what it
// has. With -rounds the files hold the last round's profiles.
func splitPhases(res *results, dir string) error {
	r := res.run(res.Primary)
	if r == nil {
		return nil
	}
	for name, c := range r.Contenders {
		for _, p := range []*phase{&c.Create, c.Steady, &c.Resize, &c.Delete} {
			if p == nil {
				continue
			}
			operator := ""
			if c.Whole != nil { // an operator
				operator = operatorProcess(name)
			}
			api, op, err := splitProfiles(dir, p.Name, operator)
			if err != nil {
				return err
			}
			if api != nil {
				p.APIServerCPU = api
			}
			if op != nil {
				p.OperatorCPU = op
			}
		}
	}
	return nil
}

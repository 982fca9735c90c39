package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/pprof/profile"
)

// cpuProfile is a CPU profile of one sample per stack (innermost frame
// first), each of the given milliseconds.
func cpuProfile(stacks map[string]int64) *profile.Profile {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     10_000_000,
	}
	funcs := map[string]*profile.Function{}
	for stack, ms := range stacks {
		s := &profile.Sample{Value: []int64{1, ms * 1_000_000}}
		for name := range strings.SplitSeq(stack, ";") {
			f, ok := funcs[name]
			if !ok {
				f = &profile.Function{ID: uint64(len(funcs) + 1), Name: name}
				funcs[name] = f
				p.Function = append(p.Function, f)
			}
			loc := &profile.Location{ID: uint64(len(p.Location) + 1), Line: []profile.Line{{Function: f}}}
			p.Location = append(p.Location, loc)
			s.Location = append(s.Location, loc)
		}
		p.Sample = append(p.Sample, s)
	}
	return p
}

func TestSplitCPU(t *testing.T) {
	const (
		statusApply = "k8s.io/apiextensions-apiserver/pkg/registry/customresource.(*StatusREST).Update;k8s.io/apiserver/pkg/endpoints/handlers/finisher.finishRequest.func1"
		crCreate    = "k8s.io/apiextensions-apiserver/pkg/apiserver.(*crdHandler).ServeHTTP;net/http.HandlerFunc.ServeHTTP"
		podStatus   = "runtime.mallocgc;runtime.gcAssistAlloc;k8s.io/kubernetes/pkg/registry/core/pod/storage.(*StatusREST).Update;k8s.io/apiserver/pkg/endpoints/handlers/finisher.finishRequest.func1"
		gcWorker    = "runtime.gcDrain;runtime.gcBgMarkWorker"
		watch       = "k8s.io/apiserver/pkg/storage/cacher.(*cacheWatcher).process;net/http.HandlerFunc.ServeHTTP"
		filters     = "k8s.io/apiserver/pkg/endpoints/filters.withAuthentication.func1;golang.org/x/net/http2.(*serverConn).runHandler"
		other       = "runtime.futex;runtime.sysmon"
		crWatch     = "k8s.io/apiserver/pkg/endpoints/handlers.serveWatch;k8s.io/apiextensions-apiserver/pkg/apiserver.(*crdHandler).ServeHTTP"
		cachedWrite = "k8s.io/apiserver/pkg/storage/cacher.(*CacheDelegator).GuaranteedUpdate;k8s.io/apiserver/pkg/endpoints/handlers/finisher.finishRequest.func1"
	)
	p := cpuProfile(map[string]int64{statusApply: 300, crCreate: 200, podStatus: 150, gcWorker: 1000, watch: 70, filters: 40, other: 5, crWatch: 30, cachedWrite: 20})
	got, err := splitCPU(p, apiServerActivities)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"custom resources: status writes":                                     0.3,
		"custom resources: other requests":                                    0.2,  // before the HTTP frames it also has
		"built-in kinds: writes":                                              0.17, // with the GC assist it caused, and the watch cache's write path
		"Go garbage collection (background)":                                  1,
		"watches: serving, watch cache, etcd watch":                           0.1, // a custom resource's too
		"HTTP serving and filters (authn, authz, admission, decoding, reads)": 0.04,
		activityRest: 0.005,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("split (-want +got):\n%s", diff)
	}

	p.SampleType = p.SampleType[:1]
	if _, err := splitCPU(p, apiServerActivities); err == nil || !strings.Contains(err.Error(), "not a CPU profile") {
		t.Errorf("a profile without cpu/nanoseconds: %v, want an error saying it is not a CPU profile", err)
	}
}

// TestSplitPhasesFromFiles: -rerender with -profile splits the profiles a
// run wrote, by the phase's file name, into the operator's phases and the
// API server's, and the report shows them.
func TestSplitPhasesFromFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, p *profile.Profile) {
		t.Helper()
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		if err := p.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	write("opkit-create-kube-apiserver.pprof", cpuProfile(map[string]int64{"runtime.gcBgMarkWorker": 2000, "x.(*StatusREST).Update;customresource.(*StatusREST).Update": 500}))
	write("opkit-create-opkit-operator.pprof", cpuProfile(map[string]int64{"reconcile.Reconcile;sigs.k8s.io/controller-runtime/pkg/internal/controller.(*Controller[...]).reconcileHandler": 800}))
	write("direct-create-kube-apiserver.pprof", cpuProfile(map[string]int64{"runtime.gcBgMarkWorker": 1500}))

	r := fakeRun(1000, 1.2)
	res := &results{Primary: 1000, Runs: []*runResult{r}}
	if err := splitPhases(res, dir); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]float64{"Go garbage collection (background)": 2, "custom resources: status writes": 0.5}, r.Contenders[contOpkit].Create.APIServerCPU); diff != "" {
		t.Errorf("opkit's API server split (-want +got):\n%s", diff)
	}
	if got := r.Contenders[contTutorial].Create.APIServerCPU; got != nil {
		t.Errorf("tutorial had no profile, got a split %v", got)
	}
	renderAndWant(t, r,
		"| activity | opkit | direct |\n|---|---:|---:|\n| Go garbage collection (background) | 2.0 s | 1.5 s |\n| custom resources: status writes | 0.5 s | 0.0 s |\n| **all** | **2.5 s** | **1.5 s** |",
		"| activity | opkit |\n|---|---:|\n| passes (reconcile, with their requests) | 0.8 s |\n| **all** | **0.8 s** |",
	)
}

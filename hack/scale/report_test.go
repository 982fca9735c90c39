package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeRun is a run at n whose opkit create takes ratio times direct's.
func fakeRun(n int, ratio float64) *runResult {
	ph := func(name string, secs float64) phase {
		return phase{Name: name, Seconds: secs, Samples: []sample{{T: secs / 2, Done: n / 2}, {T: secs, Done: n}},
			Extra:    map[string]float64{"objectsGoneSeconds": secs / 2},
			APIKinds: map[string]apiKind{"POST deployments": {Count: float64(n), Seconds: 1}, "APPLY memcacheds/status": {Count: float64(n), Seconds: 2}},
			// A tie (sorted by name), and a row under 0.005 per object.
			WatchEvents:   map[string]float64{"pods": 14 * float64(n), "deployments": 6 * float64(n), "services": 6 * float64(n), "nodes": 1},
			ClusterWrites: map[string]float64{"deployments": float64(n), "services": float64(n)},
			Requests:      &requests{ByMethod: map[string]float64{"PATCH": 2 * float64(n), "POST": float64(n)}, Writes: 3 * float64(n), Total: 3 * float64(n)}}
	}
	op := func(name string, create float64) *contenderResult {
		steady := ph(name+": steady", 60)
		steady.Requests = &requests{}
		return &contenderResult{Name: name, Create: ph(name+": create", create), Steady: &steady, Resize: ph(name+": resize", 3), Delete: ph(name+": delete", 10),
			Whole: &requests{}, RSSBeforeCreate: 30 << 20, RSSAfterCreate: 60 << 20, PeakRSSBytes: 64 << 20,
			PeakAnonBytes: 40 << 20, FileRSSBeforeCreate: 20 << 20}
	}
	return &runResult{N: n, Resize: min(100, n), Started: time.Now(), Contenders: map[string]*contenderResult{
		contDirect:   {Name: contDirect, Create: ph("direct: create", 30), Resize: ph("direct: resize", 3), Delete: ph("direct: delete", 10)},
		contOpkit:    op(contOpkit, 30*ratio),
		contTutorial: op(contTutorial, 60),
	}}
}

// TestReport renders every table and the plot from a run of three N,
// with the targets judged.
func TestReport(t *testing.T) {
	res := &results{Started: time.Now(), Nodes: 10, Primary: 1000, Runs: []*runResult{fakeRun(250, 1.2), fakeRun(1000, 1.2), fakeRun(2000, 1.5)}}
	cfg := config{Steady: time.Minute, SyncPeriod: 15 * time.Second}
	md := markdown(report{Command: "scale", Results: res}, cfg)
	for _, want := range []string{
		"| create 1000 of size 1, until all Ready / available | 36.0 s | 60.0 s | 30.0 s | 1.20 | <= 1.25 (met) | 0.60 | <= 0.65 (met) |",
		"| write requests per Memcached until Ready | 3 (PATCH 2, POST 1) | 3 (PATCH 2, POST 1) | <= 3 (met) |",
		"| 2000 | 1.50 | +25% (**not met**) |",
		"| 250 | 1.20 | +0% (met) |",
		"| APPLY memcacheds/status | 1.00, 2.0 s | 1.00, 2.0 s | 1.00, 2.0 s |",
		"| of which the executable's pages before the create step (RssFile); the operator's own peak (RssAnon) | 20.0 MB; 40.0 MB | 20.0 MB; 40.0 MB | reported |",
		"| 1000 | 1.20 | +0% (met) | 0.60 | 1.00 | 1.00 | 64.0 MB (40.0 MB) | 30.7 KB | 64.0 MB (40.0 MB) |",
		"| RSS growth over the create step, per Memcached (Go heap in use after it) | 30.7 KB (0.0 MB) |",
		"| resource | opkit | tutorial | direct |\n|---|---:|---:|---:|\n| pods | 14.00 | 14.00 | 14.00 |\n| deployments | 6.00 | 6.00 | 6.00 |\n| services | 6.00 | 6.00 | 6.00 |\n| **all** | **26.00** | **26.00** | **26.00** |",
		"| **all** | **2.00** | **2.00** | **2.00** (opkit / direct 1.00) |",
	} {
		wantInReport(t, md, want)
	}
	path := filepath.Join(t.TempDir(), "scale.png")
	r := res.run(1000)
	if err := plotReady(path, "ready", []plotLine{{contDirect, r.Contenders[contDirect].Create, lineColors[contDirect]}, {contOpkit, r.Contenders[contOpkit].Create, lineColors[contOpkit]}}); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Errorf("plot: %v, %v", st, err)
	}
}

// TestReportWithFloor: with -floor, the floor has its table, a column in
// the per-object tables, and its ratios in the rounds table.
func TestReportWithFloor(t *testing.T) {
	r := fakeRun(1000, 1.5)
	f := *r.Contenders[contDirect]
	f.Name = contFloor
	f.Create.Seconds = 40
	r.Contenders[contFloor] = &f
	r.addRound(contenderOrder, r)
	r.addRound(contenderOrder, r)
	renderAndWant(t, r,
		"| create | 40.0 s | 1.12 | 1.33 |",
		"| resource | opkit | tutorial | direct | floor |\n|---|---:|---:|---:|---:|\n| pods | 14.00 | 14.00 | 14.00 | 14.00 |",
		"| create, opkit / floor | 1.12 | 1.12 | **1.12** | 1.12-1.12 | |\n",
		"| create, floor / direct | 1.33 | 1.33 | **1.33** | 1.33-1.33 | |\n",
	)
}

// TestReportRequestsByStep: the API server's requests by kind, reads
// included, have a table for each step that has them (the delete step's
// extra work is the garbage collector's GETs), per resized object for the
// resize step; a step without them has none.
func TestReportRequestsByStep(t *testing.T) {
	r := fakeRun(1000, 1.2)
	for _, c := range r.Contenders {
		c.Create.APIKinds = nil
	}
	r.Contenders[contOpkit].Delete.APIKinds = map[string]apiKind{"GET deployments": {Count: 2000, Seconds: 30}, "DELETE memcacheds": {Count: 1000, Seconds: 60}}
	r.Contenders[contDirect].Delete.APIKinds = map[string]apiKind{"GET deployments": {Count: 700, Seconds: 12}}
	r.Contenders[contOpkit].Resize.APIKinds = map[string]apiKind{"GET deployments": {Count: 100, Seconds: 6}}
	md := markdown(report{Command: "scale", Results: &results{Started: time.Now(), Nodes: 10, Primary: r.N, Runs: []*runResult{r}}}, config{Steady: time.Minute, SyncPeriod: 15 * time.Second})
	for _, want := range []string{
		"The API server's work during the delete step (N=1000), by request kind, from every client",
		"| request kind | opkit | tutorial | direct |\n|---|---:|---:|---:|\n| DELETE memcacheds | 1.00, 60.0 s | 0.00, 0.0 s | 0.00, 0.0 s |\n| GET deployments | 2.00, 30.0 s | 0.00, 0.0 s | 0.70, 12.0 s |\n",
		"| **all** | **3.00, 90.0 s** | **2.00, 3.0 s** | **0.70, 12.0 s** |",
		"The API server's work during the resize step (N=1000), by request kind, from every client (its `apiserver_request_total` and `apiserver_request_duration_seconds`; watches left out): requests per resized object",
		"| GET deployments | 1.00, 6.0 s | 0.00, 0.0 s | 0.00, 0.0 s |",
	} {
		wantInReport(t, md, want)
	}
	if strings.Contains(md, "during the create step (N=1000), by request kind") {
		t.Errorf("report has a create table of request kinds without any:\n%s", md)
	}
}

// renderAndWant renders the report of run r as the primary run and fails t
// for each of wants it lacks.
func renderAndWant(t *testing.T, r *runResult, wants ...string) {
	t.Helper()
	res := &results{Started: time.Now(), Nodes: 10, Primary: r.N, Runs: []*runResult{r}}
	md := markdown(report{Command: "scale", Results: res}, config{Steady: time.Minute, SyncPeriod: 15 * time.Second})
	for _, want := range wants {
		wantInReport(t, md, want)
	}
}

// wantInReport fails t if the rendered report md lacks want.
func wantInReport(t *testing.T, md, want string) {
	t.Helper()
	if !strings.Contains(md, want) {
		t.Errorf("report lacks %q:\n%s", want, md)
	}
}

// TestCurveAgainstTheMedian: with rounds at the primary N, the curve is
// held against the median of their create ratios, not round 1's alone,
// and the primary N's row shows that median.
func TestCurveAgainstTheMedian(t *testing.T) {
	primary := fakeRun(1000, 1.42)
	for _, r := range []float64{1.42, 1.20, 1.25} {
		primary.addRound(contenderOrder, fakeRun(1000, r))
	}
	res := &results{Started: time.Now(), Nodes: 10, Primary: 1000, Runs: []*runResult{fakeRun(250, 1.40), primary, fakeRun(2000, 1.18)}}
	md := markdown(report{Command: "scale", Results: res}, config{Steady: time.Minute, SyncPeriod: 15 * time.Second})
	for _, want := range []string{
		"| N | create opkit / direct | vs N=1000 (the median of 3 rounds) |",
		"| 250 | 1.40 | +12% (**not met**) |",
		"| 1000 | 1.25 (the median; round 1: 1.42) | +0% (met) |",
		"| 2000 | 1.18 | -6% (met) |",
	} {
		wantInReport(t, md, want)
	}
}

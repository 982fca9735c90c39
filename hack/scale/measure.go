package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// sample is the number of objects done t seconds into a phase.
type sample struct {
	T    float64 `json:"t"`
	Done int     `json:"done"`
}

// phase is one timed step.
type phase struct {
	Name    string             `json:"name"`
	Seconds float64            `json:"seconds"`
	Samples []sample           `json:"samples,omitempty"`
	Extra   map[string]float64 `json:"extra,omitempty"`
	// Operator phases: the operator's requests during the phase, and its
	// Go heap in use at the end.
	Requests       *requests `json:"requests,omitempty"`
	HeapInuseBytes float64   `json:"heapInuseBytes,omitempty"`
	// CPUSeconds is the CPU time (user + system) each process used during
	// the phase: the operator, the cluster's components, the benchmark.
	CPUSeconds map[string]float64 `json:"cpuSeconds,omitempty"`
	// ClusterWrites is the write requests the API server served during the
	// phase, from every client, by resource[/subresource].
	ClusterWrites map[string]float64 `json:"clusterWrites,omitempty"`
	// APIKinds is the API server's own account of the phase by request
	// kind ("VERB resource[/subresource]"): requests served and the seconds
	// its handlers took (watches excluded).
	APIKinds map[string]apiKind `json:"apiKinds,omitempty"`
	// WatchEvents is the watch events the API server sent during the
	// phase, by resource: the fan-out of every write to every watcher.
	WatchEvents map[string]float64 `json:"watchEvents,omitempty"`
	// Webhooks is the API server's calls to admission webhooks, by
	// "name OPERATION", and the seconds it waited for them.
	Webhooks map[string]apiKind `json:"admissionWebhooks,omitempty"`
	// ActedSeconds is when the benchmark's own requests of the phase
	// ended; the rest of Seconds is the cluster catching up.
	ActedSeconds float64 `json:"actedSeconds,omitempty"`
	// APIServerCPU and OperatorCPU are the CPU seconds of the API
	// server's and the operator's profiles of the phase, by what they
	// were doing (splitCPU; -profile only).
	APIServerCPU map[string]float64 `json:"apiServerCPUByActivity,omitempty"`
	OperatorCPU  map[string]float64 `json:"operatorCPUByActivity,omitempty"`
}

// contenderResult is one contender's measurements at one N.
type contenderResult struct {
	Name   string `json:"name"`
	Create phase  `json:"create"`
	// Steady is measured for operators only.
	Steady *phase `json:"steady,omitempty"`
	Resize phase  `json:"resize"`
	Delete phase  `json:"delete"`
	// Operators: all their requests in the contender's phases, their
	// resident set before and after the create step (VmRSS), their peak
	// (VmHWM) and their Go heap in use at the end.
	Whole           *requests `json:"whole,omitempty"`
	RSSBeforeCreate int64     `json:"rssBeforeCreateBytes,omitempty"`
	RSSAfterCreate  int64     `json:"rssAfterCreateBytes,omitempty"`
	PeakRSSBytes    int64     `json:"peakRSSBytes,omitempty"`
	// PeakAnonBytes is the largest RssAnon seen (polled about once a
	// second): the operator's own memory, without the pages of its
	// executable that VmHWM also counts.
	PeakAnonBytes int64 `json:"peakAnonRSSBytes,omitempty"`
	// FileRSSBeforeCreate is RssFile before the create step: the pages of
	// the executable mapped in. How many depends on the page cache (a
	// freshly built binary is all in it, and faults map its pages in
	// batches), not on the operator's work.
	FileRSSBeforeCreate int64   `json:"fileRSSBeforeCreateBytes,omitempty"`
	GoHeapBytes         float64 `json:"goHeapInuseBytesAtEnd,omitempty"`
}

// rssPerCR is the operator's resident set growth over the create step per
// object created, in bytes.
func (c *contenderResult) rssPerCR(n int) float64 {
	return float64(c.RSSAfterCreate-c.RSSBeforeCreate) / float64(max(n, 1))
}

// runResult is one N, every contender measured on a fresh cluster.
type runResult struct {
	N          int                         `json:"n"`
	Resize     int                         `json:"resize"`
	Started    time.Time                   `json:"started"`
	Contenders map[string]*contenderResult `json:"contenders"`
	// Rounds holds every round's step times, the first being Contenders'
	// (-rounds > 1, at the primary N only).
	Rounds []round `json:"rounds,omitempty"`
}

type results struct {
	Started time.Time    `json:"started"`
	Nodes   int          `json:"nodes"`
	Primary int          `json:"primaryN"`
	Runs    []*runResult `json:"runs"`
}

// run returns the result at n (nil if not measured).
func (r *results) run(n int) *runResult {
	for _, x := range r.Runs {
		if x.N == n {
			return x
		}
	}
	return nil
}

type bench struct {
	e   *env
	cfg config
	// timesOnly measures the steps' times and nothing an earlier round on
	// the same cluster already did (no steady-state phase): -rounds.
	timesOnly bool
	// cur is the contender being measured, peakRSS and peakAnon its
	// operator's peak VmHWM and RssAnon.
	cur      *contender
	peakRSS  int64
	peakAnon int64
	// deployments are the contenders' sample Deployments measured so far
	// at this N, shared by the run's benches (checkChildren).
	deployments map[string]*appsv1.Deployment
}

// measure runs every contender at n on e's cluster, one after the other in
// order: create n, leave them (operators; not with timesOnly), resize,
// delete all.
func measure(ctx context.Context, e *env, cfg config, n int, order []string, timesOnly bool) (*runResult, error) {
	res := &runResult{N: n, Resize: min(cfg.Resize, n), Started: time.Now().UTC(), Contenders: map[string]*contenderResult{}}
	deployments := map[string]*appsv1.Deployment{}
	for _, name := range order {
		c := e.contenders[name]
		b := &bench{e: e, cfg: cfg, cur: c, timesOnly: timesOnly, deployments: deployments}
		cr, err := b.contender(ctx, n, res.Resize)
		if err != nil {
			return nil, fmt.Errorf("%s at N=%d: %w", name, n, err)
		}
		res.Contenders[name] = cr
	}
	return res, nil
}

// contender measures b.cur.
func (b *bench) contender(ctx context.Context, n, resize int) (out *contenderResult, err error) {
	c := b.cur
	res := &contenderResult{Name: c.name}
	objNames := names("mc", n)
	var first snapshot
	if c.operated() {
		var err error
		if first, err = scrape(ctx, c.op.metricsURL); err != nil {
			return nil, err
		}
		st, err := procStatus(c.op.pid())
		if err != nil {
			return nil, err
		}
		res.RSSBeforeCreate, res.FileRSSBeforeCreate = int64(st.VmRSS), int64(st.RssFile)
	}
	if c.floor {
		stop, err := b.startFloorStatus(ctx)
		if err != nil {
			return nil, err
		}
		defer func() {
			if ferr := stop(); ferr != nil && err == nil {
				out, err = nil, ferr
			}
		}()
	}
	res.Create, err = b.readyPhase(ctx, fmt.Sprintf("%s: create %d %s", c.name, n, c.noun()), objNames, 1,
		func(ctx context.Context, name string) error { return c.create(ctx, b.e.client, name) })
	if err != nil {
		return nil, err
	}
	// Before anything else is measured: a run comparing different objects
	// stops here.
	d, err := sampleDeployment(ctx, b.e.client, c.nsOf(objNames[0]), objNames[0])
	if err != nil {
		return nil, err
	}
	if err := b.checkChildren(d); err != nil {
		return nil, err
	}
	if c.operated() && !b.timesOnly {
		if res.RSSAfterCreate, err = residentSet(c.op.pid()); err != nil {
			return nil, err
		}
		steady, err := b.phase(ctx, c.name+": steady state", 0, func(context.Context) error { return nil }, b.sleeper(b.cfg.Steady))
		if err != nil {
			return nil, err
		}
		res.Steady = &steady
	}
	res.Resize, err = b.readyPhase(ctx, fmt.Sprintf("%s: resize %d 1->2", c.name, resize), objNames[:resize], 2,
		func(ctx context.Context, name string) error { return c.resize(ctx, b.e.client, name) })
	if err != nil {
		return nil, err
	}
	if res.Delete, err = b.deletePhase(ctx, objNames); err != nil {
		return nil, err
	}
	if c.operated() {
		last, err := scrape(ctx, c.op.metricsURL)
		if err != nil {
			return nil, err
		}
		whole := summarise(delta(first, last))
		res.Whole = &whole
		res.GoHeapBytes = last.sum("go_memstats_heap_inuse_bytes", nil)
		if err := b.pollRSS(); err != nil {
			return nil, err
		}
		res.PeakRSSBytes = b.peakRSS
		res.PeakAnonBytes = b.peakAnon
	}
	return res, nil
}

// readyPhase is a step that acts on every object of objNames in parallel
// and ends when each is done with pods pods: a Memcached Ready=True at its
// generation (counted by a readyTracker, whose keys join the phase's
// Extra), a Deployment rolled out.
func (b *bench) readyPhase(ctx context.Context, name string, objNames []string, pods int, act func(context.Context, string) error) (phase, error) {
	done := func() (int, error) { return b.countDeploymentsReady(objNames, int32(pods)) }
	var tracker *readyTracker
	stop := func() error { return nil }
	if b.cur.memcacheds() {
		var err error
		if tracker, stop, err = b.trackReady(ctx, objNames, pods); err != nil {
			return phase{}, err
		}
		done = tracker.count
	}
	p, err := b.phase(ctx, name, len(objNames), func(ctx context.Context) error {
		return b.parallel(ctx, objNames, act)
	}, done)
	if err := errors.Join(err, stop()); err != nil {
		return phase{}, err
	}
	if tracker != nil {
		p.Extra = tracker.extra()
	}
	return p, nil
}

// phase is timed, with the operator's requests counted when there is one.
func (b *bench) phase(ctx context.Context, name string, total int, act func(context.Context) error, done func() (int, error)) (phase, error) {
	op := b.cur.op
	var before snapshot
	if op != nil {
		var err error
		if before, err = scrape(ctx, op.metricsURL); err != nil {
			return phase{}, err
		}
	}
	p, err := b.timed(ctx, name, total, act, done)
	if err != nil || op == nil {
		return p, err
	}
	// Let the watch events of the last writes arrive, so that passes they
	// trigger are counted in this phase.
	if total > 0 {
		time.Sleep(2 * time.Second)
	}
	after, err := scrape(ctx, op.metricsURL)
	if err != nil {
		return p, err
	}
	r := summarise(delta(before, after))
	p.Requests = &r
	p.HeapInuseBytes = after.sum("go_memstats_heap_inuse_bytes", nil)
	return p, nil
}

// timed runs act and polls done until it returns total, printing a
// progress line, and records the count whenever it changes.
func (b *bench) timed(ctx context.Context, name string, total int, act func(context.Context) error, done func() (int, error)) (phase, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	p := phase{Name: name}
	cpuBefore := b.cpuSnapshot()
	apiBefore, err := b.apiserverMetrics(ctx)
	if err != nil {
		return p, err
	}
	prof, err := b.startProfiling(ctx, name)
	if err != nil {
		return p, err
	}
	defer func() { _ = prof.stop() }()
	start := time.Now()
	actErr := make(chan error, 1)
	go func() { actErr <- act(ctx) }()
	acting := true
	last, lastPrint := -1, time.Time{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := done()
		if err != nil {
			return p, err
		}
		el := time.Since(start)
		if n != last {
			p.Samples = append(p.Samples, sample{T: el.Seconds(), Done: n})
			last = n
		}
		if time.Since(lastPrint) >= time.Second {
			_ = b.pollRSS()
			progress(fmt.Sprintf("%-44s %6d/%-6d %7.1fs%s", name, max(n, 0), total, el.Seconds(), b.rssNote()))
			lastPrint = time.Now()
		}
		if n >= total && !acting {
			p.Seconds = el.Seconds()
			p.CPUSeconds = cpuDelta(cpuBefore, b.cpuSnapshot())
			if err := prof.stop(); err != nil {
				return p, err
			}
			if prof != nil {
				operator := ""
				if b.cur.op != nil {
					operator = operatorProcess(b.cur.op.name)
				}
				if p.APIServerCPU, p.OperatorCPU, err = splitProfiles(b.cfg.Profile, name, operator); err != nil {
					return p, err
				}
			}
			apiAfter, err := b.apiserverMetrics(ctx)
			if err != nil {
				return p, err
			}
			d := delta(apiBefore, apiAfter)
			p.ClusterWrites = clusterWrites(d)
			p.APIKinds = apiKinds(d)
			p.WatchEvents = watchEvents(d)
			p.Webhooks = admissionWebhooks(d)
			progress(fmt.Sprintf("%-44s %6d/%-6d %7.1fs%s\n", name, n, total, el.Seconds(), b.rssNote()))
			return p, nil
		}
		if err := b.e.alive(); err != nil {
			return p, err
		}
		select {
		case err := <-actErr:
			if err != nil {
				return p, fmt.Errorf("%s: %w", name, err)
			}
			acting = false
			p.ActedSeconds = time.Since(start).Seconds()
		case <-ctx.Done():
			return p, fmt.Errorf("%s: %d of %d after %s: %w", name, n, total, el.Round(time.Second), ctx.Err())
		case <-tick.C:
		}
	}
}

func (b *bench) rssNote() string {
	if b.cur.op == nil {
		return ""
	}
	return "   operator peak RSS " + mb(b.peakRSS)
}

// apiserverMetrics scrapes the API server's own metrics.
func (b *bench) apiserverMetrics(ctx context.Context) (snapshot, error) {
	hc, err := rest.HTTPClientFor(b.e.cfg)
	if err != nil {
		return nil, fmt.Errorf("API server metrics: %w", err)
	}
	return scrapeWith(ctx, hc, strings.TrimSuffix(b.e.cfg.Host, "/")+"/metrics")
}

// sleeper is a done func that reaches 0 after d (the total of the steady
// phase is 0, so the phase ends once d has passed).
func (b *bench) sleeper(d time.Duration) func() (int, error) {
	end := time.Now().Add(d)
	return func() (int, error) {
		if time.Now().Before(end) {
			return -1, nil
		}
		return 0, nil
	}
}

// deletePhase deletes the named objects and waits until they, then
// everything in the contender's namespace, are gone.
func (b *bench) deletePhase(ctx context.Context, objNames []string) (phase, error) {
	c := b.cur
	var topGone float64
	start := time.Now()
	act := func(ctx context.Context) error {
		return b.parallel(ctx, objNames, func(ctx context.Context, n string) error {
			return c.remove(ctx, b.e.client, n)
		})
	}
	done := func() (int, error) {
		top, err := b.countTop()
		if err != nil {
			return 0, err
		}
		if top > 0 {
			return len(objNames) - top, nil
		}
		if topGone == 0 {
			topGone = time.Since(start).Seconds()
		}
		left, err := b.countDescendants()
		if err != nil {
			return 0, err
		}
		if left > 0 {
			// Objects gone, children not yet: not done.
			return len(objNames) - 1, nil
		}
		return len(objNames), nil
	}
	p, err := b.phase(ctx, fmt.Sprintf("%s: delete %d", c.name, len(objNames)), len(objNames), act, done)
	if err != nil {
		return p, err
	}
	p.Extra = map[string]float64{"objectsGoneSeconds": topGone}
	return p, nil
}

// countTop counts what the contender deletes: Memcacheds, or Deployments.
func (b *bench) countTop() (int, error) {
	if b.cur.memcacheds() {
		l := memcachedList()
		if err := b.e.cache.List(context.Background(), l, b.cur.inNamespaces(), client.UnsafeDisableDeepCopy); err != nil {
			return 0, err
		}
		return len(l.Items), nil
	}
	var l appsv1.DeploymentList
	if err := b.e.cache.List(context.Background(), &l, b.cur.inNamespaces(), client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	return len(l.Items), nil
}

// countDescendants counts Deployments, ReplicaSets, Pods, Services and PDBs
// left in the contender's namespace.
func (b *bench) countDescendants() (int, error) {
	var deps appsv1.DeploymentList
	if err := b.e.cache.List(context.Background(), &deps, b.cur.inNamespaces(), client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	n := len(deps.Items)
	for _, gvk := range metadataKinds {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := b.e.cache.List(context.Background(), l, b.cur.inNamespaces(), client.UnsafeDisableDeepCopy); err != nil {
			return 0, err
		}
		n += len(l.Items)
	}
	return n, nil
}

// memcachedReady reports whether m is Ready=True at its generation with
// pods ready pods. The benchmark runs it on every Memcached of a step ten
// times a second, on the cores of the contender it measures, so it reads
// the status in place: unstructured.NestedSlice would copy the conditions
// (14 allocations and 3.7 us a call before; BenchmarkMemcachedReady).
func memcachedReady(m *unstructured.Unstructured, pods int64) bool {
	meta, _ := m.Object["metadata"].(map[string]any)
	status, _ := m.Object["status"].(map[string]any)
	gen, _ := meta["generation"].(int64)
	og, _ := status["observedGeneration"].(int64)
	ready, _ := status["readyReplicas"].(int64)
	if og != gen || ready != pods {
		return false
	}
	conds, _ := status["conditions"].([]any)
	for _, c := range conds {
		cm, ok := c.(map[string]any)
		if !ok || cm["type"] != "Ready" {
			continue
		}
		cg, _ := cm["observedGeneration"].(int64)
		return cm["status"] == "True" && (cg == 0 || cg == gen)
	}
	return false
}

// countDeploymentsReady counts the named Deployments rolled out with the
// given number of available pods: the same test the operators apply before
// they report Ready.
func (b *bench) countDeploymentsReady(objNames []string, pods int32) (int, error) {
	var l appsv1.DeploymentList
	if err := b.e.cache.List(context.Background(), &l, b.cur.inNamespaces(), client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	want := nameSet(objNames)
	n := 0
	for i := range l.Items {
		if d := &l.Items[i]; want[d.Name] && rolledOut(d, pods) {
			n++
		}
	}
	return n, nil
}

// parallel runs f for every name with cfg.Workers goroutines, retrying
// transient errors.
func (b *bench) parallel(ctx context.Context, objNames []string, f func(context.Context, string) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan string)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for range b.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				var err error
				for attempt := range 5 {
					if err = f(ctx, n); err == nil || apierrors.IsAlreadyExists(err) || ctx.Err() != nil {
						err = nil
						break
					}
					time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("%s: %w", n, err)
						cancel()
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, n := range objNames {
		select {
		case work <- n:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// pollRSS records the peak resident set of the current contender's
// operator.
func (b *bench) pollRSS() error {
	if b.cur.op == nil {
		return nil
	}
	st, err := procStatus(b.cur.op.pid())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return b.cur.op.alive()
		}
		return err
	}
	b.peakAnon = max(b.peakAnon, int64(st.RssAnon))
	if hwm := int64(st.VmHWM); hwm > b.peakRSS {
		b.peakRSS = hwm
	}
	return nil
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return out
}

func nameSet(ns []string) map[string]bool {
	m := make(map[string]bool, len(ns))
	for _, n := range ns {
		m[n] = true
	}
	return m
}

func mb(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }

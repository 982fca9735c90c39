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
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
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
}

type results struct {
	Started        time.Time `json:"started"`
	N              int       `json:"n"`
	Nodes          int       `json:"nodes"`
	Resize         int       `json:"resize"`
	CreateOp       phase     `json:"createOperator"`
	CreateDirect   phase     `json:"createDirect"`
	Steady         phase     `json:"steady"`
	ResizeOp       phase     `json:"resizeOperator"`
	ResizeDirect   phase     `json:"resizeDirect"`
	DeleteOp       phase     `json:"deleteOperator"`
	DeleteDirect   phase     `json:"deleteDirect"`
	Whole          requests  `json:"wholeRun"`
	PeakRSSBytes   int64     `json:"peakRSSBytes"`
	RSSAfterCreate int64     `json:"rssAfterCreateBytes"`
	GoHeapBytes    float64   `json:"goHeapInuseBytesAtEnd"`
}

type bench struct {
	e       *env
	cfg     config
	peakRSS int64
}

func measure(ctx context.Context, e *env, cfg config) (*results, error) {
	b := &bench{e: e, cfg: cfg}
	res := &results{Started: time.Now().UTC(), N: cfg.N, Nodes: cfg.Nodes, Resize: cfg.Resize}
	first, err := scrape(ctx, e.op.metricsURL)
	if err != nil {
		return nil, err
	}
	opNames := names("mc", cfg.N)
	dirNames := names("deploy", cfg.N)
	resizeOp, resizeDir := opNames[:cfg.Resize], dirNames[:cfg.Resize]

	// 1. Memcacheds until Ready.
	res.CreateOp, err = b.operatorPhase(ctx, "create Memcacheds", cfg.N, func(ctx context.Context) error {
		return b.parallel(ctx, opNames, func(ctx context.Context, name string) error {
			return b.e.client.Create(ctx, newMemcached(name))
		})
	}, func() (int, error) { return b.countMemcachedsReady(opNames, 1) })
	if err != nil {
		return nil, err
	}
	if res.RSSAfterCreate, err = memory(e.op.cmd.Process.Pid); err != nil {
		return nil, err
	}

	// 2. The same number of Deployments, directly.
	res.CreateDirect, err = b.timed(ctx, "create Deployments directly", cfg.N, func(ctx context.Context) error {
		return b.parallel(ctx, dirNames, func(ctx context.Context, name string) error {
			return b.e.client.Create(ctx, newDeployment(name))
		})
	}, func() (int, error) { return b.countDeploymentsReady(dirNames, 1) })
	if err != nil {
		return nil, err
	}

	// 3. Steady state, with the informers resyncing.
	res.Steady, err = b.operatorPhase(ctx, "steady state", 0, func(ctx context.Context) error {
		return nil
	}, b.sleeper(cfg.Steady))
	if err != nil {
		return nil, err
	}

	// 4. Resize.
	res.ResizeOp, err = b.operatorPhase(ctx, "resize Memcacheds 1->2", cfg.Resize, func(ctx context.Context) error {
		return b.parallel(ctx, resizeOp, func(ctx context.Context, name string) error {
			m := &unstructured.Unstructured{}
			m.SetGroupVersionKind(memcachedGVK)
			m.SetNamespace(nsOperator)
			m.SetName(name)
			return b.e.client.Patch(ctx, m, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"size":2}}`)))
		})
	}, func() (int, error) { return b.countMemcachedsReady(resizeOp, 2) })
	if err != nil {
		return nil, err
	}
	res.ResizeDirect, err = b.timed(ctx, "resize Deployments 1->2 directly", cfg.Resize, func(ctx context.Context) error {
		return b.parallel(ctx, resizeDir, func(ctx context.Context, name string) error {
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: nsDirect, Name: name}}
			return b.e.client.Patch(ctx, d, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":2}}`)))
		})
	}, func() (int, error) { return b.countDeploymentsReady(resizeDir, 2) })
	if err != nil {
		return nil, err
	}

	// 5. Delete.
	res.DeleteOp, err = b.deletePhase(ctx, true, opNames)
	if err != nil {
		return nil, err
	}
	res.DeleteDirect, err = b.deletePhase(ctx, false, dirNames)
	if err != nil {
		return nil, err
	}

	last, err := scrape(ctx, e.op.metricsURL)
	if err != nil {
		return nil, err
	}
	res.Whole = summarise(delta(first, last))
	res.GoHeapBytes = last.sum("go_memstats_heap_inuse_bytes", nil)
	if err := b.pollRSS(); err != nil {
		return nil, err
	}
	res.PeakRSSBytes = b.peakRSS
	return res, nil
}

// operatorPhase is timed with the operator's requests counted.
func (b *bench) operatorPhase(ctx context.Context, name string, total int, act func(context.Context) error, done func() (int, error)) (phase, error) {
	before, err := scrape(ctx, b.e.op.metricsURL)
	if err != nil {
		return phase{}, err
	}
	p, err := b.timed(ctx, name, total, act, done)
	if err != nil {
		return p, err
	}
	// Let the watch events of the last writes arrive, so that passes they
	// trigger are counted in this phase.
	if total > 0 {
		time.Sleep(2 * time.Second)
	}
	after, err := scrape(ctx, b.e.op.metricsURL)
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
			progress(fmt.Sprintf("%-34s %6d/%-6d %7.1fs   operator peak RSS %s", name, max(n, 0), total, el.Seconds(), mb(b.peakRSS)))
			lastPrint = time.Now()
		}
		if n >= total && !acting {
			p.Seconds = el.Seconds()
			p.CPUSeconds = cpuDelta(cpuBefore, b.cpuSnapshot())
			apiAfter, err := b.apiserverMetrics(ctx)
			if err != nil {
				return p, err
			}
			p.ClusterWrites = clusterWrites(delta(apiBefore, apiAfter))
			progress(fmt.Sprintf("%-34s %6d/%-6d %7.1fs   operator peak RSS %s\n", name, n, total, el.Seconds(), mb(b.peakRSS)))
			return p, nil
		}
		if err := b.e.op.alive(); err != nil {
			return p, err
		}
		select {
		case err := <-actErr:
			if err != nil {
				return p, fmt.Errorf("%s: %w", name, err)
			}
			acting = false
		case <-ctx.Done():
			return p, fmt.Errorf("%s: %d of %d after %s: %w", name, n, total, el.Round(time.Second), ctx.Err())
		case <-tick.C:
		}
	}
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

// deletePhase deletes the named Memcacheds (operator) or Deployments and
// waits until they, then everything in their namespace, are gone.
func (b *bench) deletePhase(ctx context.Context, operator bool, objNames []string) (phase, error) {
	ns, name := nsDirect, "delete Deployments directly"
	if operator {
		ns, name = nsOperator, "delete Memcacheds"
	}
	var topGone float64
	start := time.Now()
	act := func(ctx context.Context) error {
		return b.parallel(ctx, objNames, func(ctx context.Context, n string) error {
			var obj client.Object = &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}}
			if operator {
				m := &unstructured.Unstructured{}
				m.SetGroupVersionKind(memcachedGVK)
				m.SetNamespace(ns)
				m.SetName(n)
				obj = m
			}
			return client.IgnoreNotFound(b.e.client.Delete(ctx, obj))
		})
	}
	done := func() (int, error) {
		top, err := b.countTop(ns, operator)
		if err != nil {
			return 0, err
		}
		if top > 0 {
			return len(objNames) - top, nil
		}
		if topGone == 0 {
			topGone = time.Since(start).Seconds()
		}
		left, err := b.countDescendants(ns)
		if err != nil {
			return 0, err
		}
		if left > 0 {
			// Objects gone, children not yet: not done.
			return len(objNames) - 1, nil
		}
		return len(objNames), nil
	}
	run := b.timed
	if operator {
		run = b.operatorPhase
	}
	p, err := run(ctx, name, len(objNames), act, done)
	if err != nil {
		return p, err
	}
	p.Extra = map[string]float64{"objectsGoneSeconds": topGone}
	return p, nil
}

func (b *bench) countTop(ns string, operator bool) (int, error) {
	if operator {
		l := memcachedList()
		if err := b.e.cache.List(context.Background(), l, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			return 0, err
		}
		return len(l.Items), nil
	}
	var l appsv1.DeploymentList
	if err := b.e.cache.List(context.Background(), &l, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	return len(l.Items), nil
}

// countDescendants counts Deployments, ReplicaSets, Pods, Services and PDBs
// left in ns.
func (b *bench) countDescendants(ns string) (int, error) {
	var deps appsv1.DeploymentList
	if err := b.e.cache.List(context.Background(), &deps, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	n := len(deps.Items)
	for _, gvk := range metadataKinds {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := b.e.cache.List(context.Background(), l, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			return 0, err
		}
		n += len(l.Items)
	}
	return n, nil
}

// countMemcachedsReady counts the named Memcacheds that are Ready=True at
// their current generation with the given number of ready pods.
func (b *bench) countMemcachedsReady(objNames []string, pods int64) (int, error) {
	l := memcachedList()
	if err := b.e.cache.List(context.Background(), l, client.InNamespace(nsOperator), client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	want := nameSet(objNames)
	n := 0
	for i := range l.Items {
		if want[l.Items[i].GetName()] && memcachedReady(&l.Items[i], pods) {
			n++
		}
	}
	return n, nil
}

func memcachedReady(m *unstructured.Unstructured, pods int64) bool {
	gen := m.GetGeneration()
	og, _, _ := unstructured.NestedInt64(m.Object, "status", "observedGeneration")
	ready, _, _ := unstructured.NestedInt64(m.Object, "status", "readyReplicas")
	if og != gen || ready != pods {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(m.Object, "status", "conditions")
	for _, c := range conds {
		cm, ok := c.(map[string]any)
		if !ok || cm["type"] != "Ready" {
			continue
		}
		cg, _, _ := unstructured.NestedInt64(cm, "observedGeneration")
		return cm["status"] == "True" && (cg == 0 || cg == gen)
	}
	return false
}

// countDeploymentsReady counts the named Deployments rolled out with the
// given number of available pods: the same test the operator applies before
// it reports Ready.
func (b *bench) countDeploymentsReady(objNames []string, pods int32) (int, error) {
	var l appsv1.DeploymentList
	if err := b.e.cache.List(context.Background(), &l, client.InNamespace(nsDirect), client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	want := nameSet(objNames)
	n := 0
	for i := range l.Items {
		d := &l.Items[i]
		st := d.Status
		if want[d.Name] && st.ObservedGeneration >= d.Generation && ptr.Deref(d.Spec.Replicas, 1) == pods &&
			st.UpdatedReplicas == pods && st.Replicas == pods && st.AvailableReplicas == pods {
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

func (b *bench) pollRSS() error {
	hwm, err := memory(b.e.op.cmd.Process.Pid)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return b.e.op.alive()
		}
		return err
	}
	if hwm > b.peakRSS {
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

func newMemcached(name string) *unstructured.Unstructured {
	m := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"size": int64(1)},
	}}
	m.SetGroupVersionKind(memcachedGVK)
	m.SetNamespace(nsOperator)
	m.SetName(name)
	return m
}

// newDeployment is a plain Deployment with the pod template the operator
// gives a size-1 Memcached (image, command, port, probes), without the
// operator's labels.
func newDeployment(name string) *appsv1.Deployment {
	labels := map[string]string{"app.kubernetes.io/name": "memcached-direct", "app.kubernetes.io/instance": name}
	probe := func(delay int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("memcache")}},
			InitialDelaySeconds: delay, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3,
		}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: nsDirect, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas:             ptr.To[int32](1),
			Selector:             &metav1.LabelSelector{MatchLabels: labels},
			RevisionHistoryLimit: ptr.To[int32](2),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					Containers: []corev1.Container{{
						Name:           "memcached",
						Image:          "memcached:1.6",
						Command:        []string{"memcached"},
						Args:           []string{"-p", "11211", "-m", "64"},
						Ports:          []corev1.ContainerPort{{Name: "memcache", ContainerPort: 11211, Protocol: corev1.ProtocolTCP}},
						ReadinessProbe: probe(0),
						LivenessProbe:  probe(10),
					}},
				},
			},
		},
	}
}

func mb(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }

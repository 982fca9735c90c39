package shard_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/shard"
)

// passes records every reconcile of every replica, to find two replicas
// reconciling one object at once.
type passes struct {
	mu   sync.Mutex
	runs map[string][]run // by object
}

type run struct {
	replica    string
	start, end time.Time
}

func (p *passes) reconciler(replica string) reconcile.Reconciler {
	return reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
		start := time.Now()
		time.Sleep(20 * time.Millisecond) // a pass that takes a while
		p.mu.Lock()
		defer p.mu.Unlock()
		p.runs[req.String()] = append(p.runs[req.String()], run{replica, start, time.Now()})
		return reconcile.Result{}, nil
	})
}

// overlaps lists the objects two replicas reconciled at once.
func (p *passes) overlaps() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for key, runs := range p.runs {
		for i, a := range runs {
			for _, b := range runs[i+1:] {
				if a.replica != b.replica && a.start.Before(b.end) && b.start.Before(a.end) {
					out = append(out, fmt.Sprintf("%s: %s %v-%v and %s %v-%v", key, a.replica, a.start, a.end, b.replica, b.start, b.end))
				}
			}
		}
	}
	return out
}

// last is the replica that last reconciled key.
func (p *passes) last(key string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	runs := p.runs[key]
	if len(runs) == 0 {
		return ""
	}
	return runs[len(runs)-1].replica
}

// replica starts a manager as member identity of r: its cache holds only
// its Widgets, it runs the Sharder, and its Widget controller is wrapped
// in Handoff. The returned stop ends it, releasing its Lease.
func replica(t *testing.T, r shard.Ring, identity string, p *passes) (stop func()) {
	t.Helper()
	stop, _ = replicaOf(t, r, identity, func(ctrl.Manager) reconcile.Reconciler { return p.reconciler(identity) }, nil, nil)
	return stop
}

// replicaOf is replica with the reconciler inner builds, and children:
// the manager caches cached (its own, by Ring.Selector) and the Sharder
// labels them.
func replicaOf(t *testing.T, r shard.Ring, identity string, inner func(ctrl.Manager) reconcile.Reconciler,
	children []shard.Child, cached map[client.Object]labels.Selector) (stop func(), mgr ctrl.Manager) {
	t.Helper()
	byObject := map[client.Object]cache.ByObject{&testv1.Widget{}: {Label: r.Selector(identity)}}
	for obj, sel := range cached {
		req, _ := r.Selector(identity).Requirements()
		byObject[obj] = cache.ByObject{Label: sel.Add(req...)}
	}
	mgr = manager(t, byObject)
	leases, err := coordinationv1client.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(r.Member(leases, identity)); err != nil {
		t.Fatal(err)
	}
	s := &shard.Sharder{Ring: r, Identity: identity, GVK: testv1.GroupVersion.WithKind("Widget"), Children: children}
	if err := s.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	err = ctrl.NewControllerManagedBy(mgr).Named("widgets-" + identity).For(&testv1.Widget{}).
		Complete(shard.Handoff(r, identity, mgr, &testv1.Widget{}, inner(mgr)))
	if err != nil {
		t.Fatal(err)
	}
	return testkit.Start(t, "replica "+identity, mgr), mgr
}

// manager is a member's manager, its cache configured by byObject, with
// no metrics or probes.
func manager(t *testing.T, byObject map[client.Object]cache.ByObject) ctrl.Manager {
	t.Helper()
	// The kinds alone: a manager's scheme need not know Leases.
	scheme := runtime.NewScheme()
	testkit.Must(t, testv1.AddToScheme(scheme))
	testkit.Must(t, corev1.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: new(true)},
		Cache:                  cache.Options{ByObject: byObject},
	})
	testkit.Must(t, err)
	return mgr
}

// TestShardsHandOverWithoutOverlap runs replicas a and b over 30
// Widgets, adds c, then stops b: every Widget ends labelled for the
// member Owner names and was last reconciled by it, and no Widget was
// ever reconciled by two replicas at once.
func TestShardsHandOverWithoutOverlap(t *testing.T) {
	ns := env.Namespace(t)
	r := shard.Ring{Name: "widgets", Namespace: ns, LeaseDuration: 3 * time.Second}
	p := &passes{runs: map[string][]run{}}
	var keys []string
	for i := range 30 {
		w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%d", i), Namespace: ns}}
		if err := env.Client.Create(t.Context(), w); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, ns+"/"+w.Name)
	}
	settled := func(members ...string) {
		t.Helper()
		var why string
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			why = ""
			var list testv1.WidgetList
			if err := env.Client.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			for _, w := range list.Items {
				key := ns + "/" + w.Name
				want := shard.Owner(key, members)
				if got := w.Labels[r.Label()]; got != want || w.Labels[r.DrainLabel()] != "" {
					why = fmt.Sprintf("%s labelled %q (drain %q), want %s", key, got, w.Labels[r.DrainLabel()], want)
					break
				}
				if got := p.last(key); got != want {
					why = fmt.Sprintf("%s last reconciled by %q, want %s", key, got, want)
					break
				}
			}
			if why == "" {
				return
			}
		}
		t.Fatalf("members %v: not settled after 30 s: %s", members, why)
	}

	replica(t, r, "a", p)
	stopB := replica(t, r, "b", p)
	settled("a", "b")
	start := time.Now()
	replica(t, r, "c", p)
	settled("a", "b", "c")
	t.Logf("c joined: settled in %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	stopB()
	settled("a", "c")
	t.Logf("b left: settled in %v", time.Since(start).Round(time.Millisecond))

	// A deletion still reaches the owner's reconciler: only a handover
	// is kept from it.
	victim := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w-0", Namespace: ns}}
	key := ns + "/w-0"
	p.mu.Lock()
	before := len(p.runs[key])
	p.mu.Unlock()
	if err := env.Client.Delete(t.Context(), victim); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		p.mu.Lock()
		after := len(p.runs[key])
		p.mu.Unlock()
		if after > before {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the deletion of %s reached no reconciler", key)
		}
	}
	if got, want := p.last(key), shard.Owner(key, []string{"a", "c"}); got != want {
		t.Errorf("the deletion of %s reached %s, want its member %s", key, got, want)
	}

	if o := p.overlaps(); len(o) > 0 {
		t.Errorf("%d reconciles overlapped another replica's of the same Widget:\n%v", len(o), o)
	}
	moved := 0
	for _, k := range keys {
		if shard.Owner(k, []string{"a", "b"}) != shard.Owner(k, []string{"a", "c"}) {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no Widget changed member: the test proves nothing")
	}
}

// TestSharderKeepsToItsNamespaces: with Ring.Namespaces the sharder
// labels the objects there only; another namespace's are another
// install's business.
func TestSharderKeepsToItsNamespaces(t *testing.T) {
	ns, other := env.Namespace(t), env.Namespace(t)
	r := shard.Ring{Name: "widgets", Namespace: ns, LeaseDuration: 3 * time.Second, Namespaces: []string{ns}}
	for _, n := range []string{ns, other} {
		if err := env.Client.Create(t.Context(), &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: n}}); err != nil {
			t.Fatal(err)
		}
	}
	replica(t, r, "a", &passes{runs: map[string][]run{}})
	label := func(n string) string {
		t.Helper()
		var w testv1.Widget
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: n, Name: "w"}, &w); err != nil {
			t.Fatal(err)
		}
		return w.Labels[r.Label()]
	}
	for end := time.Now().Add(30 * time.Second); label(ns) != "a"; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s/w not labelled for a after 30 s", ns)
		}
	}
	time.Sleep(time.Second)
	if got := label(other); got != "" {
		t.Errorf("%s/w, outside the ring's namespaces, labelled %q", other, got)
	}
}

package shard_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
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
// the Widgets of its slots, it runs the Sharder, and its Widget
// controller is wrapped in Handoff. The returned stop ends it, releasing
// its Lease.
func replica(t *testing.T, r shard.Ring, identity string, p *passes) (stop func()) {
	t.Helper()
	stop, _ = replicaOf(t, r, identity, func(ctrl.Manager) reconcile.Reconciler { return p.reconciler(identity) }, nil, nil)
	return stop
}

// replicaOf is replica with the reconciler inner builds, and children:
// the manager caches cached, by slot, and the Sharder labels them.
func replicaOf(t *testing.T, r shard.Ring, identity string, inner func(ctrl.Manager) reconcile.Reconciler,
	children []shard.Child, cached map[client.Object]labels.Selector) (stop func(), mgr ctrl.Manager) {
	t.Helper()
	kinds := []client.Object{&testv1.Widget{}}
	byObject := map[client.Object]cache.ByObject{}
	for obj, sel := range cached {
		kinds = append(kinds, obj)
		byObject[obj] = cache.ByObject{Label: sel}
	}
	mgr = manager(t, byObject, r.NewCache(identity, kinds...))
	s := &shard.Sharder{Ring: r, GVK: testv1.GroupVersion.WithKind("Widget"), Children: children}
	testkit.Must(t, s.SetupWithManager(mgr))
	err := ctrl.NewControllerManagedBy(mgr).Named("widgets-" + identity).For(&testv1.Widget{}).
		Complete(shard.Handoff(mgr, &testv1.Widget{}, inner(mgr)))
	testkit.Must(t, err)
	return testkit.Start(t, "replica "+identity, mgr), mgr
}

// manager is a member's manager, its cache configured by byObject and
// made by newCache, with no metrics or probes.
func manager(t *testing.T, byObject map[client.Object]cache.ByObject, newCache cache.NewCacheFunc) ctrl.Manager {
	t.Helper()
	return managerWith(t, env.Config, byObject, newCache)
}

// managerWith is manager on cfg.
func managerWith(t *testing.T, cfg *rest.Config, byObject map[client.Object]cache.ByObject, newCache cache.NewCacheFunc) ctrl.Manager {
	t.Helper()
	// The kinds alone: a manager's scheme need not know Leases.
	scheme := runtime.NewScheme()
	testkit.Must(t, testv1.AddToScheme(scheme))
	testkit.Must(t, corev1.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: new(true)},
		Cache:                  cache.Options{ByObject: byObject},
		NewCache:               newCache,
	})
	testkit.Must(t, err)
	return mgr
}

// holders maps each slot of r to the member whose Lease lists it.
func holders(t *testing.T, r shard.Ring) map[int]string {
	t.Helper()
	held, err := r.Holders(t.Context(), env.Client)
	testkit.Must(t, err)
	out := map[int]string{}
	for m, slots := range held {
		for _, n := range slots {
			out[n] = m
		}
	}
	return out
}

// heldBy waits until members, and only they, hold every slot of r, each
// its share, and returns who holds each.
func heldBy(t *testing.T, r shard.Ring, members ...string) map[int]string {
	t.Helper()
	var got map[string]int
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		h := holders(t, r)
		got = map[string]int{}
		for _, m := range h {
			got[m]++
		}
		ok := len(h) == r.Slots && len(got) == len(members)
		for _, m := range members {
			ok = ok && got[m] >= r.Slots/len(members) && got[m] <= (r.Slots+len(members)-1)/len(members)
		}
		if ok {
			return h
		}
	}
	t.Fatalf("slots held: %v; want %d shared by %v", got, r.Slots, members)
	return nil
}

// TestShardsHandOverWithoutOverlap runs replicas a and b over 30
// Widgets, adds c, then stops b: every Widget ends labelled with its
// slot and was last reconciled by the member holding it, and no Widget
// was ever reconciled by two replicas at once.
func TestShardsHandOverWithoutOverlap(t *testing.T) {
	ns := env.Namespace(t)
	r := shard.Ring{Name: "widgets", Namespace: ns, LeaseDuration: 3 * time.Second, Slots: 12}
	p := &passes{runs: map[string][]run{}}
	var keys []types.NamespacedName
	for i := range 30 {
		w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%d", i), Namespace: ns}}
		if err := env.Client.Create(t.Context(), w); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, client.ObjectKeyFromObject(w))
	}
	settled := func(members ...string) map[int]string {
		t.Helper()
		h := heldBy(t, r, members...)
		var why string
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			why = ""
			for _, key := range keys {
				var w testv1.Widget
				if err := env.Client.Get(t.Context(), key, &w); err != nil {
					t.Fatal(err)
				}
				slot := r.Slot(key)
				if got := w.Labels[r.SlotLabel()]; got != strconv.Itoa(slot) {
					why = fmt.Sprintf("%s labelled with slot %q, want %d", key, got, slot)
					break
				}
				if got := p.last(key.String()); got != h[slot] {
					why = fmt.Sprintf("%s last reconciled by %q, want %s, holding slot %d", key, got, h[slot], slot)
					break
				}
			}
			if why == "" {
				return h
			}
		}
		t.Fatalf("members %v: not settled after 30 s: %s", members, why)
		return nil
	}

	replica(t, r, "a", p)
	stopB := replica(t, r, "b", p)
	before := settled("a", "b")
	// Passes after the slots settled: the last pass names the holder.
	for _, k := range keys {
		testkit.Must(t, env.Client.Patch(t.Context(), &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: k.Name, Namespace: ns}},
			client.RawPatch(types.MergePatchType, []byte(`{"spec":{"message":"settled"}}`))))
	}
	settled("a", "b")
	start := time.Now()
	replica(t, r, "c", p)
	settled("a", "b", "c")
	t.Logf("c joined: settled in %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	stopB()
	after := settled("a", "c")
	t.Logf("b left: settled in %v", time.Since(start).Round(time.Millisecond))

	// A deletion still reaches the holder's reconciler.
	key := keys[0]
	p.mu.Lock()
	n := len(p.runs[key.String()])
	p.mu.Unlock()
	testkit.Must(t, env.Client.Delete(t.Context(), &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: ns}}))
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		p.mu.Lock()
		m := len(p.runs[key.String()])
		p.mu.Unlock()
		if m > n {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the deletion of %s reached no reconciler", key)
		}
	}
	if got, want := p.last(key.String()), after[r.Slot(key)]; got != want {
		t.Errorf("the deletion of %s reached %s, want %s, holding its slot", key, got, want)
	}

	if o := p.overlaps(); len(o) > 0 {
		t.Errorf("%d reconciles overlapped another replica's of the same Widget:\n%v", len(o), o)
	}
	moved := 0
	for _, k := range keys {
		if before[r.Slot(k)] != after[r.Slot(k)] {
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
		return w.Labels[r.SlotLabel()]
	}
	want := strconv.Itoa(r.Slot(client.ObjectKey{Namespace: ns, Name: "w"}))
	for end := time.Now().Add(30 * time.Second); label(ns) != want; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s/w not labelled with slot %s after 30 s", ns, want)
		}
	}
	time.Sleep(time.Second)
	if got := label(other); got != "" {
		t.Errorf("%s/w, outside the ring's namespaces, labelled %q", other, got)
	}
}

// sharderPasses is how many passes the Sharders of ring name made, all
// members together, from the controller metrics.
func sharderPasses(t *testing.T, name string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	testkit.Must(t, err)
	var n float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "shard-"+name {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// TestSharderPassesOnlyItsSlots: a member's Sharder passes over the
// objects of the slots it holds only. Queueing every member's objects
// cost each member a queue entry per object of the ring, kept at its
// peak by the queue's maps, and a pass again at every requeue.
func TestSharderPassesOnlyItsSlots(t *testing.T) {
	ns := env.Namespace(t)
	r := shard.Ring{Name: "passes", Namespace: ns, LeaseDuration: 3 * time.Second, Slots: 12, Namespaces: []string{ns}}
	p := &passes{runs: map[string][]run{}}
	for _, id := range []string{"a", "b", "c"} {
		replica(t, r, id, p)
	}
	heldBy(t, r, "a", "b", "c")
	before := sharderPasses(t, r.Name)
	const n = 30
	var keys []types.NamespacedName
	for i := range n {
		w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%d", i), Namespace: ns}}
		testkit.Must(t, env.Client.Create(t.Context(), w))
		keys = append(keys, client.ObjectKeyFromObject(w))
	}
	for _, key := range keys {
		labelled(t, r, key)
	}
	time.Sleep(r.LeaseDuration / 10 * 3) // requeues, if any, come a tenth of a lease apart
	// The holder's: one labels it, and an update before may add one.
	got := sharderPasses(t, r.Name) - before
	t.Logf("%v Sharder passes over %d new Widgets", got, n)
	if most := float64(2 * n); got > most {
		t.Errorf("the three Sharders made %v passes over %d new Widgets, want at most %v: members pass over others' slots", got, n, most)
	}
}

// TestSharderLabelsWhatItTakesOver: objects created while another
// member holds their slot are labelled once this one takes the slot.
func TestSharderLabelsWhatItTakesOver(t *testing.T) {
	ns := env.Namespace(t)
	r := shard.Ring{Name: "takeover", Namespace: ns, LeaseDuration: 3 * time.Second, Slots: 4}
	ghostLease(t, r, []int{0, 1, 2, 3}) // never renewed, holding every slot
	replica(t, r, "a", &passes{runs: map[string][]run{}})
	key := types.NamespacedName{Namespace: ns, Name: "w"}
	testkit.Must(t, env.Client.Create(t.Context(), &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: ns}}))
	if h := holders(t, r); h[r.Slot(key)] != "ghost" {
		t.Fatalf("slot %d held by %q when the Widget was created, want ghost: the test proves nothing", r.Slot(key), h[r.Slot(key)])
	}
	labelled(t, r, key)
}

// labelled waits up to 30 s for the Widget key to carry its slot.
func labelled(t *testing.T, r shard.Ring, key types.NamespacedName) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var w testv1.Widget
		testkit.Must(t, env.Client.Get(t.Context(), key, &w))
		if w.Labels[r.SlotLabel()] == strconv.Itoa(r.Slot(key)) {
			return
		}
		if time.Now().After(end) {
			held, err := r.Holders(t.Context(), env.Client)
			testkit.Must(t, err)
			t.Fatalf("%s not labelled with slot %d after 30 s; the Leases list %v", key, r.Slot(key), held)
		}
	}
}

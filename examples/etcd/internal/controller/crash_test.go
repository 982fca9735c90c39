package controller_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/statusutil"
)

// crash kills the operator at a write of its own: a Kubernetes write or
// an etcd change made in a pass (ctx from inPass), or a store write of a
// backup. Armed, it lets n writes of that kind through; at the next it
// dies, before the write is sent or after its answer is lost. A pass dies
// by a panic (crashed), which the rig's pass recovers; a backup by
// errOperatorDead, from then on for every store write, so that nothing
// of the dead process lands. The rig then restarts the operator.
type crash struct {
	mu    sync.Mutex
	armed map[string]*crashArm // "pass", "backup"
	// dead is the write each kind died at. A pass and the backup it
	// launched run at once: kept apart, neither's death cuts the other
	// at a point the scheduler picks, so a schedule replays exactly.
	dead map[string]string
}

type crashArm struct {
	left  int
	after bool
}

// crashed is the panic of a pass that died.
type crashed struct{ at string }

var errOperatorDead = errors.New("the operator died in this backup")

type passKey struct{}

// inPass marks ctx as a pass's: its writes are the ones a pass crash
// counts.
func inPass(ctx context.Context) context.Context { return context.WithValue(ctx, passKey{}, true) }

// arm makes the operator die at its (n+1)th write of kind from now,
// after sending it if after.
func (c *crash) arm(kind string, n int, after bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed == nil {
		c.armed = map[string]*crashArm{}
	}
	c.armed[kind] = &crashArm{left: n, after: after}
}

// died returns the writes the operator died at, "" if it lives.
func (c *crash) died() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(slices.Sorted(maps.Values(c.dead)), ", ")
}

// restart forgets the deaths and the arms left: a new operator.
func (c *crash) restart() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead, c.armed = nil, nil
}

// write runs send, the write what of kind, unless the operator dies
// before it; it reports whether the operator is dead after it.
func (c *crash) write(kind, what string, send func() error) (dead bool, err error) {
	c.mu.Lock()
	if c.dead[kind] != "" {
		c.mu.Unlock()
		return true, nil
	}
	a := c.armed[kind]
	if a == nil || a.left > 0 {
		if a != nil {
			a.left--
		}
		c.mu.Unlock()
		return false, send()
	}
	delete(c.armed, kind)
	if c.dead == nil {
		c.dead = map[string]string{}
	}
	c.dead[kind] = what + map[bool]string{true: " (sent)", false: " (not sent)"}[a.after]
	c.mu.Unlock()
	if a.after {
		_ = send()
	}
	return true, nil
}

// passWrite is write for a write in ctx: a pass's dies by panic.
func (c *crash) passWrite(ctx context.Context, what string, send func() error) error {
	if c == nil || ctx.Value(passKey{}) == nil {
		return send()
	}
	dead, err := c.write("pass", what, send)
	if dead {
		panic(crashed{at: what})
	}
	return err
}

// crashingEtcd is an etcd client whose changes a pass crash counts.
type crashingEtcd struct {
	etcdclient.Client
	crash *crash
}

func (e crashingEtcd) MemberAddAsLearner(ctx context.Context, peerURL string) (m etcdclient.Member, ms []etcdclient.Member, err error) {
	err = e.crash.passWrite(ctx, "etcd member add "+peerURL, func() error {
		m, ms, err = e.Client.MemberAddAsLearner(ctx, peerURL)
		return err
	})
	return m, ms, err
}

func (e crashingEtcd) MemberPromote(ctx context.Context, id uint64) error {
	return e.crash.passWrite(ctx, fmt.Sprintf("etcd member promote %x", id), func() error { return e.Client.MemberPromote(ctx, id) })
}

func (e crashingEtcd) MemberRemove(ctx context.Context, id uint64) error {
	return e.crash.passWrite(ctx, fmt.Sprintf("etcd member remove %x", id), func() error { return e.Client.MemberRemove(ctx, id) })
}

func (e crashingEtcd) Put(ctx context.Context, kvs []etcdclient.KeyValue) error {
	return e.crash.passWrite(ctx, fmt.Sprintf("etcd put of %d keys", len(kvs)), func() error { return e.Client.Put(ctx, kvs) })
}

func (e crashingEtcd) Disarm(ctx context.Context, a etcdclient.Alarm) error {
	return e.crash.passWrite(ctx, "etcd alarm disarm", func() error { return e.Client.Disarm(ctx, a) })
}

func (e crashingEtcd) Compact(ctx context.Context, rev int64) error {
	return e.crash.passWrite(ctx, fmt.Sprintf("etcd compact at %d", rev), func() error { return e.Client.Compact(ctx, rev) })
}

func (e crashingEtcd) Defragment(ctx context.Context, endpoint string) error {
	return e.crash.passWrite(ctx, "etcd defragment "+endpoint, func() error { return e.Client.Defragment(ctx, endpoint) })
}

func (e crashingEtcd) MoveLeader(ctx context.Context, transferee uint64) error {
	return e.crash.passWrite(ctx, fmt.Sprintf("etcd move leader to %x", transferee), func() error { return e.Client.MoveLeader(ctx, transferee) })
}

// crashingFactory makes crashingEtcd clients.
func crashingFactory(f etcdclient.Factory, c *crash) etcdclient.Factory {
	return etcdclient.FactoryFunc(func(ctx context.Context, endpoints []string, opts ...etcdclient.DialOption) (etcdclient.Client, error) {
		cl, err := f.New(ctx, endpoints, opts...)
		if err != nil {
			return nil, err
		}
		return crashingEtcd{Client: cl, crash: c}, nil
	})
}

// crashingStore is a backup store whose writes a backup crash counts.
type crashingStore struct {
	backup.Store
	crash *crash
}

func (s crashingStore) Put(ctx context.Context, key string, r io.Reader) (n int64, err error) {
	dead, err := s.crash.write("backup", "store put "+key, func() error {
		n, err = s.Store.Put(ctx, key, r)
		return err
	})
	if dead {
		return 0, errOperatorDead
	}
	return n, err
}

func (s crashingStore) Delete(ctx context.Context, key string) error {
	dead, err := s.crash.write("backup", "store delete "+key, func() error { return s.Store.Delete(ctx, key) })
	if dead {
		return errOperatorDead
	}
	return err
}

// crashingStores resolves stores as resolve does, crashingStore each.
func crashingStores(resolve controller.StoreResolver, c *crash) controller.StoreResolver {
	return func(ctx context.Context, namespace string, ref v1alpha1.StoreReference) (backup.Store, error) {
		st, err := resolve(ctx, namespace, ref)
		if err != nil {
			return nil, err
		}
		cs := crashingStore{Store: st, crash: c}
		if cl, ok := st.(backup.IncompleteCleaner); ok {
			return crashingCleaner{crashingStore: cs, cleaner: cl}, nil
		}
		return cs, nil
	}
}

// crashingCleaner is a crashingStore of a store that cleans its
// incomplete uploads: retention calls that too.
type crashingCleaner struct {
	crashingStore
	cleaner backup.IncompleteCleaner
}

func (s crashingCleaner) CleanIncomplete(ctx context.Context, prefix string, olderThan time.Time) (n int, err error) {
	dead, err := s.crash.write("backup", "store clean "+prefix, func() error {
		n, err = s.cleaner.CleanIncomplete(ctx, prefix, olderThan)
		return err
	})
	if dead {
		return 0, errOperatorDead
	}
	return n, err
}

// kindOf names obj's kind for a crash's log.
func kindOf(obj client.Object) string {
	if k := obj.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", obj), "*")
}

// applyName names an apply configuration for a crash's log.
func applyName(obj runtime.ApplyConfiguration) string {
	name := fmt.Sprintf("%T", obj)
	if k, ok := obj.(interface{ GetKind() string }); ok {
		name = k.GetKind()
	}
	if n, ok := obj.(interface{ GetName() *string }); ok && n.GetName() != nil {
		name += " " + *n.GetName()
	}
	return name
}

// passOrDie runs a pass of cluster name, marked inPass, and waits for
// what it launched. A pass or backup that died (g.crash) restarts the
// operator; died names the writes it died at.
func (g *rig) passOrDie(name string) (res crreconcile.Result, died string, err error) {
	g.t.Helper()
	return g.reconcileOrDie(g.r, name)
}

// reconcileOrDie is passOrDie for r, the cluster's or the backups'
// Reconciler.
func (g *rig) reconcileOrDie(r crreconcile.Reconciler, name string) (res crreconcile.Result, died string, err error) {
	g.t.Helper()
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(crashed); !ok {
					panic(r)
				}
			}
		}()
		res, err = r.Reconcile(inPass(g.t.Context()), crreconcile.Request{NamespacedName: types.NamespacedName{Namespace: g.ns, Name: name}})
	}()
	if werr := g.runner.Wait(g.t.Context()); werr != nil {
		g.t.Fatal(werr)
	}
	if died = g.crash.died(); died != "" {
		g.crash.restart()
		g.startOperator()
	}
	return res, died, err
}

// TestScalingSurvivesADeathAtEveryWrite: the operator dies at each write
// of a scaling in turn (a Kubernetes write or an etcd change), before
// sending it or after its answer is lost, and starts afresh. The scaling
// must end as without the death: every member once in etcd, voting, on
// its own pod and claim, and no claim left of a member removed. One
// cluster scales from 3 to 5 and back, dying at the nth write each way.
func TestScalingSurvivesADeathAtEveryWrite(t *testing.T) {
	for _, after := range []bool{false, true} {
		t.Run(map[bool]string{false: "before", true: "after"}[after], func(t *testing.T) {
			t.Parallel()
			g := newRig(t)
			g.create(cluster("d", 3))
			g.converge("d", 30)
			deaths := 0
			for n := 0; ; n++ {
				died := false
				for _, size := range []int32{5, 3} {
					if at := g.scaleDying("d", size, n, after); at != "" {
						died = true
						deaths++
						g.converge("d", 40)
						g.wantMembers(t, "d", int(size), at)
					}
				}
				if !died {
					break // past both scalings' last write
				}
			}
			if deaths < 10 {
				t.Errorf("%d deaths: the scalings made too few writes to test", deaths)
			}
			t.Logf("%d deaths, each followed by a scaling that ended", deaths)
		})
	}
}

// scaleDying scales cluster name to size with the operator set to die
// at the (n+1)th write of its passes; it returns the write it died at,
// "" if the scaling ended first.
func (g *rig) scaleDying(name string, size int32, n int, after bool) string {
	g.t.Helper()
	c := g.get(name)
	c.Spec.Size = size
	if err := g.c.Update(g.t.Context(), c); err != nil {
		g.t.Fatal(err)
	}
	g.crash.arm("pass", n, after)
	defer g.crash.restart()
	for range 40 {
		if g.converged(name) {
			return ""
		}
		_, died, _ := g.passOrDie(name)
		g.kubelet(name)
		if died != "" {
			return died
		}
	}
	g.t.Fatalf("scaling %s to %d did not end in 40 passes", name, size)
	return ""
}

// converged reports whether cluster name is Available, not Progressing,
// at its generation.
func (g *rig) converged(name string) bool {
	g.t.Helper()
	c := g.get(name)
	return statusutil.IsFalse(c, v1alpha1.ConditionProgressing) && c.Status.ObservedGeneration == c.Generation &&
		statusutil.IsTrue(c, v1alpha1.ConditionAvailable)
}

// wantMembers fails unless etcd has size voting members, each with a pod
// and a claim of its name, and no other claim is left.
func (g *rig) wantMembers(t *testing.T, cluster string, size int, context string) {
	t.Helper()
	var names, voters []string
	for _, m := range g.fake.Members() {
		names = append(names, m.Name+"-data")
		if !m.IsLearner {
			voters = append(voters, m.Name)
		}
	}
	slices.Sort(names)
	if len(voters) != size {
		t.Errorf("after a death at %s: voters %v, want %d", context, voters, size)
	}
	if claims := g.names(&corev1.PersistentVolumeClaimList{}); !slices.Equal(claims, names) {
		t.Errorf("after a death at %s: claims %v, want one per member %v", context, claims, names)
	}
	if pods := g.names(&corev1.PodList{}); len(pods) != size {
		t.Errorf("after a death at %s: pods %v, want %d", context, pods, size)
	}
}

// TestDeletionSurvivesADeathAtEveryWrite: the operator dies at each write
// of a cluster's deletion in turn (a pass's, or a store write of the
// final backup), before sending it or after its answer is lost. The
// cluster must go with one final backup holding every key written
// before the deletion.
func TestDeletionSurvivesADeathAtEveryWrite(t *testing.T) {
	for _, kind := range []string{"pass", "backup"} {
		for _, after := range []bool{false, true} {
			t.Run(kind+"/"+map[bool]string{false: "before", true: "after"}[after], func(t *testing.T) {
				t.Parallel()
				deaths := 0
				for n := 0; ; n++ {
					if !deleteDying(t, kind, n, after) {
						break
					}
					deaths++
				}
				if deaths < 2 {
					t.Errorf("%d deaths: the deletion made too few writes to test", deaths)
				}
				t.Logf("%d deaths, each followed by a deletion with its final backup", deaths)
			})
		}
	}
}

// deleteDying deletes a new backed-up cluster with the operator set
// to die at the (n+1)th write of kind, and checks how it went; it
// reports whether the operator died.
func deleteDying(t *testing.T, kind string, n int, after bool) bool {
	t.Helper()
	g := newRig(t)
	c := g.createBackedUp("f", 3, 0, 30)
	ec, err := g.fake.Factory().New(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := range 5 {
		k := fmt.Sprintf("/k/%d", i)
		if err := ec.Put(t.Context(), []etcdclient.KeyValue{{Key: []byte(k), Value: []byte(k)}}); err != nil {
			t.Fatal(err)
		}
		want[k] = k
	}
	if err := g.c.Delete(t.Context(), g.get("f")); err != nil {
		t.Fatal(err)
	}
	g.crash.arm(kind, n, after)
	died := ""
	for i := 0; i < 100 && g.exists(c); i++ {
		var at string
		if _, at, _ = g.passOrDie("f"); at != "" && died == "" {
			died = at
		}
		g.kubelet("f")
	}
	if g.exists(c) {
		t.Fatalf("death at %q: the cluster is still there after 100 passes: %+v", died, g.get("f").Status.Conditions)
	}
	var finals []backup.Manifest
	for _, m := range g.storedBackups("f") {
		if m.Snapshot.Extra[controller.ExtraTrigger] == controller.TriggerFinal {
			finals = append(finals, m)
		}
	}
	if len(finals) != 1 {
		t.Errorf("death at %q: %d final backups stored, want 1", died, len(finals))
		return died != ""
	}
	if diff := cmp.Diff(want, g.backupKeys("f", finals[0])); diff != "" {
		t.Errorf("death at %q: the final backup's keys (-written +backed up):\n%s", died, diff)
	}
	return died != ""
}

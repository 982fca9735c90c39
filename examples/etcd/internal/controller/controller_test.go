package controller_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/fsstore"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/seedrestore"
	"github.com/opkit-dev/opkit/operation"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
	"github.com/opkit-dev/opkit/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, &env, testenv.WithCRDs("../../config/crd/bases"), testenv.WithScheme(v1alpha1.AddToScheme))
}

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// faults injects Kubernetes write failures: the next write of kind
// (Pod, PersistentVolumeClaim, EtcdBackup) with verb (apply, delete,
// status-apply) fails once.
type faults struct {
	mu   sync.Mutex
	next map[string]bool
}

func (f *faults) arm(verb, kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next[verb+"/"+kind] = true
}

func (f *faults) take(verb, kind string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next[verb+"/"+kind] {
		delete(f.next, verb+"/"+kind)
		return fmt.Errorf("injected %s failure for %s", verb, kind)
	}
	return nil
}

// clock is the hooks' time: frozen at its start until a test advances it,
// so that no assertion depends on how long a test takes.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// rig drives the EtcdCluster Reconciler pass by pass against envtest, with a
// fake etcd, a fake kubelet and a fake clock.
type rig struct {
	t      *testing.T
	c      client.Client
	fake   *etcdclient.Fake
	faults *faults
	// crash kills the operator at a write of a pass or a backup.
	crash  *crash
	clock  *clock
	r      *reconcile.Reconciler[*v1alpha1.EtcdCluster]
	br     *reconcile.Reconciler[*v1alpha1.EtcdBackup]
	ns     string
	fsRoot string
	// hooks are the EtcdCluster hooks, for tests that set options.
	hooks *controller.ClusterHooks
	// events receives the events of both hooks.
	events *events.FakeRecorder
	// dials are the options of every etcd client the hooks made.
	dialMu sync.Mutex
	dials  []etcdclient.DialOptions
	// What startOperator builds the hooks from. cache, when set, is the
	// client the hooks read and write through instead of c, as the
	// manager's cached client; c stays their uncached reader.
	scheme  *runtime.Scheme
	factory etcdclient.Factory
	cache   client.Client
	// stores, when set, resolves the stores instead of DefaultStores.
	stores controller.StoreResolver
	// runner runs the backups of the running operator; stopRunner ends
	// them.
	runner     *operation.Runner
	stopRunner func()
	// rebuilt holds the tokens of the rebuilds whose init containers
	// moved the revision on (AnnotationRebuild); the first
	// rebuildsBehindLog rebuild pods find the database behind its log
	// and move nothing.
	rebuilt           map[string]bool
	rebuildsBehindLog int
	// realControllers is set once kube-controller-manager runs for the
	// test: its disruption controller then counts the budgets.
	realControllers *atomic.Bool
}

// countBudgets does for the budgets of namespace what the disruption
// controller does, which envtest does not run: without a count, the
// Eviction API refuses every eviction. A pod is healthy when Ready and
// not being deleted.
func countBudgets(ctx context.Context, cl client.Client, namespace string) error {
	var pdbs policyv1.PodDisruptionBudgetList
	if err := cl.List(ctx, &pdbs, client.InNamespace(namespace)); err != nil {
		return err
	}
	for i := range pdbs.Items {
		pdb := &pdbs.Items[i]
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			return err
		}
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return err
		}
		healthy := int32(0)
		for j := range pods.Items {
			if p := &pods.Items[j]; p.DeletionTimestamp == nil && isReady(p) {
				healthy++
			}
		}
		desired := int32(pdb.Spec.MinAvailable.IntValue())
		pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, ExpectedPods: int32(len(pods.Items)),
			CurrentHealthy: healthy, DesiredHealthy: desired, DisruptionsAllowed: max(healthy-desired, 0)}
		if err := cl.Status().Update(ctx, pdb); err != nil && !apierrors.IsConflict(err) {
			return err
		}
	}
	return nil
}

// startRunner stops the operator's backup runs, if any, as a killed
// operator's end, and starts a new Runner.
func (g *rig) startRunner() *operation.Runner {
	if g.stopRunner != nil {
		g.stopRunner()
	}
	runner := operation.NewRunner(g.clock.Now)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = runner.Start(ctx)
	}()
	g.runner, g.stopRunner = runner, sync.OnceFunc(func() { cancel(); <-done })
	g.t.Cleanup(g.stopRunner)
	return runner
}

// dialed returns the options of the etcd clients made so far.
func (g *rig) dialed() []etcdclient.DialOptions {
	g.dialMu.Lock()
	defer g.dialMu.Unlock()
	return slices.Clone(g.dials)
}

// pvcStoreDir is where the operator finds the filesystem store
// storeRef.pvcName name of the rig's namespace (DefaultStores).
func (g *rig) pvcStoreDir(name string) string {
	return filepath.Join(g.fsRoot, g.ns, name)
}

// mountPVCStore makes the filesystem store storeRef.pvcName name of the
// rig's namespace, as mounting a claim into the operator would.
func (g *rig) mountPVCStore(name string) {
	g.t.Helper()
	if err := os.MkdirAll(g.pvcStoreDir(name), 0o700); err != nil {
		g.t.Fatal(err)
	}
}

func newRig(t *testing.T) *rig {
	t.Helper()
	scheme := newScheme(t)
	direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	fl := &faults{next: map[string]bool{}}
	cr := &crash{}
	var realControllers atomic.Bool
	c := interceptor.NewClient(direct, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return cr.passWrite(ctx, "create "+kindOf(obj)+" "+obj.GetName(), func() error { return cl.Create(ctx, obj, opts...) })
		},
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return cr.passWrite(ctx, "update "+kindOf(obj)+" "+obj.GetName(), func() error { return cl.Update(ctx, obj, opts...) })
		},
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			return cr.passWrite(ctx, "patch "+kindOf(obj)+" "+obj.GetName(), func() error { return cl.Patch(ctx, obj, patch, opts...) })
		},
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			return cr.passWrite(ctx, sub+" update "+kindOf(obj)+" "+obj.GetName(), func() error { return cl.SubResource(sub).Update(ctx, obj, opts...) })
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			return cr.passWrite(ctx, sub+" patch "+kindOf(obj)+" "+obj.GetName(), func() error { return cl.SubResource(sub).Patch(ctx, obj, patch, opts...) })
		},
		SubResourceCreate: func(ctx context.Context, cl client.Client, sub string, obj, subResource client.Object, opts ...client.SubResourceCreateOption) error {
			if sub == "eviction" && !realControllers.Load() {
				if err := countBudgets(ctx, cl, obj.GetNamespace()); err != nil {
					return err
				}
			}
			return cr.passWrite(ctx, sub+" of "+kindOf(obj)+" "+obj.GetName(), func() error { return cl.SubResource(sub).Create(ctx, obj, subResource, opts...) })
		},
		Apply: func(ctx context.Context, cl client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			k, _ := obj.(interface{ GetKind() string })
			if k != nil {
				if err := fl.take("apply", k.GetKind()); err != nil {
					return err
				}
			}
			return cr.passWrite(ctx, "apply "+applyName(obj), func() error { return cl.Apply(ctx, obj, opts...) })
		},
		SubResourceApply: func(ctx context.Context, cl client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			if k, ok := obj.(interface{ GetKind() string }); ok {
				if err := fl.take(sub+"-apply", k.GetKind()); err != nil {
					return err
				}
			}
			return cr.passWrite(ctx, sub+" apply "+applyName(obj), func() error { return cl.SubResource(sub).Apply(ctx, obj, opts...) })
		},
		Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			kind := fmt.Sprintf("%T", obj)[len("*v1."):]
			if err := fl.take("delete", kind); err != nil {
				return err
			}
			return cr.passWrite(ctx, "delete "+kind+" "+obj.GetName(), func() error { return cl.Delete(ctx, obj, opts...) })
		},
	})
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "etcd-"}}
	if err := c.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	// envtest runs no namespace controller: the Services' cluster IPs would
	// stay allocated, and the campaign's hundreds of clusters exhaust them.
	t.Cleanup(func() {
		var svcs corev1.ServiceList
		if err := direct.List(context.Background(), &svcs, client.InNamespace(ns.Name)); err != nil {
			t.Errorf("listing Services to delete: %v", err)
			return
		}
		for i := range svcs.Items {
			if err := direct.Delete(context.Background(), &svcs.Items[i]); client.IgnoreNotFound(err) != nil {
				t.Errorf("deleting Service %s: %v", svcs.Items[i].Name, err)
			}
		}
	})
	g := &rig{t: t, c: c, fake: etcdclient.NewFake(), faults: fl, crash: cr, clock: &clock{now: time.Now()}, ns: ns.Name, fsRoot: t.TempDir(),
		realControllers: &realControllers}
	// The hooks reach whatever g.fake is at the time, so that a test can
	// replace the etcd cluster.
	factory := etcdclient.FactoryFunc(func(ctx context.Context, endpoints []string, opts ...etcdclient.DialOption) (etcdclient.Client, error) {
		g.dialMu.Lock()
		g.dials = append(g.dials, etcdclient.Dial(opts...))
		g.dialMu.Unlock()
		return g.fake.Factory().New(ctx, endpoints)
	})
	g.scheme, g.factory = scheme, factory
	g.events = events.NewFakeRecorder(10000)
	g.startOperator()
	return g
}

// startOperator makes the rig's hooks and Reconcilers. Called again, it is
// a restart of the operator: what the hooks keep in memory is gone, the
// cluster, the store and the fakes stay.
func (g *rig) startOperator() {
	g.t.Helper()
	t := g.t
	stores := controller.DefaultStores(g.c, g.fsRoot)
	if g.stores != nil {
		stores = g.stores
	}
	stores, factory := crashingStores(stores, g.crash), crashingFactory(g.factory, g.crash)
	// Children remember what they applied: a restart forgets it.
	cl, opts := g.c, []reconcile.ChildrenOption(nil)
	if g.cache != nil {
		cl, opts = g.cache, []reconcile.ChildrenOption{reconcile.WithUncachedReader(g.c)}
	}
	children, err := reconcile.NewChildren(cl, g.scheme, opts...)
	if err != nil {
		t.Fatal(err)
	}
	runner := g.startRunner()
	hooks, err := controller.NewClusterHooks(controller.ClusterConfig{Client: cl, APIReader: g.c, Children: children, Etcd: factory, Stores: stores,
		ScratchDir: t.TempDir(), Now: g.clock.Now, Recorder: g.events, Runner: runner})
	if err != nil {
		t.Fatal(err)
	}
	r, err := reconcile.New[*v1alpha1.EtcdCluster](cl, g.scheme, hooks,
		reconcile.WithFieldOwner(controller.FieldOwner), reconcile.WithNamespaceDeletion(),
		reconcile.WithSummary(statusutil.WithConditions(v1alpha1.ConditionAvailable),
			statusutil.WithNegativePolarityConditions(v1alpha1.ConditionDegraded)))
	if err != nil {
		t.Fatal(err)
	}
	backupHooks, err := controller.NewBackupHooks(controller.BackupConfig{Client: g.c, Etcd: factory, Stores: stores, Now: g.clock.Now, Recorder: g.events,
		Runner: runner})
	if err != nil {
		t.Fatal(err)
	}
	br, err := reconcile.New[*v1alpha1.EtcdBackup](g.c, g.scheme, backupHooks,
		reconcile.WithSummary(statusutil.WithConditions(controller.ConditionComplete)))
	if err != nil {
		t.Fatal(err)
	}
	g.r, g.br, g.hooks = r, br, hooks
}

func (g *rig) create(c *v1alpha1.EtcdCluster) {
	g.t.Helper()
	c.Namespace = g.ns
	if err := g.c.Create(g.t.Context(), c); err != nil {
		g.t.Fatal(err)
	}
}

func (g *rig) get(name string) *v1alpha1.EtcdCluster {
	g.t.Helper()
	var c v1alpha1.EtcdCluster
	if err := g.c.Get(g.t.Context(), types.NamespacedName{Namespace: g.ns, Name: name}, &c); err != nil {
		g.t.Fatal(err)
	}
	return &c
}

// passAsync runs one reconcile pass and returns its error, leaving what
// it launched running.
func (g *rig) passAsync(name string) error {
	g.t.Helper()
	_, err := g.r.Reconcile(g.t.Context(), crreconcile.Request{NamespacedName: types.NamespacedName{Namespace: g.ns, Name: name}})
	return err
}

// pass runs one reconcile pass and returns its error.
func (g *rig) pass(name string) error {
	g.t.Helper()
	// What the pass launched ends before the test goes on; an operator
	// that died in it (g.crash) is restarted.
	_, _, err := g.passOrDie(name)
	return err
}

// operationPass runs passes of cluster name while a backup is under way
// (status.backupOperation), as a manager's requeues would, and returns the
// last pass's error; it ends when the cluster is gone.
func (g *rig) operationPass(name string) error {
	g.t.Helper()
	for range 1000 {
		err := g.pass(name)
		var c v1alpha1.EtcdCluster
		if gerr := g.c.Get(g.t.Context(), types.NamespacedName{Namespace: g.ns, Name: name}, &c); apierrors.IsNotFound(gerr) {
			return err
		} else if gerr != nil {
			g.t.Fatal(gerr)
		}
		if c.Status.BackupOperation == nil {
			return err
		}
	}
	g.t.Fatalf("EtcdCluster %s: a scheduled backup still under way after 1000 passes", name)
	return nil
}

// kubelet marks new pods Running and starts their fake members.
func (g *rig) kubelet(name string) {
	g.t.Helper()
	g.runPods(name, true)
}

// runPods marks new pods Running and, with start, starts their fake
// members and marks the pods Ready; without, the members never answer and
// the pods stay not Ready.
func (g *rig) runPods(name string, start bool) {
	g.t.Helper()
	var pods corev1.PodList
	if err := g.c.List(g.t.Context(), &pods, client.InNamespace(g.ns)); err != nil {
		g.t.Fatal(err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodRunning {
			continue
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		if err := g.c.Status().Update(g.t.Context(), p); apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue // the real garbage collector, where it runs, deleted or changed it
		} else if err != nil {
			g.t.Fatal(err)
		}
		if start {
			g.startMember(name, p.Name)
		}
	}
}

// startMember starts the fake etcd member of pod and marks the pod Ready,
// as the kubelet does once etcd's /readyz passes.
func (g *rig) startMember(cluster, pod string) {
	g.t.Helper()
	c := g.get(cluster)
	var p corev1.Pod
	if err := g.c.Get(g.t.Context(), client.ObjectKey{Namespace: g.ns, Name: pod}, &p); err != nil {
		g.t.Fatal(err)
	}
	// The init containers of a rebuild's restart (seedrestore).
	if token := p.Annotations[controller.AnnotationRebuild]; token != "" && !g.rebuilt[token] {
		if g.rebuildsBehindLog > 0 {
			g.rebuildsBehindLog--
		} else {
			g.fake.MoveRevision(seedrestore.RevisionBump)
			if g.rebuilt == nil {
				g.rebuilt = map[string]bool{}
			}
			g.rebuilt[token] = true
		}
	}
	g.fake.Start(pod, controller.PeerURL(c, pod), controller.InClusterClientURL(c, pod))
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := g.c.Status().Update(g.t.Context(), &p); err != nil {
		g.t.Fatal(err)
	}
}

// condition is the part of a condition tests compare.
type condition struct {
	Status metav1.ConditionStatus
	Reason string
}

// conditionsOf returns the conditions of obj with the given types.
func conditionsOf(obj statusutil.Getter, types ...string) map[string]condition {
	out := map[string]condition{}
	for _, typ := range types {
		if c := statusutil.Get(obj, typ); c != nil {
			out[typ] = condition{c.Status, c.Reason}
		}
	}
	return out
}

// converge alternates passes and the kubelet until the cluster reports
// Progressing=False, and returns the number of passes and their errors.
func (g *rig) converge(name string, maxPasses int) (int, []error) {
	g.t.Helper()
	var errs []error
	for i := 1; i <= maxPasses; i++ {
		if err := g.pass(name); err != nil {
			errs = append(errs, err)
		}
		g.kubelet(name)
		c := g.get(name)
		if statusutil.IsFalse(c, v1alpha1.ConditionProgressing) && c.Status.ObservedGeneration == c.Generation &&
			statusutil.IsTrue(c, v1alpha1.ConditionAvailable) {
			return i, errs
		}
	}
	c := g.get(name)
	g.t.Fatalf("not converged after %d passes; errors %v; conditions %+v; etcd calls %v", maxPasses, errs, c.Status.Conditions, g.fake.Calls())
	return 0, nil
}

// names lists the names of list's objects in the rig's namespace that
// are not being deleted, sorted.
func (g *rig) names(list client.ObjectList, opts ...client.ListOption) []string {
	g.t.Helper()
	if err := g.c.List(g.t.Context(), list, append(opts, client.InNamespace(g.ns))...); err != nil {
		g.t.Fatal(err)
	}
	var out []string
	switch l := list.(type) {
	case *corev1.PodList:
		for _, o := range l.Items {
			if o.DeletionTimestamp == nil {
				out = append(out, o.Name)
			}
		}
	case *corev1.PersistentVolumeClaimList:
		// envtest runs no pvc-protection controller: deleted claims stay
		// terminating.
		for _, o := range l.Items {
			if o.DeletionTimestamp == nil {
				out = append(out, o.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}

func (g *rig) etcdMembers() []string {
	var out []string
	for _, m := range g.fake.Members() {
		out = append(out, fmt.Sprintf("%s learner=%v", m.Name, m.IsLearner))
	}
	slices.Sort(out)
	return out
}

// createBackedUp creates cluster name of size members whose spec.backup
// goes to the PVC store "backups" (mounted) with retention (0: the
// default), and converges it within passes.
func (g *rig) createBackedUp(name string, size, retention int32, passes int) *v1alpha1.EtcdCluster {
	g.t.Helper()
	g.mountPVCStore("backups")
	c := cluster(name, size)
	c.Spec.Backup = &v1alpha1.BackupSpec{StoreRef: v1alpha1.StoreReference{PVCName: "backups"}, Retention: retention}
	g.create(c)
	g.converge(name, passes)
	return c
}

func cluster(name string, size int32) *v1alpha1.EtcdCluster {
	return &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.EtcdClusterSpec{Size: size, Version: "3.6.16"},
	}
}

func voters(names ...string) []string {
	var out []string
	for _, n := range names {
		out = append(out, n+" learner=false")
	}
	return out
}

func TestClusterBootstrapAndGrow(t *testing.T) {
	g := newRig(t)
	g.create(cluster("a", 3))
	g.converge("a", 20)

	c := g.get("a")
	if diff := cmp.Diff([]string{"a-0", "a-1", "a-2"}, g.names(&corev1.PodList{})); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a-0-data", "a-1-data", "a-2-data"}, g.names(&corev1.PersistentVolumeClaimList{})); diff != "" {
		t.Errorf("claims (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(voters("a-0", "a-1", "a-2"), g.etcdMembers()); diff != "" {
		t.Errorf("etcd members (-want +got):\n%s", diff)
	}
	var pdb policyv1.PodDisruptionBudget
	if err := g.c.Get(t.Context(), types.NamespacedName{Namespace: g.ns, Name: "a"}, &pdb); err != nil {
		t.Fatal(err)
	}
	if got := pdb.Spec.MinAvailable.IntValue(); got != 2 {
		t.Errorf("PDB minAvailable %d, want 2", got)
	}
	for _, svc := range []string{"a", "a-client"} {
		if err := g.c.Get(t.Context(), types.NamespacedName{Namespace: g.ns, Name: svc}, &corev1.Service{}); err != nil {
			t.Errorf("service %s: %v", svc, err)
		}
	}
	if c.Status.ReadyMembers != 3 || c.Status.Version != "3.6.16" || len(c.Status.Members) != 3 {
		t.Errorf("status: ready %d version %q members %+v", c.Status.ReadyMembers, c.Status.Version, c.Status.Members)
	}
	for _, cond := range []struct {
		typ  string
		want metav1.ConditionStatus
	}{{"Ready", metav1.ConditionTrue}, {"Available", metav1.ConditionTrue}, {"Progressing", metav1.ConditionFalse}, {"Degraded", metav1.ConditionFalse}} {
		if got := statusutil.Get(c, cond.typ); got == nil || got.Status != cond.want {
			t.Errorf("condition %s = %+v, want %s", cond.typ, got, cond.want)
		}
	}
	var learnerAdds, promotes int
	for _, call := range g.fake.Calls() {
		switch {
		case len(call) > 18 && call[:18] == "MemberAddAsLearner":
			learnerAdds++
		case len(call) > 13 && call[:13] == "MemberPromote":
			promotes++
		}
	}
	if learnerAdds != 2 || promotes != 2 {
		t.Errorf("%d learner adds and %d promotes, want 2 and 2", learnerAdds, promotes)
	}
}

func TestClusterScaleDownRemovesMembersAndData(t *testing.T) {
	g := newRig(t)
	g.create(cluster("s", 3))
	g.converge("s", 20)
	c := g.get("s")
	c.Spec.Size = 1
	if err := g.c.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	g.converge("s", 20)
	if diff := cmp.Diff([]string{"s-0"}, g.names(&corev1.PodList{})); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"s-0-data"}, g.names(&corev1.PersistentVolumeClaimList{})); diff != "" {
		t.Errorf("claims (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(voters("s-0"), g.etcdMembers()); diff != "" {
		t.Errorf("etcd members (-want +got):\n%s", diff)
	}
}

// TestClusterFailureInjection fails one etcd call or one Kubernetes write
// during growth to 3 and shrinkage to 1, and requires the cluster to
// converge to exactly the desired members, pods and claims.
func TestClusterFailureInjection(t *testing.T) {
	injected := errors.New("injected")
	notYet := fmt.Errorf("etcdserver: unhealthy cluster: %w", etcdclient.ErrNotYet)
	tests := []struct {
		name string
		// grow is true to inject while growing 1 -> 3, false while
		// shrinking 3 -> 1.
		grow bool
		arm  func(g *rig)
		// quiet failures make a pass wait instead of fail.
		quiet bool
	}{
		{"pod create fails after MemberAddAsLearner", true, func(g *rig) { g.faults.arm("apply", "Pod") }, false},
		{"claim create fails after MemberAddAsLearner", true, func(g *rig) { g.faults.arm("apply", "PersistentVolumeClaim") }, false},
		{"MemberAddAsLearner response lost after it took effect", true, func(g *rig) { g.fake.FailNext("MemberAddAsLearner", injected, true) }, false},
		{"MemberAddAsLearner fails", true, func(g *rig) { g.fake.FailNext("MemberAddAsLearner", injected, false) }, false},
		{"MemberPromote fails", true, func(g *rig) { g.fake.FailNext("MemberPromote", injected, false) }, false},
		{"MemberPromote response lost after it took effect", true, func(g *rig) { g.fake.FailNext("MemberPromote", injected, true) }, false},
		{"MemberList fails", true, func(g *rig) { g.fake.FailNext("MemberList", injected, false) }, true},
		// etcd's strict reconfiguration check, and a learner not in sync.
		{"MemberAddAsLearner refused for now", true, func(g *rig) { g.fake.FailNext("MemberAddAsLearner", notYet, false) }, true},
		{"MemberPromote refused for now", true, func(g *rig) { g.fake.FailNext("MemberPromote", notYet, false) }, true},
		{"pod delete fails after MemberRemove", false, func(g *rig) { g.faults.arm("delete", "Pod") }, false},
		{"claim delete fails after MemberRemove", false, func(g *rig) { g.faults.arm("delete", "PersistentVolumeClaim") }, false},
		{"MemberRemove response lost after it took effect", false, func(g *rig) { g.fake.FailNext("MemberRemove", injected, true) }, false},
		{"MemberRemove fails", false, func(g *rig) { g.fake.FailNext("MemberRemove", injected, false) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newRig(t)
			size := int32(1)
			if !tt.grow {
				size = 3
			}
			g.create(cluster("f", size))
			g.converge("f", 20)
			tt.arm(g)
			c := g.get("f")
			c.Spec.Size = 4 - size // 1 -> 3, 3 -> 1
			if err := g.c.Update(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			_, errs := g.converge("f", 30)
			if len(errs) == 0 && !tt.quiet {
				t.Errorf("no pass failed; the injected failure was not hit")
			}
			if len(errs) > 0 && tt.quiet {
				t.Errorf("passes failed, want them to wait: %v", errs)
			}
			want := []string{"f-0"}
			if tt.grow {
				want = []string{"f-0", "f-1", "f-2"}
			}
			if diff := cmp.Diff(want, g.names(&corev1.PodList{})); diff != "" {
				t.Errorf("pods (-want +got):\n%s", diff)
			}
			var claims []string
			for _, n := range want {
				claims = append(claims, n+"-data")
			}
			if diff := cmp.Diff(claims, g.names(&corev1.PersistentVolumeClaimList{})); diff != "" {
				t.Errorf("claims (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(voters(want...), g.etcdMembers()); diff != "" {
				t.Errorf("etcd members (-want +got):\n%s", diff)
			}
		})
	}
}

func TestClusterDeletedPodIsRecreated(t *testing.T) {
	g := newRig(t)
	g.create(cluster("d", 3))
	g.converge("d", 20)
	before := g.etcdMembers()
	if err := g.c.Delete(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "d-1", Namespace: g.ns}}); err != nil {
		t.Fatal(err)
	}
	g.fake.SetHealthy(controller.PeerURL(g.get("d"), "d-1"), false)
	if err := g.pass("d"); err != nil {
		t.Fatal(err)
	}
	c := g.get("d")
	if !statusutil.IsTrue(c, v1alpha1.ConditionDegraded) {
		t.Errorf("Degraded = %+v, want True while d-1 is missing", statusutil.Get(c, v1alpha1.ConditionDegraded))
	}
	g.converge("d", 10)
	if diff := cmp.Diff([]string{"d-0", "d-1", "d-2"}, g.names(&corev1.PodList{})); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, g.etcdMembers()); diff != "" {
		t.Errorf("etcd members changed (-want +got):\n%s", diff)
	}
}

func TestClusterUpgrade(t *testing.T) {
	g := newRig(t)
	g.create(cluster("u", 3))
	g.converge("u", 20)

	c := g.get("u")
	c.Spec.Version = "3.4.30"
	if err := g.c.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	if err := g.pass("u"); err != nil {
		t.Fatal(err)
	}
	c = g.get("u")
	if st := statusutil.Get(c, "Stalled"); st == nil || st.Status != metav1.ConditionTrue {
		t.Fatalf("Stalled = %+v after a downgrade, want True", st)
	}
	t.Logf("stalled: %s", statusutil.Get(c, "Stalled").Message)

	c.Spec.Version = "3.7.0"
	if err := g.c.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	g.converge("u", 30)
	var pods corev1.PodList
	if err := g.c.List(t.Context(), &pods, client.InNamespace(g.ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if v := p.Labels[controller.LabelVersion]; v != "3.7.0" {
			t.Errorf("pod %s runs %s, want 3.7.0", p.Name, v)
		}
	}
	if c := g.get("u"); c.Status.Version != "3.7.0" {
		t.Errorf("status.version %q, want 3.7.0", c.Status.Version)
	}
}

// TestPodTemplateChangeRollsMembers: a new spec.podTemplate reaches every
// member pod, each restarted on its data (same member ID), and the
// cluster is Ready again only once all carry it. Before pod revisions it
// was accepted, reported applied, and ignored by existing members.
func TestPodTemplateChangeRollsMembers(t *testing.T) {
	g := newRig(t)
	g.create(cluster("t", 3))
	g.converge("t", 20)
	before := g.get("t").Status.Members

	c := g.get("t")
	c.Spec.PodTemplate.Labels = map[string]string{"team": "storage"}
	if err := g.c.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	g.converge("t", 30)
	var pods corev1.PodList
	if err := g.c.List(t.Context(), &pods, client.InNamespace(g.ns), client.MatchingLabels{controller.LabelCluster: "t"}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 3 {
		t.Fatalf("%d member pods, want 3", len(pods.Items))
	}
	for _, p := range pods.Items {
		if p.Labels["team"] != "storage" || p.Annotations[controller.AnnotationPodRevision] != controller.PodRevision(c) {
			t.Errorf("pod %s: labels %v, revision %s; want the new template's", p.Name, p.Labels, p.Annotations[controller.AnnotationPodRevision])
		}
	}
	if diff := cmp.Diff(before, g.get("t").Status.Members); diff != "" {
		t.Errorf("members changed (-before +after); a new template restarts them on their data:\n%s", diff)
	}
}

func TestBackupAndFinalBackup(t *testing.T) {
	g := newRig(t)
	g.createBackedUp("b", 1, 3, 10)

	eb := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: g.ns},
		Spec: v1alpha1.EtcdBackupSpec{ClusterName: "b", StoreRef: v1alpha1.StoreReference{PVCName: "backups"}}}
	if err := g.c.Create(t.Context(), eb); err != nil {
		t.Fatal(err)
	}
	if err := g.backupPass(eb.Name); err != nil {
		t.Fatal(err)
	}
	if err := g.c.Get(t.Context(), client.ObjectKeyFromObject(eb), eb); err != nil {
		t.Fatal(err)
	}
	if eb.Status.Phase != v1alpha1.BackupSucceeded || eb.Status.SHA256 == "" || eb.Status.SizeBytes == 0 || eb.Status.EtcdVersion != "3.6.16" {
		t.Fatalf("backup status %+v", eb.Status)
	}
	store, err := fsstore.New(g.pvcStoreDir("backups"))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := backup.Sub(store, g.ns+"/b")
	if err != nil {
		t.Fatal(err)
	}
	m, err := backup.Verify(t.Context(), sub, eb.Status.BackupID)
	if err != nil {
		t.Fatalf("verifying the backup: %v", err)
	}
	if m.SHA256 != eb.Status.SHA256 {
		t.Errorf("manifest sha256 %s, status %s", m.SHA256, eb.Status.SHA256)
	}

	// Deleting the cluster takes a final backup before the finalizer goes,
	// even when an on-demand backup was taken after deletion began: that
	// one may predate the last writes, so it is not the final backup.
	if err := g.c.Delete(t.Context(), g.get("b")); err != nil {
		t.Fatal(err)
	}
	// deletionTimestamp has a one-second resolution; start the on-demand
	// backup in a later second, where it counts as newer than the deletion.
	time.Sleep(time.Until(g.get("b").DeletionTimestamp.Add(1100 * time.Millisecond)))
	late := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: g.ns},
		Spec: v1alpha1.EtcdBackupSpec{ClusterName: "b", StoreRef: v1alpha1.StoreReference{PVCName: "backups"}}}
	if err := g.c.Create(t.Context(), late); err != nil {
		t.Fatal(err)
	}
	if err := g.backupPass(late.Name); err != nil {
		t.Fatal(err)
	}
	if err := g.operationPass("b"); err != nil {
		t.Fatal(err)
	}
	list, err := backup.List(t.Context(), sub)
	if err != nil {
		t.Fatal(err)
	}
	triggers := map[string]int{}
	for _, m := range list {
		triggers[m.Snapshot.Extra[controller.ExtraTrigger]]++
	}
	if diff := cmp.Diff(map[string]int{controller.TriggerOnDemand: 2, controller.TriggerFinal: 1}, triggers); diff != "" {
		t.Errorf("backups after deletion by trigger (-want +got):\n%s", diff)
	}
	if err := g.c.Get(t.Context(), types.NamespacedName{Namespace: g.ns, Name: "b"}, &v1alpha1.EtcdCluster{}); client.IgnoreNotFound(err) != nil || err == nil {
		t.Errorf("cluster still exists after its final backup: %v", err)
	}
}

// TestClusterUnreachableIsDegraded: running member pods that do not answer
// (the operator cannot reach them) make the cluster Degraded with reason
// Unreachable and the error, and unavailable, until they answer again.
func TestClusterUnreachableIsDegraded(t *testing.T) {
	g := newRig(t)
	g.create(cluster("n", 1))
	g.converge("n", 10)

	g.fake.FailNext("New", errors.New("injected dial failure"), false)
	if err := g.pass("n"); err != nil {
		t.Fatal(err)
	}
	c := g.get("n")
	type cond struct {
		Status metav1.ConditionStatus
		Reason string
	}
	got := map[string]cond{}
	for _, typ := range []string{v1alpha1.ConditionDegraded, v1alpha1.ConditionProgressing, v1alpha1.ConditionAvailable} {
		if cc := statusutil.Get(c, typ); cc != nil {
			got[typ] = cond{cc.Status, cc.Reason}
		}
	}
	want := map[string]cond{
		v1alpha1.ConditionDegraded:    {metav1.ConditionTrue, controller.ReasonUnreachable},
		v1alpha1.ConditionProgressing: {metav1.ConditionTrue, "Unreachable"},
		v1alpha1.ConditionAvailable:   {metav1.ConditionFalse, "NoQuorum"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
	if msg := statusutil.Get(c, v1alpha1.ConditionDegraded).Message; !strings.Contains(msg, "injected dial failure") {
		t.Errorf("Degraded message %q does not name the error", msg)
	}
	if diff := cmp.Diff([]string{"n-0"}, g.names(&corev1.PodList{})); diff != "" {
		t.Errorf("pods changed while unreachable (-want +got):\n%s", diff)
	}

	g.converge("n", 5)
	if c := g.get("n"); !statusutil.IsFalse(c, v1alpha1.ConditionDegraded) {
		t.Errorf("Degraded = %+v after members answer again", statusutil.Get(c, v1alpha1.ConditionDegraded))
	}
}

// TestOrphanedClaimIsNotAdopted: a claim left by an earlier cluster of the
// same name (deleted with --cascade=orphan) holds an old member's data. A
// new cluster must not mount it as its seed: it leaves the claim as it is,
// creates no pod, and says which object is in the way.
func TestOrphanedClaimIsNotAdopted(t *testing.T) {
	g := newRig(t)
	old := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "o-0-data", Namespace: g.ns,
			Labels: map[string]string{controller.LabelCluster: "o", controller.LabelMember: "o-0"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if err := g.c.Create(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	g.create(cluster("o", 3))
	for range 3 {
		_ = g.pass("o")
		g.kubelet("o")
	}
	if err := g.c.Get(t.Context(), client.ObjectKeyFromObject(old), old); err != nil {
		t.Fatal(err)
	}
	if len(old.OwnerReferences) != 0 {
		t.Errorf("the orphaned claim was adopted: %v", old.OwnerReferences)
	}
	var pods corev1.PodList
	if err := g.c.List(t.Context(), &pods, client.InNamespace(g.ns)); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("%d pods created on an orphaned claim", len(pods.Items))
	}
	rc := statusutil.Get(g.get("o"), statusutil.ConditionReconciling)
	if rc == nil || rc.Reason != controller.ReasonChildConflict || !strings.Contains(rc.Message, "o-0-data") {
		t.Errorf("Reconciling = %+v, want reason %s naming the claim", rc, controller.ReasonChildConflict)
	}
}

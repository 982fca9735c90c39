package reconcile_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
)

type widgetDep = reconcile.Dependent[*testv1.Widget, *corev1.ConfigMap]

// configMapDep declares the ConfigMap <widget>-<name>, ready once it
// carries the label ready=true (set by the test, as another controller
// would report a child ready).
func configMapDep(name string, dependsOn ...string) *widgetDep {
	return &widgetDep{
		Name: name,
		Build: func(_ context.Context, w *testv1.Widget) (*corev1.ConfigMap, error) {
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: w.Name + "-" + name, Namespace: w.Namespace},
				Data: map[string]string{"replicas": strconv.Itoa(int(w.Spec.Replicas))}}, nil
		},
		DependsOn: dependsOn,
		Ready: func(cm *corev1.ConfigMap) (bool, string) {
			if cm.Labels["ready"] == "true" {
				return true, ""
			}
			return false, "no ready label"
		},
	}
}

// workflowHooks run a Workflow as their whole Reconcile.
type workflowHooks struct {
	wf *reconcile.Workflow[*testv1.Widget]
}

func (h *workflowHooks) Reconcile(ctx context.Context, w *testv1.Widget) reconcile.Result {
	return h.wf.Reconcile(ctx, w)
}

func newWorkflow(t *testing.T, f *fixture, deps ...reconcile.DependentOf[*testv1.Widget]) *reconcile.Workflow[*testv1.Widget] {
	t.Helper()
	wf, err := reconcile.NewWorkflow[*testv1.Widget](f.children(), deps...)
	testkit.Must(t, err)
	return wf
}

func (f *fixture) configMap(name string) *corev1.ConfigMap {
	f.t.Helper()
	var cm corev1.ConfigMap
	err := env.Client.Get(f.t.Context(), types.NamespacedName{Namespace: f.ns, Name: name}, &cm)
	if apierrors.IsNotFound(err) {
		return nil
	}
	testkit.Must(f.t, err)
	return &cm
}

func (f *fixture) markReady(name string) {
	f.t.Helper()
	cm := f.configMap(name)
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels["ready"] = "true"
	testkit.Must(f.t, env.Client.Update(f.t.Context(), cm))
}

// reconciling returns the reason and message of Reconciling on widget
// name.
func (f *fixture) reconciling(name string) string {
	f.t.Helper()
	c := statusutil.Get(f.get(name), statusutil.ConditionReconciling)
	if c == nil {
		return ""
	}
	return c.Reason + ": " + c.Message
}

// TestWorkflowWaitsForADependency: a child is applied only once what it
// depends on is ready; meanwhile the parent waits with no requeue, its
// condition is Unknown, and once all is ready a pass writes nothing.
func TestWorkflowWaitsForADependency(t *testing.T) {
	f := newFixture(t)
	app := configMapDep("app", "config")
	app.Condition = "AppReady"
	app.Ready = nil
	wf := newWorkflow(t, f, app, configMapDep("config"))
	r := newReconciler(t, f, &workflowHooks{wf: wf})
	f.createWidget("w", testv1.WidgetSpec{Replicas: 1})

	res, err := f.pass(r, "w")
	testkit.Must(t, err)
	if res != (crreconcile.Result{}) {
		t.Errorf("waiting pass result = %+v, want no requeue (a watch event ends the wait)", res)
	}
	if f.configMap("w-config") == nil || f.configMap("w-app") != nil {
		t.Fatalf("after the first pass: config %v, app %v; want config only", f.configMap("w-config") != nil, f.configMap("w-app") != nil)
	}
	if got, want := f.reconciling("w"), "WaitingForDependent: config: no ready label"; got != want {
		t.Errorf("Reconciling = %q, want %q", got, want)
	}
	wantConditions(t, f.get("w"), []condition{
		{"AppReady", "Unknown", reconcile.ReasonWaitingForDependent, "waiting for config: no ready label", 1},
		{statusutil.ConditionReady, "Unknown", reconcile.ReasonWaitingForDependent, "config: no ready label", 1},
		{statusutil.ConditionReconciling, "True", reconcile.ReasonWaitingForDependent, "config: no ready label", 1},
	})

	f.markReady("w-config")
	f.mustPass(r, "w")
	f.wantWrites(2) // app created, status
	if f.configMap("w-app") == nil {
		t.Fatal("app not created once config was ready")
	}
	wantConditions(t, f.get("w"), []condition{
		{"AppReady", "True", reconcile.ReasonDependentReady, "", 1},
		{statusutil.ConditionReady, "True", statusutil.ReasonSucceeded, "", 1},
	})
	f.mustPass(r, "w")
	f.wantWrites(0)
}

// TestWorkflowOrder: dependents are applied after what they depend on,
// in declaration order otherwise.
func TestWorkflowOrder(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	var order []string
	record := func(d *widgetDep) *widgetDep {
		d.Ready = nil
		d.Applied = func(_ context.Context, _ *testv1.Widget, _, _ *corev1.ConfigMap, _ reconcile.ChildWrite) {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, d.Name)
		}
		return d
	}
	wf := newWorkflow(t, f, record(configMapDep("c", "b")), record(configMapDep("d")), record(configMapDep("b", "a")), record(configMapDep("a")))
	r := newReconciler(t, f, &workflowHooks{wf: wf})
	f.createWidget("w", testv1.WidgetSpec{})
	f.mustPass(r, "w")
	if diff := cmp.Diff([]string{"a", "b", "c", "d"}, order); diff != "" {
		t.Errorf("apply order (-want +got):\n%s", diff)
	}
}

// TestWorkflowDeletesAnUnwantedChild: a child that is no longer wanted is
// deleted, its condition says NotWanted, and it comes back when wanted;
// an unwanted child that is gone costs no write.
func TestWorkflowDeletesAnUnwantedChild(t *testing.T) {
	f := newFixture(t)
	budget := configMapDep("budget")
	budget.Ready = nil
	budget.Condition = "BudgetReady"
	budget.Wanted = func(w *testv1.Widget) bool { return w.Spec.Replicas > 1 }
	r := newReconciler(t, f, &workflowHooks{wf: newWorkflow(t, f, budget)})
	f.createWidget("w", testv1.WidgetSpec{Replicas: 2})
	steps := []struct {
		replicas   int32
		wantChild  bool
		wantWrites int
		cond       condition
	}{
		{2, true, 2, condition{"BudgetReady", "True", reconcile.ReasonDependentReady, "", 1}},
		{1, false, 2, condition{"BudgetReady", "True", reconcile.ReasonNotWanted, "not wanted by the spec", 2}},
		{1, false, 0, condition{"BudgetReady", "True", reconcile.ReasonNotWanted, "not wanted by the spec", 2}},
		{3, true, 2, condition{"BudgetReady", "True", reconcile.ReasonDependentReady, "", 3}},
	}
	for i, s := range steps {
		w := f.get("w")
		if w.Spec.Replicas != s.replicas {
			w.Spec.Replicas = s.replicas
			testkit.Must(t, env.Client.Update(t.Context(), w))
		}
		f.mustPass(r, "w")
		f.wantWrites(s.wantWrites)
		if got := f.configMap("w-budget") != nil; got != s.wantChild {
			t.Errorf("step %d (replicas %d): child exists %v, want %v", i, s.replicas, got, s.wantChild)
		}
		if c := statusutil.Get(f.get("w"), "BudgetReady"); c == nil || (condition{c.Type, string(c.Status), c.Reason, c.Message, c.ObservedGeneration}) != s.cond {
			t.Errorf("step %d: condition %+v, want %+v", i, c, s.cond)
		}
	}
}

// TestWorkflowAdoption: an object of a child's name without a controller
// is refused (ChildConflict, left untouched) unless the dependent adopts.
func TestWorkflowAdoption(t *testing.T) {
	for _, adopt := range []bool{false, true} {
		t.Run(map[bool]string{false: "refused", true: "adopted"}[adopt], func(t *testing.T) {
			f := newFixture(t)
			dep := configMapDep("config")
			dep.Ready = nil
			dep.Adopt = adopt
			r := newReconciler(t, f, &workflowHooks{wf: newWorkflow(t, f, dep)})
			orphan := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "w-config", Namespace: f.ns}, Data: map[string]string{"replicas": "9"}}
			testkit.Must(t, env.Client.Create(t.Context(), orphan))
			f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
			res, err := f.pass(r, "w")
			testkit.Must(t, err)
			cm := f.configMap("w-config")
			controlled := metav1.GetControllerOf(cm) != nil
			if controlled != adopt || (cm.Data["replicas"] == "1") != adopt {
				t.Errorf("after a pass: controlled %v, data %v; want adopted %v", controlled, cm.Data, adopt)
			}
			if !adopt {
				if res.RequeueAfter != reconcile.ChildConflictRequeue || !strings.HasPrefix(f.reconciling("w"), reconcile.ReasonChildConflict+": ") {
					t.Errorf("refused adoption: result %+v, Reconciling %q; want ChildConflict, requeued after %v", res, f.reconciling("w"), reconcile.ChildConflictRequeue)
				}
			}
		})
	}
}

// TestWorkflowKeepsGoingPastAFailure: a child that fails to build does not
// stop the children that do not depend on it, and the pass is retried.
func TestWorkflowKeepsGoingPastAFailure(t *testing.T) {
	f := newFixture(t)
	broken := configMapDep("broken")
	broken.Build = func(context.Context, *testv1.Widget) (*corev1.ConfigMap, error) {
		return nil, errors.New("no template")
	}
	after := configMapDep("after", "broken")
	other := configMapDep("other")
	other.Ready = nil
	r := newReconciler(t, f, &workflowHooks{wf: newWorkflow(t, f, broken, after, other)})
	f.createWidget("w", testv1.WidgetSpec{})
	if _, err := f.pass(r, "w"); err == nil || !strings.Contains(err.Error(), "building broken: no template") {
		t.Errorf("pass error = %v, want the build error", err)
	}
	if f.configMap("w-other") == nil || f.configMap("w-after") != nil {
		t.Errorf("other applied %v, after applied %v; want other only", f.configMap("w-other") != nil, f.configMap("w-after") != nil)
	}
}

func TestNewWorkflowRefusesWhatCannotBeOrdered(t *testing.T) {
	named := func(name string, on ...string) reconcile.DependentOf[*testv1.Widget] {
		return configMapDep(name, on...)
	}
	tests := []struct {
		name string
		deps []reconcile.DependentOf[*testv1.Widget]
		want string
	}{
		{"no name", []reconcile.DependentOf[*testv1.Widget]{named("")}, "dependent 0 has no Name"},
		{"a name twice", []reconcile.DependentOf[*testv1.Widget]{named("a"), named("a")}, `two dependents are named "a"`},
		{"an unknown dependency", []reconcile.DependentOf[*testv1.Widget]{named("a", "b")}, `"a" depends on "b", which is not declared`},
		{"a cycle", []reconcile.DependentOf[*testv1.Widget]{named("a", "c"), named("b", "a"), named("c", "b")}, "dependency cycle a -> c -> b -> a"},
		{"an unstructured child", []reconcile.DependentOf[*testv1.Widget]{&reconcile.Dependent[*testv1.Widget, *unstructured.Unstructured]{Name: "u"}}, "must be a pointer to a typed struct"},
	}
	f := newFixture(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := reconcile.NewWorkflow[*testv1.Widget](f.children(), tt.deps...)
			if !errors.Is(err, reconcile.ErrInvalidWorkflow) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewWorkflow = %v, want ErrInvalidWorkflow naming %q", err, tt.want)
			}
		})
	}
}

// TestWithDependentsEndsAWaitByWatch: with WithDependents, the change that
// makes a child ready reaches the controller as a watch event, so the
// waiting parent (no requeue) goes on at once.
func TestWithDependentsEndsAWaitByWatch(t *testing.T) {
	f := newFixture(t)
	mgr := newManager(t, config.Controller{SkipNameValidation: ptr.To(true)})
	children, err := reconcile.NewChildren(mgr.GetClient(), env.Scheme)
	testkit.Must(t, err)
	wf, err := reconcile.NewWorkflow[*testv1.Widget](children, configMapDep("app", "config"), configMapDep("config"))
	testkit.Must(t, err)
	// Only this test's Widgets: the controller sees earlier tests' too.
	hooks := &workflowHooks{wf: wf}
	_, err = reconcile.SetupWithManager[*testv1.Widget](mgr, &nsFilter{ns: f.ns, inner: hooks},
		reconcile.WithName("dependents-watch"), reconcile.WithDependents(wf))
	testkit.Must(t, err)
	testkit.Run(t, mgr)
	f.createWidget("w", testv1.WidgetSpec{})
	waitFor(t, f, "w", func(*testv1.Widget) bool { return f.configMap("w-config") != nil })
	f.markReady("w-config")
	start := time.Now()
	waitFor(t, f, "w", func(*testv1.Widget) bool { return f.configMap("w-app") != nil })
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("app created %v after config became ready; want a watch event, not a requeue", d)
	}
}

// nsFilter passes the Widgets of one namespace to inner.
type nsFilter struct {
	ns    string
	inner reconcile.Hooks[*testv1.Widget]
}

func (h *nsFilter) Reconcile(ctx context.Context, w *testv1.Widget) reconcile.Result {
	if w.Namespace != h.ns {
		return reconcile.Done()
	}
	return h.inner.Reconcile(ctx, w)
}

// TestWorkflowUnwantedChildEdges: an unwanted dependent whose Build lacks
// its inputs does not fail the pass when ObjectKey names its object; an
// object of an unwanted child's name that is not the parent's is left
// alone, not waited on; and a failed apply says so in the dependent's
// condition. Before, Build ran first and its error failed every pass; the
// foreign object held the Workflow in ChildConflict every 30 s for good;
// and the condition kept its last value.
func TestWorkflowUnwantedChildEdges(t *testing.T) {
	t.Run("unwanted, Build fails", func(t *testing.T) {
		f := newFixture(t)
		dep := configMapDep("tls")
		dep.Ready, dep.Condition = nil, "TLSReady"
		dep.Wanted = func(w *testv1.Widget) bool { return w.Spec.Message != "" }
		dep.Build = func(_ context.Context, w *testv1.Widget) (*corev1.ConfigMap, error) {
			if w.Spec.Message == "" {
				return nil, errors.New("no certificate named")
			}
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: w.Name + "-tls", Namespace: w.Namespace}}, nil
		}
		dep.ObjectKey = func(w *testv1.Widget) client.ObjectKey {
			return client.ObjectKey{Namespace: w.Namespace, Name: w.Name + "-tls"}
		}
		r := newReconciler(t, f, &workflowHooks{wf: newWorkflow(t, f, dep)})
		f.createWidget("w", testv1.WidgetSpec{Message: "cert"})
		f.mustPass(r, "w")
		if f.configMap("w-tls") == nil {
			t.Fatal("wanted child not applied")
		}
		w := f.get("w")
		w.Spec.Message = ""
		testkit.Must(t, env.Client.Update(t.Context(), w))
		if _, err := f.pass(r, "w"); err != nil {
			t.Fatalf("pass with an unwanted child Build cannot build: %v", err)
		}
		if f.configMap("w-tls") != nil {
			t.Error("unwanted child still exists")
		}
		if c := statusutil.Get(f.get("w"), "TLSReady"); c == nil || c.Reason != reconcile.ReasonNotWanted {
			t.Errorf("TLSReady = %+v, want NotWanted", c)
		}
	})
	t.Run("unwanted, not the parent's", func(t *testing.T) {
		f := newFixture(t)
		dep := configMapDep("budget")
		dep.Ready, dep.Condition = nil, "BudgetReady"
		dep.Wanted = func(*testv1.Widget) bool { return false }
		foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "w-budget", Namespace: f.ns}}
		testkit.Must(t, env.Client.Create(t.Context(), foreign))
		r := newReconciler(t, f, &workflowHooks{wf: newWorkflow(t, f, dep)})
		f.createWidget("w", testv1.WidgetSpec{})
		res, err := f.pass(r, "w")
		if err != nil || res.RequeueAfter != 0 {
			t.Errorf("pass = %+v, %v; want Done: nothing of the parent's to delete", res, err)
		}
		if f.configMap("w-budget") == nil {
			t.Error("another's object of the unwanted child's name was deleted")
		}
		if c := statusutil.Get(f.get("w"), "BudgetReady"); c == nil || c.Reason != reconcile.ReasonNotWanted {
			t.Errorf("BudgetReady = %+v, want NotWanted", c)
		}
	})
	t.Run("apply fails", func(t *testing.T) {
		f := newFixture(t)
		dep := configMapDep("config")
		dep.Ready, dep.Condition = nil, "ConfigReady"
		r := newReconciler(t, f, &workflowHooks{wf: newWorkflow(t, f, dep)})
		f.createWidget("w", testv1.WidgetSpec{})
		f.mustPass(r, "w")
		dep.Build = func(_ context.Context, w *testv1.Widget) (*corev1.ConfigMap, error) {
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: w.Name + "-config", Namespace: w.Namespace},
				Data: map[string]string{"bad key!": "x"}}, nil
		}
		if _, err := f.pass(r, "w"); err == nil {
			t.Fatal("pass applying an invalid ConfigMap succeeded")
		}
		if c := statusutil.Get(f.get("w"), "ConfigReady"); c == nil || c.Status != metav1.ConditionFalse || c.Reason != reconcile.ReasonDependentFailed {
			t.Errorf("ConfigReady = %+v, want False with reason %s", c, reconcile.ReasonDependentFailed)
		}
	})
}

// TestWorkflowTeardown: Teardown deletes the children in the reverse of
// their dependency order, each once the ones after it are gone: with
// "app" depending on "db", db is deleted only after app has gone (here
// app stays a while: a finalizer of its own); Done once none is left.
func TestWorkflowTeardown(t *testing.T) {
	f := newFixture(t)
	db, app := configMapDep("db"), configMapDep("app", "db")
	db.Ready, app.Ready = nil, nil
	wf := newWorkflow(t, f, app, db)
	r := newReconciler(t, f, &workflowHooks{wf: wf})
	f.createWidget("w", testv1.WidgetSpec{})
	f.mustPass(r, "w")
	cm := f.configMap("w-app")
	cm.Finalizers = []string{"test.opkit.dev/slow"}
	testkit.Must(t, env.Client.Update(t.Context(), cm))

	res := wf.Teardown(t.Context(), f.get("w"))
	if res.Outcome() != reconcile.OutcomeWaiting || !strings.Contains(res.Message(), "app") {
		t.Errorf("Teardown with app going = %s %q, want Waiting naming app", res.Outcome(), res.Message())
	}
	if f.configMap("w-db") == nil {
		t.Fatal("db deleted while app, which depends on it, still exists")
	}
	cm = f.configMap("w-app")
	cm.Finalizers = nil
	testkit.Must(t, env.Client.Update(t.Context(), cm))
	if res := wf.Teardown(t.Context(), f.get("w")); res.Outcome() != reconcile.OutcomeDone {
		t.Errorf("Teardown once app went = %s %q, want Done", res.Outcome(), res.Message())
	}
	if f.configMap("w-db") != nil || f.configMap("w-app") != nil {
		t.Error("children left after Teardown")
	}
}

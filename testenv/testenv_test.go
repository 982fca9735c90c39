package testenv_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
	"github.com/opkit-dev/opkit/testenv"
)

func TestStartNeedsAssets(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", "")
	if _, err := testenv.Start(); !errors.Is(err, testenv.ErrNoAssets) {
		t.Errorf("Start without KUBEBUILDER_ASSETS = %v, want ErrNoAssets", err)
	}
}

func podTemplate() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "a"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}, RestartPolicy: corev1.RestartPolicyNever},
	}
}

// TestBuiltinStatus: the API server accepts the status each helper writes,
// and it reads as the built-in controller's would.
func TestBuiltinStatus(t *testing.T) {
	ctx, ns := t.Context(), env.Namespace(t)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}
	always := podTemplate()
	always.Spec.RestartPolicy = corev1.RestartPolicyAlways
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3), Selector: sel, Template: always}}
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2), Selector: sel, Template: always}}
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: ns}, Spec: batchv1.JobSpec{Template: podTemplate()}}
	for _, o := range []client.Object{d, s, j} {
		testkit.Must(t, env.Client.Create(ctx, o))
	}
	testkit.Must(t, testenv.SetDeploymentAvailable(ctx, env.Client, client.ObjectKeyFromObject(d)))
	testkit.Must(t, testenv.SetStatefulSetReady(ctx, env.Client, client.ObjectKeyFromObject(s)))
	testkit.Must(t, testenv.SetJobComplete(ctx, env.Client, client.ObjectKeyFromObject(j)))

	testkit.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(d), d))
	if d.Status.AvailableReplicas != 3 || d.Status.ObservedGeneration != d.Generation {
		t.Errorf("Deployment status = %+v, want 3 available at generation %d", d.Status, d.Generation)
	}
	testkit.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(s), s))
	if s.Status.ReadyReplicas != 2 || s.Status.CurrentRevision != s.Status.UpdateRevision {
		t.Errorf("StatefulSet status = %+v, want 2 ready on one revision", s.Status)
	}
	testkit.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(j), j))
	var complete bool
	for _, c := range j.Status.Conditions {
		complete = complete || (c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue)
	}
	if !complete || j.Status.Succeeded != 1 {
		t.Errorf("Job status = %+v, want Complete with 1 succeeded", j.Status)
	}
}

type readyHooks struct{}

func (readyHooks) Reconcile(context.Context, *testv1.Widget) reconcile.Result {
	return reconcile.Done()
}

// TestManagerAndWaits: a manager per test runs a Reconciler until the test
// ends, and the waits see what it writes.
func TestManagerAndWaits(t *testing.T) {
	ns := env.Namespace(t)
	env.StartManager(t, func(mgr ctrl.Manager) error {
		_, err := reconcile.SetupWithManager[*testv1.Widget](mgr, readyHooks{})
		return err
	})
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns}}
	testkit.Must(t, env.Client.Create(t.Context(), w))
	testenv.WaitForCondition(t, env.Client, w, statusutil.ConditionReady, metav1.ConditionTrue)
	testenv.WaitFor(t, env.Client, w, func(w *testv1.Widget) bool { return w.Status.ObservedGeneration == w.Generation })
}

// TestWaitsFailWithTheState: a wait that times out fails the test naming
// what it saw.
func TestWaitsFailWithTheState(t *testing.T) {
	defer func(d time.Duration) { testenv.Timeout = d }(testenv.Timeout)
	testenv.Timeout = 2 * time.Second // short, yet long enough for a read under load
	ns := env.Namespace(t)
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns}}
	testkit.Must(t, env.Client.Create(t.Context(), w))
	rec := testkit.RunTB(t, func(tb testing.TB) {
		testenv.WaitForCondition(tb, env.Client, w, statusutil.ConditionReady, metav1.ConditionTrue)
	})
	if !strings.Contains(rec.Failures(), "Ready is not True") {
		t.Errorf("failure = %q, want it to name the condition", rec.Failures())
	}
	rec = testkit.RunTB(t, func(tb testing.TB) {
		testenv.WaitFor(tb, env.Client, &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "absent", Namespace: ns}}, func(*testv1.Widget) bool { return true })
	})
	if !strings.Contains(rec.Failures(), "does not exist") {
		t.Errorf("failure = %q, want it to say the object does not exist", rec.Failures())
	}
}

// TestControllerManager: with the real kube-controller-manager, a
// foreground deletion waits for the dependents, which the garbage
// collector deletes, and a deleted namespace goes with what it holds.
// envtest alone deletes neither.
func TestControllerManager(t *testing.T) {
	env.StartControllerManager(t)
	ctx, ns := t.Context(), env.Namespace(t)
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: ns}}
	if err := env.Client.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	dep := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dep", Namespace: ns,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, BlockOwnerDeletion: ptr.To(true)}}}}
	if err := env.Client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, owner, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{dep, owner} {
		testenv.WaitForDeletion(t, env.Client, obj, 30*time.Second)
	}

	gone := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gone-"}}
	if err := env.Client.Create(ctx, gone); err != nil {
		t.Fatal(err)
	}
	held := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: gone.Name}}
	if err := env.Client.Create(ctx, held); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{held, gone} {
		testenv.WaitForDeletion(t, env.Client, obj, time.Minute)
	}
}

// TestManagerSeesItsTestsNamespaces: by default a test's manager caches,
// and so reconciles, only the namespaces Env.Namespace made for that test:
// a widget in another test's namespace is not touched. InNamespaces names
// others, and WithManagerOptions changes any option.
func TestManagerSeesItsTestsNamespaces(t *testing.T) {
	mine := env.Namespace(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "another-test-"}}
	testkit.Must(t, env.Client.Create(t.Context(), ns))
	theirs := ns.Name
	var seen sync.Map
	start := func(t *testing.T, opts ...testenv.ManagerOption) {
		env.StartManager(t, func(mgr ctrl.Manager) error {
			_, err := reconcile.SetupWithManager[*testv1.Widget](mgr, &countingHooks{seen: &seen})
			return err
		}, opts...)
	}
	t.Run("default", func(t *testing.T) {
		seen.Clear()
		start(t)
		other := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: theirs}}
		testkit.Must(t, env.Client.Create(t.Context(), other))
		w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: mine}}
		testkit.Must(t, env.Client.Create(t.Context(), w))
		testenv.WaitForCondition(t, env.Client, w, statusutil.ConditionReady, metav1.ConditionTrue)
		time.Sleep(time.Second)
		if _, ok := seen.Load(theirs + "/w"); ok {
			t.Errorf("the manager of a test reconciled a widget in %s, another test's namespace", theirs)
		}
	})
	t.Run("InNamespaces", func(t *testing.T) {
		seen.Clear()
		start(t, testenv.InNamespaces(theirs))
		other := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: theirs}}
		testenv.WaitFor(t, env.Client, other, func(*testv1.Widget) bool { _, ok := seen.Load(theirs + "/w"); return ok })
	})
	t.Run("WithManagerOptions", func(t *testing.T) {
		var called bool
		start(t, testenv.WithManagerOptions(func(o *ctrl.Options) { called = o.Cache.DefaultNamespaces != nil }))
		if !called {
			t.Error("WithManagerOptions was not given the options with the test's namespaces")
		}
	})
}

// countingHooks records each widget a pass saw.
type countingHooks struct{ seen *sync.Map }

func (h *countingHooks) Reconcile(_ context.Context, w *testv1.Widget) reconcile.Result {
	h.seen.Store(w.Namespace+"/"+w.Name, true)
	return reconcile.Done()
}

// TestUpdateRetriesOnConflict: an update that loses the race to another
// writer (the operator adding its finalizer) is made again on the latest
// version, and keeps the other writer's change.
func TestUpdateRetriesOnConflict(t *testing.T) {
	ns := env.Namespace(t)
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns}}
	testkit.Must(t, env.Client.Create(t.Context(), w))
	raced := false
	base, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	testkit.Must(t, err)
	c := interceptor.NewClient(base, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if !raced {
				raced = true
				other := &testv1.Widget{}
				testkit.Must(t, c.Get(ctx, client.ObjectKeyFromObject(obj), other))
				other.Finalizers = []string{"operator.example/cleanup"}
				testkit.Must(t, c.Update(ctx, other))
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	testenv.Update(t, c, w, func(w *testv1.Widget) { w.Spec.Replicas = 3 })
	got := &testv1.Widget{}
	testkit.Must(t, env.Client.Get(t.Context(), client.ObjectKeyFromObject(w), got))
	if got.Spec.Replicas != 3 || len(got.Finalizers) != 1 {
		t.Errorf("after Update: replicas %d, finalizers %v; want 3 and the other writer's finalizer", got.Spec.Replicas, got.Finalizers)
	}
}

package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
)

// The operator as main runs it (manager, cache options, watches): the
// write requests it sends until a Memcached is Ready, and none at all in a
// steady state, however many passes run.
func TestManagerWritesUntilReadyAndNoneInSteadyState(t *testing.T) {
	f := newFixture(t)
	cfg, counter := env.CountingConfig()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  env.Scheme,
		Cache:   CacheOptions([]string{f.ns}),
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	testkit.Must(t, err)
	r, err := SetupWithManager(mgr, Options{SkipNameValidation: true, ProgressDelay: 30 * time.Second, ReadyEvents: reconcile.ReadyEventsOnRecovery})
	testkit.Must(t, err)
	ctx := testkit.Run(t, mgr)
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}

	counter.Reset()
	f.create(f.memcached("mc", 1))
	waitFor(t, "the Deployment", func() bool {
		return env.Client.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: "mc"}, &appsv1.Deployment{}) == nil
	})
	f.createPod("mc", "mc-pod")
	// A pod of another Memcached in the namespace is not one of mc's
	// nodes (the pod index is keyed by the instance label).
	f.createPod("mc-other", "mc-other-pod")
	f.rollOut("mc")
	m := &v1beta1.Memcached{}
	waitFor(t, "Ready=True", func() bool {
		f.get("mc", m)
		return statusutil.IsTrue(m, statusutil.ConditionReady) && len(m.Status.Nodes) == 1 && m.Status.ObservedGeneration == m.Generation
	})
	if diff := cmp.Diff([]string{"mc-pod"}, m.Status.Nodes); diff != "" {
		t.Errorf("status.nodes (-want +got):\n%s", diff)
	}
	// The cache keeps only the operator's own managedFields entries of a
	// Memcached (reconcile.KeepManagedFieldsOf); the test's create is
	// another writer's.
	cached := &v1beta1.Memcached{}
	waitFor(t, "the cache to hold the Ready status", func() bool {
		testkit.Must(t, mgr.GetCache().Get(ctx, client.ObjectKeyFromObject(m), cached))
		return cached.ResourceVersion == m.ResourceVersion
	})
	if diff := cmp.Diff([]string{ManagedBy}, managers(cached)); diff != "" {
		t.Errorf("managers of the cached Memcached's fields (-want +got):\n%s", diff)
	}
	if got := managers(m); len(got) < 2 {
		t.Errorf("managers of the Memcached's fields = %v, want the test's and %s", got, ManagedBy)
	}
	t.Logf("writes until Ready: %d (%s)", counter.Writes(), counter)
	// Deployment, Service and one status write (Ready: the Waiting status
	// of the first pass is deferred by the progress delay); no finalizer,
	// and no event for a first Ready (ReadyEventsOnRecovery).
	if got := counter.Writes(); got > 3 {
		t.Errorf("write requests until Ready = %d, want <= 3 (%s)", got, counter)
	}
	if got := counter.WritesTo("/memcacheds"); got != 1 {
		t.Errorf("writes to the Memcached until Ready = %d, want 1: its status (%s)", got, counter)
	}

	// Steady state: passes from every source find nothing to do.
	time.Sleep(time.Second) // let the last watch events arrive
	counter.Reset()
	for range 20 {
		if _, err := r.Reconcile(ctx, crreconcile.Request{NamespacedName: types.NamespacedName{Namespace: f.ns, Name: "mc"}}); err != nil {
			t.Fatal(err)
		}
	}
	if counter.Writes() != 0 || counter.Total() != 0 {
		t.Errorf("steady-state passes sent %d requests, %d writes, want none (%s)", counter.Total(), counter.Writes(), counter)
	}
}

// managers returns the field managers of obj's managedFields entries, in
// order.
func managers(obj client.Object) []string {
	var out []string
	for _, e := range obj.GetManagedFields() {
		out = append(out, e.Manager)
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestSomeoneElsesObjectIsNotTakenOver: the cache sees only objects with
// the operator's labels; a Deployment of the Memcached's name made by
// someone else is invisible to it. The operator must not force-apply over
// it: it leaves it untouched and says so in the Memcached's conditions.
func TestSomeoneElsesObjectIsNotTakenOver(t *testing.T) {
	f := newFixture(t)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  env.Scheme,
		Cache:   CacheOptions([]string{f.ns}),
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	testkit.Must(t, err)
	_, err = SetupWithManager(mgr, Options{SkipNameValidation: true})
	testkit.Must(t, err)
	ctx := testkit.Run(t, mgr)

	labels := map[string]string{"app": "theirs"}
	theirs := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "mc", Namespace: f.ns},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "theirs", Image: "registry.example/theirs:1"}}},
			},
		},
	}
	testkit.Must(t, env.Client.Create(ctx, theirs))
	f.create(f.memcached("mc", 1))

	m := &v1beta1.Memcached{}
	waitFor(t, "a condition naming the conflict", func() bool {
		f.get("mc", m)
		c := statusutil.Get(m, statusutil.ConditionReconciling)
		return c != nil && c.Reason == ReasonChildConflict && strings.Contains(c.Message, "mc")
	})
	t.Logf("Reconciling: %s", statusutil.Get(m, statusutil.ConditionReconciling).Message)
	after := &appsv1.Deployment{}
	testkit.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(theirs), after))
	if len(after.OwnerReferences) != 0 || after.Spec.Template.Spec.Containers[0].Image != "registry.example/theirs:1" || after.Labels[LabelInstance] != "" {
		t.Errorf("someone else's Deployment was taken over: owners %v, image %s, labels %v",
			after.OwnerReferences, after.Spec.Template.Spec.Containers[0].Image, after.Labels)
	}
}

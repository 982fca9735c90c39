package controller

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	testenv.Main(m, &env, testenv.WithCRDs("../../config/crd/bases"), testenv.WithScheme(v1beta1.AddToScheme))
}

// fixture is one test's namespace, a Reconciler over a direct client and
// the events it recorded.
type fixture struct {
	t      testing.TB
	ns     string
	r      *reconcile.Reconciler[*v1beta1.Memcached]
	events *events.FakeRecorder
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "memcached-"}}
	testkit.Must(t, env.Client.Create(t.Context(), ns))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ns) })
	rec := events.NewFakeRecorder(100)
	hooks, err := NewHooks(env.Client, nil, env.Scheme, rec)
	testkit.Must(t, err)
	r, err := reconcile.New[*v1beta1.Memcached](env.Client, env.Scheme, hooks, ReconcilerOptions(rec)...)
	testkit.Must(t, err)
	return &fixture{t: t, ns: ns.Name, r: r, events: rec}
}

// memcached returns a Memcached named name in the fixture's namespace.
func (f *fixture) memcached(name string, size int32) *v1beta1.Memcached {
	return &v1beta1.Memcached{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec:       v1beta1.MemcachedSpec{Replicas: size},
	}
}

func (f *fixture) create(m *v1beta1.Memcached) *v1beta1.Memcached {
	f.t.Helper()
	testkit.Must(f.t, env.Client.Create(f.t.Context(), m))
	return m
}

// pass runs one Reconcile for name and fails the test on an error.
func (f *fixture) pass(name string) crreconcile.Result {
	f.t.Helper()
	res, err := f.r.Reconcile(f.t.Context(), crreconcile.Request{NamespacedName: types.NamespacedName{Namespace: f.ns, Name: name}})
	if err != nil {
		f.t.Fatalf("Reconcile %s: %v", name, err)
	}
	return res
}

func (f *fixture) get(name string, obj client.Object) {
	f.t.Helper()
	testkit.Must(f.t, env.Client.Get(f.t.Context(), types.NamespacedName{Namespace: f.ns, Name: name}, obj))
}

// update re-reads the Memcached, changes its spec and writes it.
func (f *fixture) update(name string, change func(*v1beta1.Memcached)) {
	f.t.Helper()
	m := &v1beta1.Memcached{}
	f.get(name, m)
	change(m)
	testkit.Must(f.t, env.Client.Update(f.t.Context(), m))
}

// rollOut makes the Deployment look fully rolled out and available, as the
// deployment controller (absent from envtest) would.
func (f *fixture) rollOut(name string) {
	f.t.Helper()
	d := &appsv1.Deployment{}
	f.get(name, d)
	n := *d.Spec.Replicas
	d.Status = appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"}},
	}
	testkit.Must(f.t, env.Client.Status().Update(f.t.Context(), d))
}

// createPod creates a pod labelled as one of name's.
func (f *fixture) createPod(owner, pod string) *corev1.Pod {
	f.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: f.ns, Labels: childLabels(f.memcached(owner, 0))},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: new(bool),
			Containers:                   []corev1.Container{{Name: "memcached", Image: "memcached:1.6"}},
		},
	}
	testkit.Must(f.t, env.Client.Create(f.t.Context(), p))
	return p
}

// drainEvents returns the events recorded so far.
func (f *fixture) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-f.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func hasEvent(evs []string, reason string) bool {
	for _, e := range evs {
		if strings.Contains(e, " "+reason+" ") {
			return true
		}
	}
	return false
}

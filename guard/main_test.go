package guard_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/guard"
	"github.com/opkit-dev/opkit/guard/guardtest"
	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// newNamespace creates a namespace for one test and returns its name.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "guard-"}}
	must(t, env.Client.Create(t.Context(), ns))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ns) })
	return ns.Name
}

// newWidget creates a Widget, the owner of these tests.
func newWidget(t *testing.T, ns, name string) *testv1.Widget {
	t.Helper()
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	must(t, env.Client.Create(t.Context(), w))
	return w
}

// newGuard returns a Guard of Widgets using the direct client.
func newGuard(t *testing.T, opts ...guard.Option) *guard.Guard {
	t.Helper()
	g, err := guard.New(env.Client, &testv1.Widget{}, opts...)
	must(t, err)
	return g
}

// newSecret creates a Secret, held by held when it is not nil.
func newSecret(t *testing.T, ns, name string, held *corev1.ConfigMap) *corev1.Secret {
	t.Helper()
	s := guard.Hold(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, held)
	must(t, env.Client.Create(t.Context(), s))
	return s
}

// eventually polls cond every 100 ms for up to 30 s.
func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func get(t *testing.T, obj client.Object) error {
	t.Helper()
	return env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// installPolicy installs the guard's Policy as name for the test and
// returns once admission enforces it: a namespace controller must not act
// first.
func installPolicy(t *testing.T, name string) {
	t.Helper()
	policy, binding := guard.Policy(name)
	guardtest.Install(t, env.Client, policy, binding)
}

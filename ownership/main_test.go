package ownership_test

import (
	"context"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/opkit-dev/opkit/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// calls records the API requests a client made, as "verb" strings.
type calls struct {
	mu   sync.Mutex
	list []string
}

func (c *calls) add(verb string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list = append(c.list, verb)
}

func (c *calls) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list = nil
}

func (c *calls) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.list...)
}

// assertCalls fails the test when the recorded requests differ from want.
func assertCalls(t *testing.T, c *calls, want ...string) {
	t.Helper()
	if diff := cmp.Diff(want, c.get(), cmpEmptyNil); diff != "" {
		t.Errorf("API requests (-want +got):\n%s", diff)
	}
}

var cmpEmptyNil = cmp.Transformer("emptyNil", func(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
})

// hooks run before a request is forwarded; a non-nil error is returned
// instead of forwarding it.
type hooks struct {
	beforeGet   func(n int) error
	beforePatch func(n int) error
}

// newClient returns a direct client that records every request it makes and
// runs h before gets and patches (n counts calls of that verb from 1).
func newClient(t *testing.T, h hooks) (client.Client, *calls) {
	t.Helper()
	base, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatalf("building client: %v", err)
	}
	rec := &calls{}
	var gets, patches int
	var mu sync.Mutex
	count := func(n *int) int {
		mu.Lock()
		defer mu.Unlock()
		*n++
		return *n
	}
	c := interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			rec.add("get")
			if h.beforeGet != nil {
				if err := h.beforeGet(count(&gets)); err != nil {
					return err
				}
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			rec.add("patch")
			if h.beforePatch != nil {
				if err := h.beforePatch(count(&patches)); err != nil {
					return err
				}
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			rec.add("update")
			return c.Update(ctx, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			rec.add("create")
			return c.Create(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			rec.add("delete")
			return c.Delete(ctx, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			rec.add("list")
			return c.List(ctx, list, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			rec.add("apply")
			return c.Apply(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			rec.add("patch/" + sub)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			rec.add("update/" + sub)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	return c, rec
}

// newNamespace creates a namespace for one test and returns its name.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ownership-"}}
	if err := env.Client.Create(t.Context(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ns) })
	return ns.Name
}

// newConfigMap creates a ConfigMap after applying mutate and returns the
// server's copy.
func newConfigMap(t *testing.T, ns, name string, mutate ...func(*corev1.ConfigMap)) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, m := range mutate {
		m(cm)
	}
	if err := env.Client.Create(t.Context(), cm); err != nil {
		t.Fatalf("creating ConfigMap %s/%s: %v", ns, name, err)
	}
	return cm
}

// getConfigMap reads a ConfigMap from the server with a fresh object.
func getConfigMap(t *testing.T, key client.ObjectKey) (*corev1.ConfigMap, error) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	err := env.Client.Get(t.Context(), key, cm)
	return cm, err
}

func withFinalizers(f ...string) func(*corev1.ConfigMap) {
	return func(cm *corev1.ConfigMap) { cm.Finalizers = f }
}

func withLabels(l map[string]string) func(*corev1.ConfigMap) {
	return func(cm *corev1.ConfigMap) { cm.Labels = l }
}

// forceRemoveFinalizers clears an object's finalizers so a test's leftovers
// do not linger.
func forceRemoveFinalizers(t *testing.T, key client.ObjectKey) {
	t.Helper()
	cm, err := getConfigMap(t, key)
	if err != nil {
		return
	}
	cm.Finalizers = nil
	_ = env.Client.Update(context.Background(), cm)
}

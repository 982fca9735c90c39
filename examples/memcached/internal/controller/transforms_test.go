package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
)

// TestPassOverTrimmedCacheWritesNothing: a pass reading every object as
// CacheOptions' transforms leave it writes nothing once the children are
// in place, so no transform drops a field the operator sets or reads.
func TestPassOverTrimmedCacheWritesNothing(t *testing.T) {
	f := newFixture(t)
	transform := func(kind client.Object, obj any) error {
		if tr := cacheTransform(kind); tr != nil {
			_, err := tr(obj)
			return err
		}
		return nil
	}
	writes := 0
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	testkit.Must(t, err)
	trimmed := interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			return transform(obj, obj)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			writes++
			return c.Apply(ctx, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			writes++
			return c.Create(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			writes++
			return c.Patch(ctx, obj, patch, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := c.List(ctx, list, opts...); err != nil {
				return err
			}
			pods, ok := list.(*metav1.PartialObjectMetadataList)
			if !ok {
				return fmt.Errorf("listing %T: the operator lists pod metadata only", list)
			}
			for i := range pods.Items {
				if err := transform(&corev1.Pod{}, &pods.Items[i]); err != nil {
					return err
				}
			}
			return nil
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			writes++
			return c.SubResource(sub).Apply(ctx, obj, opts...)
		},
	})
	rec := events.NewFakeRecorder(100)
	hooks, err := NewHooks(trimmed, nil, env.Scheme, rec)
	testkit.Must(t, err)
	r, err := reconcile.New[*v1beta1.Memcached](trimmed, env.Scheme, hooks, ReconcilerOptions(rec)...)
	testkit.Must(t, err)
	pass := func() {
		t.Helper()
		if _, err := r.Reconcile(t.Context(), crreconcile.Request{NamespacedName: types.NamespacedName{Namespace: f.ns, Name: "mc"}}); err != nil {
			t.Fatal(err)
		}
	}

	f.create(f.memcached("mc", 3)) // three pods: a PodDisruptionBudget too
	pass()
	f.createPod("mc", "mc-a")
	f.rollOut("mc")
	pass()
	writes = 0
	pass()
	if writes != 0 {
		t.Errorf("a pass over unchanged children made %d writes, want 0", writes)
	}
	m := &v1beta1.Memcached{}
	f.get("mc", m)
	if diff := cmp.Diff([]string{"mc-a"}, m.Status.Nodes); diff != "" {
		t.Errorf("status.nodes (-want +got):\n%s", diff)
	}
}

// cacheTransform is CacheOptions' transform of kind, or nil.
func cacheTransform(kind client.Object) toolscache.TransformFunc {
	for obj, by := range CacheOptions(nil).ByObject {
		if reflect.TypeOf(obj) == reflect.TypeOf(kind) {
			return by.Transform
		}
	}
	return nil
}

// TestShareLabelsSharesKeysAndRepeatedValues: two decodes of the same
// labels share their keys and repeated values, never an instance's name,
// and read the same.
func TestShareLabelsSharesKeysAndRepeatedValues(t *testing.T) {
	decode := func() map[string]string {
		var l map[string]string
		testkit.Must(t, json.Unmarshal([]byte(`{"app.kubernetes.io/name":"memcached","app.kubernetes.io/instance":"m-1","pod-template-hash":"5d8f7c9b4"}`), &l))
		return l
	}
	a, b := shareLabels(decode()), shareLabels(decode())
	if diff := cmp.Diff(decode(), a); diff != "" {
		t.Fatalf("shared labels differ (-decoded +shared):\n%s", diff)
	}
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	for k := range a {
		var kb string
		for k2 := range b {
			if k2 == k {
				kb = k2
			}
		}
		if !same(k, kb) {
			t.Errorf("key %q: two copies", k)
		}
		shareValue := k == LabelName
		if got := same(a[k], b[k]); got != shareValue {
			t.Errorf("value of %q shared: %v, want %v", k, got, shareValue)
		}
	}
}

// TestInternTableIsBounded: strings that never repeat stop being kept
// past maxLabelStrings, and are still returned.
func TestInternTableIsBounded(t *testing.T) {
	var tab internTable
	for i := range 2 * maxLabelStrings {
		if s := fmt.Sprintf("t-%d", i); tab.share(s) != s {
			t.Fatalf("share(%q) = %q", s, tab.share(s))
		}
	}
	if n := len(tab.m); n != maxLabelStrings {
		t.Fatalf("%d shared strings, want %d", n, maxLabelStrings)
	}
}

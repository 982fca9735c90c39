package shard_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/shard"
)

// TestChildrenMoveWithTheirOwner shards 20 Widgets, each with two
// children: a ConfigMap it creates and controls, and a Secret created by
// someone else, unlabelled, naming its Widget in a label (as a
// Deployment's pod does). Whenever the members change, every child ends
// labelled with its Widget's member and each member's cache holds exactly
// the children of its own Widgets.
func TestChildrenMoveWithTheirOwner(t *testing.T) {
	ns := env.Namespace(t)
	r := shard.Ring{Name: "widgets", Namespace: ns, LeaseDuration: 3 * time.Second}
	owned := labels.SelectorFromSet(labels.Set{"app": "widget-child"})
	named := labels.SelectorFromSet(labels.Set{"app": "widget-pod"})
	children := []shard.Child{
		{Object: &corev1.ConfigMap{}, Selector: owned},
		{Object: podLike(), Selector: named, Owner: func(o client.Object) (types.NamespacedName, bool) {
			name, ok := o.GetLabels()["widget"]
			return types.NamespacedName{Namespace: o.GetNamespace(), Name: name}, ok
		}},
	}
	var lateCreates atomic.Int32
	inner := func(mgr ctrl.Manager) reconcile.Reconciler {
		return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			w := &testv1.Widget{}
			if err := mgr.GetClient().Get(ctx, req.NamespacedName, w); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			cm := &corev1.ConfigMap{}
			err := mgr.GetClient().Get(ctx, types.NamespacedName{Namespace: w.Namespace, Name: w.Name + "-child"}, cm)
			if !apierrors.IsNotFound(err) {
				return reconcile.Result{}, err
			}
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name + "-child",
				Labels: map[string]string{"app": "widget-child"}}}
			if k, v, ok := shard.MemberFrom(ctx); ok {
				cm.Labels[k] = v
			}
			if err := controllerutil.SetControllerReference(w, cm, mgr.GetScheme()); err != nil {
				return reconcile.Result{}, err
			}
			err = mgr.GetClient().Create(ctx, cm)
			if apierrors.IsAlreadyExists(err) {
				lateCreates.Add(1) // its cache has the Widget but not yet the child
			}
			return reconcile.Result{}, err
		})
	}
	cached := map[client.Object]labels.Selector{&corev1.ConfigMap{}: owned, &corev1.Secret{}: named}
	var keys []string
	for i := range 20 {
		w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%d", i), Namespace: ns}}
		if err := env.Client.Create(t.Context(), w); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: w.Name + "-pod",
			Labels: map[string]string{"app": "widget-pod", "widget": w.Name}}}
		if err := env.Client.Create(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, ns+"/"+w.Name)
	}

	mgrs := map[string]ctrl.Manager{}
	start := func(id string) func() {
		stop, mgr := replicaOf(t, r, id, inner, children, cached)
		mgrs[id] = mgr
		return func() { stop(); delete(mgrs, id) }
	}
	settled := func(members ...string) {
		t.Helper()
		began := time.Now()
		var why string
		for end := began.Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if why = childrenSettled(t, r, ns, keys, members, mgrs); why == "" {
				t.Logf("members %v: settled in %v", members, time.Since(began).Round(time.Millisecond))
				return
			}
		}
		t.Fatalf("members %v: not settled after 30 s: %s", members, why)
	}

	start("a")
	stopB := start("b")
	settled("a", "b")
	start("c")
	settled("a", "b", "c")
	stopB()
	settled("a", "c")
	t.Logf("%d creates found the child existing but not yet in the member's cache", lateCreates.Load())

	// A child that appears with another member's label (its owner moved
	// before the sharder saw it) joins its owner's member.
	w := &testv1.Widget{}
	if err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "w-1"}, w); err != nil {
		t.Fatal(err)
	}
	late := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w-1-late",
		Labels: map[string]string{"app": "widget-child", r.Label(): "b"}}}
	if err := controllerutil.SetControllerReference(w, late, env.Scheme); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(t.Context(), late); err != nil {
		t.Fatal(err)
	}
	want := shard.Owner(ns+"/w-1", []string{"a", "c"})
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(late), late); err != nil {
			t.Fatal(err)
		}
		if got := late.Labels[r.Label()]; got == want {
			break
		} else if time.Now().After(end) {
			t.Fatalf("a child created labelled b is labelled %q after 10 s, want its owner's member %s", got, want)
		}
	}
}

// childrenSettled says why the children are not yet where members put
// their Widgets, or "" once they are, in labels and in each member's
// cache.
func childrenSettled(t *testing.T, r shard.Ring, ns string, keys, members []string, mgrs map[string]ctrl.Manager) string {
	t.Helper()
	want := map[string][]string{} // member: its ConfigMaps, sorted as keys
	for _, key := range keys {
		m := shard.Owner(key, members)
		name := key[len(ns)+1:]
		want[m] = append(want[m], name+"-child", name+"-pod")
		for _, got := range []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}} {
			cm := name + "-child"
			if _, ok := got.(*corev1.Secret); ok {
				cm = name + "-pod"
			}
			if err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: cm}, got); err != nil {
				return err.Error()
			}
			if l := got.GetLabels()[r.Label()]; l != m {
				return fmt.Sprintf("%s labelled %q, want %s, its Widget's member", cm, l, m)
			}
		}
	}
	for id, mgr := range mgrs {
		var cms corev1.ConfigMapList
		var secrets corev1.SecretList
		got := map[string]bool{}
		for _, list := range []client.ObjectList{&cms, &secrets} {
			if err := mgr.GetCache().List(t.Context(), list, client.InNamespace(ns)); err != nil {
				return err.Error()
			}
		}
		for _, o := range cms.Items {
			got[o.Name] = true
		}
		for _, o := range secrets.Items {
			got[o.Name] = true
		}
		if len(got) != len(want[id]) {
			return fmt.Sprintf("%s's cache holds %d children, want the %d of its Widgets", id, len(got), len(want[id]))
		}
		for _, name := range want[id] {
			if !got[name] {
				return fmt.Sprintf("%s's cache lacks %s", id, name)
			}
		}
	}
	return ""
}

// podLike is the metadata of Secrets, standing for pods: a Child may be
// given as metadata.
func podLike() *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{}
	o.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return o
}

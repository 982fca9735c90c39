package shard_test

import (
	"context"
	"fmt"
	"strconv"
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

// TestChildrenTakeTheirOwnersSlot shards 20 Widgets, each with two
// children: a ConfigMap it creates and controls, and a Secret created by
// someone else, unlabelled, naming its Widget in a label. Every child
// ends labelled with its Widget's slot, and whenever the members change,
// each member's cache holds exactly the children of its own Widgets.
func TestChildrenTakeTheirOwnersSlot(t *testing.T) {
	ns := env.Namespace(t)
	r := shard.Ring{Name: "widgets", Namespace: ns, LeaseDuration: 3 * time.Second, Slots: 12}
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
			if k, v, ok := shard.SlotFrom(ctx); ok {
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
	var keys []types.NamespacedName
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
		keys = append(keys, client.ObjectKeyFromObject(w))
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
		h := heldBy(t, r, members...)
		var why string
		for end := began.Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if why = childrenSettled(t, r, keys, h, mgrs); why == "" {
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
}

// childrenSettled says why the children are not yet labelled with their
// Widget's slot, or each member's cache does not hold those of the slots
// it holds (held), or "" once they are and it does.
func childrenSettled(t *testing.T, r shard.Ring, keys []types.NamespacedName, held map[int]string, mgrs map[string]ctrl.Manager) string {
	t.Helper()
	want := map[string][]string{} // member: its children
	for _, key := range keys {
		slot := r.Slot(key)
		want[held[slot]] = append(want[held[slot]], key.Name+"-child", key.Name+"-pod")
		for _, got := range []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}} {
			name := key.Name + "-child"
			if _, ok := got.(*corev1.Secret); ok {
				name = key.Name + "-pod"
			}
			if err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: key.Namespace, Name: name}, got); err != nil {
				return err.Error()
			}
			if l := got.GetLabels()[r.SlotLabel()]; l != strconv.Itoa(slot) {
				return fmt.Sprintf("%s labelled with slot %q, want %d, its Widget's", name, l, slot)
			}
		}
	}
	for id, mgr := range mgrs {
		var cms corev1.ConfigMapList
		var secrets corev1.SecretList
		got := map[string]bool{}
		for _, list := range []client.ObjectList{&cms, &secrets} {
			if err := mgr.GetCache().List(t.Context(), list, client.InNamespace(r.Namespace)); err != nil {
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

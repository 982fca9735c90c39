package reconcile_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testenv"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
)

// handwritten is the same controller written directly on controller-runtime,
// the way the kubebuilder and operator-sdk tutorials do: finalizer with
// Update, the child with CreateOrUpdate, and Status().Update at the end of
// the pass. With careful set, it skips the status write when nothing
// changed, as a careful author would.
type handwritten struct {
	c       client.Client
	careful bool
}

func (h *handwritten) Reconcile(ctx context.Context, req crreconcile.Request) (ctrl.Result, error) {
	w := &testv1.Widget{}
	if err := h.c.Get(ctx, req.NamespacedName, w); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !w.DeletionTimestamp.IsZero() {
		if controllerutil.RemoveFinalizer(w, finalizer) {
			return ctrl.Result{}, client.IgnoreNotFound(h.c.Update(ctx, w))
		}
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(w, finalizer) {
		if err := h.c.Update(ctx, w); err != nil {
			return ctrl.Result{}, err
		}
	}
	before := w.Status.DeepCopy()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: w.Name + "-child", Namespace: w.Namespace}}
	_, err := controllerutil.CreateOrUpdate(ctx, h.c, cm, func() error {
		if cm.Labels == nil {
			cm.Labels = map[string]string{}
		}
		cm.Labels["widget"] = w.Name
		cm.Data = map[string]string{"replicas": strconv.Itoa(int(w.Spec.Replicas)), "message": w.Spec.Message}
		return controllerutil.SetControllerReference(w, cm, h.c.Scheme())
	})
	if err != nil {
		meta.SetStatusCondition(&w.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "ReconcileFailed", Message: err.Error(), ObservedGeneration: w.Generation})
		_ = h.c.Status().Update(ctx, w)
		return ctrl.Result{}, err
	}
	w.Status.Replicas = w.Spec.Replicas
	meta.SetStatusCondition(&w.Status.Conditions, metav1.Condition{Type: "Available", Status: metav1.ConditionTrue, Reason: "ChildCreated", ObservedGeneration: w.Generation})
	meta.SetStatusCondition(&w.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Succeeded", ObservedGeneration: w.Generation})
	w.Status.ObservedGeneration = w.Generation
	if h.careful && equality.Semantic.DeepEqual(before, &w.Status) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, h.c.Status().Update(ctx, w)
}

// benchReconcilers returns the contenders, built on c.
func benchReconcilers(b *testing.B, c client.Client) map[string]crreconcile.Reconciler {
	b.Helper()
	ch, err := reconcile.NewChildren(c, env.Scheme, reconcile.WithChildrenFieldOwner("opkit-widget"))
	if err != nil {
		b.Fatal(err)
	}
	r, err := reconcile.New[*testv1.Widget](c, env.Scheme, &finalizingHooks{widgetHooks: widgetHooks{children: ch}},
		reconcile.WithName("bench"), reconcile.WithSummary(statusutil.WithConditions("Available")))
	if err != nil {
		b.Fatal(err)
	}
	return map[string]crreconcile.Reconciler{
		"opkit":               r,
		"handwritten":         &handwritten{c: c},
		"handwritten-careful": &handwritten{c: c, careful: true},
	}
}

// BenchmarkSteadyStateInMemory measures the library's own cost: a pass over
// an already converged object with an in-memory client (no network), so
// that only the reconcilers' CPU work and allocations differ.
func BenchmarkSteadyStateInMemory(b *testing.B) {
	for _, name := range []string{"handwritten", "handwritten-careful", "opkit"} {
		b.Run(name, func(b *testing.B) {
			w, cm := convergedObjects(b)
			c := fake.NewClientBuilder().WithScheme(env.Scheme).WithObjects(w, cm).WithStatusSubresource(&testv1.Widget{}).Build()
			r := benchReconcilers(b, c)[name]
			req := crreconcile.Request{NamespacedName: client.ObjectKeyFromObject(w)}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Reconcile(b.Context(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPassAPIServer runs passes against a real API server (envtest)
// and reports API requests and write requests per pass, in the steady state
// and for a spec change per pass.
func BenchmarkPassAPIServer(b *testing.B) {
	for _, scenario := range []string{"steady", "spec-change"} {
		for _, name := range []string{"handwritten", "handwritten-careful", "opkit"} {
			b.Run(scenario+"/"+name, func(b *testing.B) {
				c, counter, err := env.CountingClient()
				if err != nil {
					b.Fatal(err)
				}
				r := benchReconcilers(b, c)[name]
				w := benchWidget(b)
				req := crreconcile.Request{NamespacedName: client.ObjectKeyFromObject(w)}
				for range 2 { // converge
					if _, err := r.Reconcile(b.Context(), req); err != nil {
						b.Fatal(err)
					}
				}
				counter.Reset()
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if scenario == "spec-change" {
						i++
						bumpReplicas(b, req.NamespacedName, int32(i%50+1))
					}
					if _, err := r.Reconcile(b.Context(), req); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(counter.Total())/float64(b.N), "requests/op")
				b.ReportMetric(float64(counter.Writes())/float64(b.N), "writes/op")
			})
		}
	}
}

func bumpReplicas(b *testing.B, key types.NamespacedName, n int32) {
	b.Helper()
	w := &testv1.Widget{}
	if err := env.Client.Get(b.Context(), key, w); err != nil {
		b.Fatal(err)
	}
	w.Spec.Replicas = n
	if err := env.Client.Update(b.Context(), w); err != nil {
		b.Fatal(err)
	}
}

func benchWidget(b *testing.B) *testv1.Widget {
	b.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}
	if err := env.Client.Create(b.Context(), ns); err != nil {
		b.Fatal(err)
	}
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns.Name}, Spec: testv1.WidgetSpec{Replicas: 1, Message: "bench"}}
	if err := env.Client.Create(b.Context(), w); err != nil {
		b.Fatal(err)
	}
	return w
}

// convergedObjects converges a widget on the API server with opkit and
// returns it and its child as stored, to seed an in-memory client.
func convergedObjects(b *testing.B) (*testv1.Widget, *corev1.ConfigMap) {
	b.Helper()
	w := benchWidget(b)
	converge(b, w)
	got := &testv1.Widget{}
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(b.Context(), client.ObjectKeyFromObject(w), got); err != nil {
		b.Fatal(err)
	}
	if err := env.Client.Get(b.Context(), types.NamespacedName{Namespace: w.Namespace, Name: w.Name + "-child"}, cm); err != nil {
		b.Fatal(err)
	}
	got.ResourceVersion, cm.ResourceVersion = "", ""
	return got, cm
}

func converge(b *testing.B, w *testv1.Widget) {
	b.Helper()
	ch, _ := reconcile.NewChildren(env.Client, env.Scheme, reconcile.WithChildrenFieldOwner("opkit-widget"))
	r, err := reconcile.New[*testv1.Widget](env.Client, env.Scheme, &finalizingHooks{widgetHooks: widgetHooks{children: ch}}, reconcile.WithName("bench"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := r.Reconcile(b.Context(), crreconcile.Request{NamespacedName: client.ObjectKeyFromObject(w)}); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCreateChildAPIServer creates a new Deployment per operation
// with EnsureChild against a real API server (envtest, no controllers), the
// cache seeing nothing, and reports what each create costs the API server
// in CPU time: "post" with an uncached reader (a POST), "apply" without one
// (a server-side apply; before the POST create, a Children with an uncached
// reader sent an uncached GET and then this apply).
func BenchmarkCreateChildAPIServer(b *testing.B) {
	for _, name := range []string{"post", "apply"} {
		b.Run(name, func(b *testing.B) {
			c, counter, err := env.CountingClient()
			if err != nil {
				b.Fatal(err)
			}
			opts := []reconcile.ChildrenOption{reconcile.WithChildrenFieldOwner("opkit-widget")}
			if name == "post" {
				opts = append(opts, reconcile.WithUncachedReader(c))
			}
			ch, err := reconcile.NewChildren(blindReader{c}, env.Scheme, opts...)
			if err != nil {
				b.Fatal(err)
			}
			owner := benchWidget(b)
			i := 0
			counter.Reset()
			cpu0, err := testenv.APIServerCPUSeconds(env)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				i++
				d := desiredDeployment(owner.Namespace, "web:1")
				d.Name = fmt.Sprintf("web-%d", i)
				if op, err := ch.EnsureChild(b.Context(), owner, d); err != nil || op != reconcile.ChildCreated {
					b.Fatalf("EnsureChild = %s, %v", op, err)
				}
			}
			cpu1, err := testenv.APIServerCPUSeconds(env)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric((cpu1-cpu0)*1000/float64(b.N), "apiserver-cpu-ms/op")
			b.ReportMetric(float64(counter.Total())/float64(b.N), "requests/op")
		})
	}
}

// BenchmarkStatusWriteAPIServer changes one widget's status once per
// operation against a real API server and reports what each write costs the
// API server in CPU time, for the three ways a controller can write a custom
// resource's status: "apply", a server-side apply of the status alone (what
// Reconciler sends), "merge-patch", a JSON merge patch of the changed
// fields, and "update", a PUT of the whole object.
func BenchmarkStatusWriteAPIServer(b *testing.B) {
	for _, name := range []string{"apply", "merge-patch", "update"} {
		b.Run(name, func(b *testing.B) {
			w := benchWidget(b)
			c := env.Client
			cpu0, err := testenv.APIServerCPUSeconds(env)
			if err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				i++
				before := w.DeepCopy()
				w.Status.Replicas = int32(i%50 + 1)
				w.Status.ObservedGeneration = w.Generation
				meta.SetStatusCondition(&w.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue,
					Reason: "Succeeded", Message: fmt.Sprintf("%d replicas", w.Status.Replicas), ObservedGeneration: w.Generation})
				switch name {
				case "apply":
					err = applyWidgetStatus(b.Context(), c, w)
				case "merge-patch":
					err = c.Status().Patch(b.Context(), w, client.MergeFrom(before))
				case "update":
					err = c.Status().Update(b.Context(), w)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			cpu1, err := testenv.APIServerCPUSeconds(env)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric((cpu1-cpu0)*1000/float64(b.N), "apiserver-cpu-ms/op")
		})
	}
}

// applyWidgetStatus server-side applies w's status alone, the shape of
// Reconciler's status write, and keeps w's resourceVersion current.
func applyWidgetStatus(ctx context.Context, c client.Client, w *testv1.Widget) error {
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&w.Status)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": st}}
	u.SetGroupVersionKind(testv1.GroupVersion.WithKind("Widget"))
	u.SetName(w.Name)
	u.SetNamespace(w.Namespace)
	if err := c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner("opkit-widget"), client.ForceOwnership); err != nil {
		return err
	}
	w.SetResourceVersion(u.GetResourceVersion())
	return nil
}

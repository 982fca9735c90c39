package reconcile_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/shard"
	"github.com/opkit-dev/opkit/statusutil"
)

// mirrorHooks keeps a ConfigMap with the widget's replica count and reports
// Available once it exists.
type mirrorHooks struct {
	children *reconcile.Children
}

func (h *mirrorHooks) Reconcile(ctx context.Context, w *testv1.Widget) reconcile.Result {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace},
		Data:       map[string]string{"replicas": strconv.Itoa(int(w.Spec.Replicas))},
	}
	if _, err := h.children.EnsureChild(ctx, w, cm); err != nil {
		return reconcile.Retry(fmt.Errorf("ensuring config map: %w", err))
	}
	w.Status.Replicas = w.Spec.Replicas
	statusutil.MarkTrue(w, "Available", "ConfigMapReady", "")
	return reconcile.Done()
}

// The usual setup in an operator's main: one call wires the Reconciler, the
// watches on the kind and its children, and the manager's event recorder.
func ExampleSetupWithManager() {
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{})
	if err != nil {
		panic(err) // in main; library code returns errors
	}
	children, err := reconcile.NewChildren(mgr.GetClient(), mgr.GetScheme())
	if err != nil {
		panic(err)
	}
	_, err = reconcile.SetupWithManager[*testv1.Widget](mgr, &mirrorHooks{children: children},
		reconcile.WithOwns(&corev1.ConfigMap{}),
		reconcile.WithSummary(statusutil.WithConditions("Available")))
	if err != nil {
		panic(err)
	}
	_ = mgr.Start(ctrl.SetupSignalHandler())
}

// Replicas as shards: each caches and reconciles only the Widgets of
// the slots it holds, and takes over a dead replica's. podName and
// podNamespace come from the downward API.
func ExampleWithShard() {
	podName, podNamespace := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	ring := shard.Ring{Name: "widgets", Namespace: podNamespace}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		// Leader election off: every replica reconciles its share, and
		// caches its Widgets and their ConfigMaps only.
		NewCache: ring.NewCache(podName, &testv1.Widget{}, &corev1.ConfigMap{}),
	})
	if err != nil {
		panic(err)
	}
	children, err := reconcile.NewChildren(mgr.GetClient(), mgr.GetScheme())
	if err != nil {
		panic(err)
	}
	_, err = reconcile.SetupWithManager[*testv1.Widget](mgr, &mirrorHooks{children: children},
		reconcile.WithOwns(&corev1.ConfigMap{}), reconcile.WithShard(shard.For(ring)))
	if err != nil {
		panic(err)
	}
	_ = mgr.Start(ctrl.SetupSignalHandler())
}

// Finalize as soon as the Widget's namespace starts going, while the
// pods it may need are still there; the operator may list and watch
// namespaces.
func ExampleWithNamespaceDeletion() {
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{})
	if err != nil {
		panic(err)
	}
	children, err := reconcile.NewChildren(mgr.GetClient(), mgr.GetScheme())
	if err != nil {
		panic(err)
	}
	_, err = reconcile.SetupWithManager[*testv1.Widget](mgr, &mirrorHooks{children: children},
		reconcile.WithOwns(&corev1.ConfigMap{}), reconcile.WithNamespaceDeletion())
	if err != nil {
		panic(err)
	}
	_ = mgr.Start(ctrl.SetupSignalHandler())
}

// One pass of a Reconciler against a real API server: the child is created
// and the status is written once, with Ready derived from Available.
func ExampleReconciler_Reconcile() {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "example-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		fmt.Println(err)
		return
	}
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns.Name}, Spec: testv1.WidgetSpec{Replicas: 3}}
	if err := env.Client.Create(ctx, w); err != nil {
		fmt.Println(err)
		return
	}

	children, _ := reconcile.NewChildren(env.Client, env.Scheme)
	r, err := reconcile.New[*testv1.Widget](env.Client, env.Scheme, &mirrorHooks{children: children},
		reconcile.WithSummary(statusutil.WithConditions("Available")))
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := r.Reconcile(ctx, crreconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns.Name, Name: "demo"}})
	fmt.Println("requeue after:", res.RequeueAfter, "error:", err)

	_ = env.Client.Get(ctx, types.NamespacedName{Namespace: ns.Name, Name: "demo"}, w)
	fmt.Println("observedGeneration:", w.Status.ObservedGeneration, "replicas:", w.Status.Replicas)
	for _, c := range w.Status.Conditions {
		fmt.Printf("%s=%s (%s)\n", c.Type, c.Status, c.Reason)
	}
	// Output:
	// requeue after: 0s error: <nil>
	// observedGeneration: 1 replicas: 3
	// Ready=True (Succeeded)
	// Available=True (ConfigMapReady)
}

// Results carry their error: there is no way to ask for a requeue and
// report an error at once.
func ExampleResult() {
	for _, r := range []reconcile.Result{
		reconcile.Done(),
		// Pods of a StatefulSet it does not watch: look again.
		reconcile.Waiting("PodsStarting", "2/3 pods ready", 30*time.Second),
		// An owned Deployment's status is watched: its change is the next
		// pass, so there is nothing to poll.
		reconcile.WaitingForChange("RollingOut", "1 of 3 pods updated"),
		reconcile.Retry(fmt.Errorf("connecting to member: %w", context.DeadlineExceeded)),
		reconcile.Terminal("SecretMissing", fmt.Errorf("secret %q not found", "s3-creds")),
		// Fixed outside the object, which no watch reports: look again.
		reconcile.Terminal("SecretInvalid", fmt.Errorf("secret %q has no tls.key", "peer")).RecheckAfter(time.Minute),
	} {
		fmt.Printf("%s after=%v message=%q\n", r.Outcome(), r.After(), r.Message())
	}
	// Output:
	// done after=0s message=""
	// waiting after=30s message="2/3 pods ready"
	// waiting after=0s message="1 of 3 pods updated"
	// retry after=0s message="connecting to member: context deadline exceeded"
	// terminal after=0s message="secret \"s3-creds\" not found"
	// terminal after=1m0s message="secret \"peer\" has no tls.key"
}

package controller

import (
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cachev1alpha1 "example.com/memcached-operator/api/v1alpha1"
)

var k8sClient client.Client

func TestMain(m *testing.M) {
	testEnv := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := testEnv.Start()
	if err != nil {
		panic(err)
	}
	if err := cachev1alpha1.AddToScheme(scheme.Scheme); err != nil {
		panic(err)
	}
	if k8sClient, err = client.New(cfg, client.Options{Scheme: scheme.Scheme}); err != nil {
		panic(err)
	}
	code := m.Run()
	_ = testEnv.Stop()
	os.Exit(code)
}

// TestReconcileCreatesTheDeployment is the scaffold's controller test: it
// builds the reconciler as a struct literal and calls Reconcile until the
// Deployment exists and the Memcached is Available.
func TestReconcileCreatesTheDeployment(t *testing.T) {
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	if err := k8sClient.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	size := int32(2)
	m := &cachev1alpha1.Memcached{
		ObjectMeta: metav1.ObjectMeta{Name: "test-resource", Namespace: ns.Name},
		Spec:       cachev1alpha1.MemcachedSpec{Size: &size},
	}
	if err := k8sClient.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Name: m.Name, Namespace: ns.Name}

	controllerReconciler := &MemcachedReconciler{Client: k8sClient, Scheme: k8sClient.Scheme()}
	for range 3 {
		if _, err := controllerReconciler.Reconcile(ctx, reconcile.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
	}

	dep := &appsv1.Deployment{}
	if err := k8sClient.Get(ctx, key, dep); err != nil {
		t.Fatalf("no Deployment: %v", err)
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != size {
		t.Errorf("Deployment replicas = %v, want %d", dep.Spec.Replicas, size)
	}
	if err := k8sClient.Get(ctx, key, m); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(m.Status.Conditions, "Available") {
		t.Errorf("Available is not True: %+v", m.Status.Conditions)
	}
}

package ownership_test

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/opkit-dev/opkit/ownership"
)

// exampleScheme knows the built-in types.
func exampleScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	return s
}

func ExampleSetControllerReference() {
	scheme := exampleScheme()
	app := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "app", UID: "uid-app"}}
	child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "app-settings"}}

	if err := ownership.SetControllerReference(app, child, scheme); err != nil {
		fmt.Println("error:", err)
		return
	}
	ref := child.OwnerReferences[0]
	fmt.Println(ref.Kind, ref.Name, *ref.Controller, ownership.IsControlledBy(child, app))

	// A second controller is refused; errors.As tells who controls it.
	rival := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "rival", UID: "uid-rival"}}
	var ace *ownership.AlreadyControlledError
	if err := ownership.SetControllerReference(rival, child, scheme); errors.As(err, &ace) {
		fmt.Println("already controlled by", ace.Owner.Name)
	}

	// A namespaced owner cannot own an object in another namespace.
	elsewhere := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "billing", Name: "x"}}
	err := ownership.SetControllerReference(app, elsewhere, scheme)
	fmt.Println(errors.Is(err, ownership.ErrCrossNamespace))
	// Output:
	// ConfigMap app true true
	// already controlled by app
	// true
}

func ExampleEnsureFinalizer() {
	ctx := context.Background()
	const finalizer = "shop.example.com/cleanup"
	c := fake.NewClientBuilder().WithScheme(exampleScheme()).
		WithObjects(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "app"}}).
		Build()

	obj := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "app"}, obj); err != nil {
		fmt.Println("error:", err)
		return
	}
	changed, err := ownership.EnsureFinalizer(ctx, c, obj, finalizer)
	fmt.Println(changed, err, obj.Finalizers)

	// Already there: nothing to do and no request.
	changed, err = ownership.EnsureFinalizer(ctx, c, obj, finalizer)
	fmt.Println(changed, err)

	changed, err = ownership.RemoveFinalizer(ctx, c, obj, finalizer)
	fmt.Println(changed, err, len(obj.Finalizers))
	// Output:
	// true <nil> [shop.example.com/cleanup]
	// false <nil>
	// true <nil> 0
}

func ExampleAdopt() {
	ctx := context.Background()
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "app", UID: "uid-app"}}
	orphan := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "app-cache", Labels: map[string]string{"app": "shop"}}}
	scheme := exampleScheme()
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(owner, orphan).Build()

	obj := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(orphan), obj); err != nil {
		fmt.Println("error:", err)
		return
	}
	selector := labels.SelectorFromSet(labels.Set{"app": "shop"})
	adopted, err := ownership.Adopt(ctx, c, owner, obj, selector, scheme)
	fmt.Println(adopted, err, ownership.IsControlledBy(obj, owner))

	// Adopting again is a no-op.
	adopted, err = ownership.Adopt(ctx, c, owner, obj, selector, scheme)
	fmt.Println(adopted, err)
	// Output:
	// true <nil> true
	// false <nil>
}

package e2estatus_test

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/klient/wait"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/statusutil"
	"github.com/opkit-dev/opkit/statusutil/e2estatus"
)

// Wait in an e2e test until a custom resource is Ready for its current spec.
// Here the envtest control plane stands in for the cluster and the
// "controller" is a status write made by the example itself.
func ExampleHasCondition() {
	ctx := context.Background()
	r, err := resources.New(env.Config) // in e2e-framework: cfg.Client().Resources()
	if err != nil {
		fmt.Println(err)
		return
	}
	// resources.New uses client-go's scheme: register the custom resource.
	if err := testv1.AddToScheme(r.GetScheme()); err != nil {
		fmt.Println(err)
		return
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "example-"}}
	if err := r.Create(ctx, ns); err != nil {
		fmt.Println(err)
		return
	}
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "demo"}}
	if err := r.Create(ctx, w); err != nil {
		fmt.Println(err)
		return
	}
	statusutil.MarkTrue(w, statusutil.ConditionReady, "Succeeded", "")
	statusutil.SetObservedGeneration(w)
	if err := r.UpdateStatus(ctx, w); err != nil {
		fmt.Println(err)
		return
	}

	waitFor := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "demo"}}
	err = wait.For(e2estatus.IsReady(r, waitFor), wait.WithImmediate(), wait.WithInterval(100*time.Millisecond), wait.WithTimeout(30*time.Second))
	fmt.Println("ready:", err == nil, "generation:", waitFor.Status.ObservedGeneration)
	// Output:
	// ready: true generation: 1
}

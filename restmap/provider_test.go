package restmap_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/restmap"
)

// A cache of several namespaces reads namespaced and cluster-scoped kinds
// through the memoized dynamic mapper, as a manager given Provider does.
func TestProviderServesAMultiNamespaceCache(t *testing.T) {
	ctx := t.Context()
	for _, ns := range []string{"restmap-a", "restmap-b"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "restmap-b"}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	httpClient, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := restmap.Provider(env.Config, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(env.Config, cache.Options{
		Scheme: env.Scheme, Mapper: mapper, HTTPClient: httpClient,
		DefaultNamespaces: map[string]cache.Config{"restmap-a": {}, "restmap-b": {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	for range 2 {
		var got corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKeyFromObject(cm), &got); err != nil {
			t.Fatalf("Get ConfigMap: %v", err)
		}
		var ns corev1.Namespace
		if err := c.Get(ctx, client.ObjectKey{Name: "restmap-a"}, &ns); err != nil {
			t.Fatalf("Get Namespace: %v", err)
		}
	}
	var list corev1.ConfigMapList
	if err := c.List(ctx, &list, client.InNamespace("restmap-a")); err != nil {
		t.Fatalf("List in restmap-a: %v", err)
	}
	for _, item := range list.Items {
		if item.Name == "cm" {
			t.Errorf("restmap-a lists %s/%s", item.Namespace, item.Name)
		}
	}
}

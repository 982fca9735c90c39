package main

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/memcached/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	testenv.Main(m, &env, testenv.WithCRDs("config/crd/bases"), testenv.WithScheme(v1alpha1.AddToScheme, v1beta1.AddToScheme))
}

// TestReadyWhileMemcachedsNeedConverting: /readyz passes, and keeps
// passing, while no Memcached can be listed because one stored at v1alpha1
// needs a conversion webhook that does not answer. In a cluster that
// webhook is the operator's own, behind a Service that sends only to ready
// pods: readiness that waited for the list would never come (a single
// replica, or an upgrade from a release without the webhook).
func TestReadyWhileMemcachedsNeedConverting(t *testing.T) {
	ns := env.Namespace(t)
	storeAtV1alpha1(t, ns)
	// The API server retries the webhook for about 10 s before failing.
	var list v1beta1.MemcachedList
	if err := env.Client.List(t.Context(), &list, client.InNamespace(ns)); err == nil {
		t.Fatal("listing the Memcacheds succeeded: the test needs a list that fails on conversion")
	}

	port := testkit.MustFreePort(t)
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o := bindFlags(fs)
	testkit.Must(t, fs.Parse([]string{
		"--namespaces=" + ns, "--metrics-bind-address=0", fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", port),
	}))
	mgr, err := newManager(env.Config, o)
	testkit.Must(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = mgr.Start(ctx) // the controller's cache never syncs: an error is expected
	}()
	t.Cleanup(func() { cancel(); <-done })

	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", port)
	ready := func() bool {
		c, stop := context.WithTimeout(ctx, 2*time.Second)
		defer stop()
		return testkit.HTTPOK(c, readyz)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !ready() {
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not pass within 20 s while the Memcacheds could not be listed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// By now the controller has started and watches the Memcacheds.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if !ready() {
			t.Fatal("/readyz failed after it had passed: it waits for the controller's caches")
		}
	}
}

// storeAtV1alpha1 stores a Memcached at v1alpha1, as a release before
// v1beta1 did, and points the CRD's conversion at a webhook that refuses
// connections. The test's end converts nothing again and deletes it.
func storeAtV1alpha1(t *testing.T, ns string) {
	t.Helper()
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	crd.SetName("memcacheds.cache.opkit.dev")
	patch := func(p string) {
		t.Helper()
		testkit.Must(t, env.Client.Patch(context.Background(), crd, client.RawPatch(types.JSONPatchType, []byte(p))))
	}
	// controller-gen sorts the versions: v1alpha1 is the first.
	storeAt := func(alpha bool) string {
		return fmt.Sprintf(`{"op":"test","path":"/spec/versions/0/name","value":"v1alpha1"},`+
			`{"op":"replace","path":"/spec/versions/0/served","value":true},`+
			`{"op":"replace","path":"/spec/versions/0/storage","value":%t},{"op":"replace","path":"/spec/versions/1/storage","value":%t}`, alpha, !alpha)
	}
	restore := func() {
		patch(`[{"op":"replace","path":"/spec/conversion","value":{"strategy":"None"}},` + storeAt(false) + "]")
	}
	patch("[" + storeAt(true) + "]")
	m := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cache.opkit.dev/v1alpha1", "kind": "Memcached",
		"metadata": map[string]any{"name": "stored-at-v1alpha1", "namespace": ns},
		"spec":     map[string]any{"size": int64(0), "memoryLimitMB": int64(16)},
	}}
	if err := env.Client.Create(t.Context(), m); err != nil {
		restore()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		restore()
		testkit.Must(t, client.IgnoreNotFound(env.Client.Delete(context.Background(), m)))
	})
	patch(`[{"op":"replace","path":"/spec/conversion","value":{"strategy":"Webhook","webhook":{"conversionReviewVersions":["v1"],` +
		`"clientConfig":{"url":"https://127.0.0.1:1/convert"}}}},` + storeAt(false) + "]")
}

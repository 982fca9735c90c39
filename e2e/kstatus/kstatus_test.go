// Package kstatus checks the custom resources opkit documents against
// kstatus itself (github.com/fluxcd/cli-utils, Flux's maintained fork of
// sigs.k8s.io/cli-utils): the library behind Flux's and kpt's health checks
// and kubectl-style waits. It needs only envtest (no operator runs): what
// it checks is what those tools see before an operator has written any
// status.
package kstatus

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/repo"
	"github.com/opkit-dev/opkit/internal/testenv"
	"github.com/opkit-dev/opkit/internal/testkit"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	root, err := repo.Root()
	if err != nil {
		panic(err)
	}
	testenv.Main(m, &env, testenv.WithCRDPaths(
		filepath.Join(root, "examples", "memcached", "config", "crd", "bases"),
		filepath.Join(root, "examples", "etcd", "config", "crd", "bases"),
		filepath.Join(root, "internal", "testapi", "crd"),
	))
}

// TestJustCreatedIsInProgress: a custom resource nobody has reconciled yet
// is InProgress for kstatus, not Current. Its status has neither
// conditions nor observedGeneration, which kstatus reads as "Resource is
// current": a health check or wait passed before the operator had even
// seen the object. Each kind defaults status.observedGeneration to -1 (as
// Flux's own kinds do), which kstatus compares with metadata.generation.
func TestJustCreatedIsInProgress(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, sample string
	}{
		{"Memcached", "examples/memcached/config/samples/cache_v1beta1_memcached.yaml"},
		{"EtcdCluster", "examples/etcd/config/samples/etcdcluster.yaml"},
		{"EtcdBackup", "examples/etcd/config/samples/etcdbackup.yaml"},
		{"Widget (the library's test API)", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "test.opkit.dev/v1", "kind": "Widget",
				"metadata": map[string]any{"name": "w"}, "spec": map[string]any{"replicas": int64(1)},
			}}
			if tt.sample != "" {
				b, err := os.ReadFile(filepath.Join(root, tt.sample))
				if err != nil {
					t.Fatal(err)
				}
				obj = testkit.DecodeObjects(t, b)[0]
			}
			obj.SetNamespace("default")
			testkit.Must(t, env.Client.Create(t.Context(), obj))
			t.Cleanup(func() { _ = env.Client.Delete(t.Context(), obj) })

			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(obj.GroupVersionKind())
			testkit.Must(t, env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), got))
			res, err := status.Compute(got)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != status.InProgressStatus {
				t.Errorf("kstatus of a just-created %s = %s (%q), want %s; status %v",
					got.GetKind(), res.Status, res.Message, status.InProgressStatus, got.Object["status"])
			}
		})
	}
}

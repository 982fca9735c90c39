package examples_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/yaml"

	"github.com/opkit-dev/opkit/internal/repo"
	"github.com/opkit-dev/opkit/internal/testenv"
	"github.com/opkit-dev/opkit/webhook"
)

// TestWebhooksLetFinalizersGo: with no replica of the operator serving,
// the installers' validating webhooks (failurePolicy Fail) still refuse a
// spec change, but let a metadata-only update through, and the removal of
// a finalizer from an object being deleted, as package webhook's doc
// promises. Before, the API server called the webhook on every update, and
// with the operator down an object could not even lose its finalizer.
func TestWebhooksLetFinalizersGo(t *testing.T) {
	samples := map[string]string{"etcd": "etcdcluster.yaml", "memcached": "cache_v1beta1_memcached.yaml"}
	for _, ex := range repo.Operators {
		t.Run(ex.Dir, func(t *testing.T) {
			ctx := t.Context()
			env, err := testenv.Start(testenv.WithCRDPaths(filepath.Join(ex.Dir, "config", "crd", "bases")))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = env.Stop() })
			c := env.Client

			raw, err := os.ReadFile(filepath.Join(ex.Dir, "config", "samples", samples[ex.Dir]))
			if err != nil {
				t.Fatal(err)
			}
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(raw, &obj.Object); err != nil {
				t.Fatal(err)
			}
			obj.SetNamespace("default")
			obj.SetFinalizers([]string{"test.opkit.dev/hold"})
			if err := c.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}

			// The installer's webhooks, served by nobody.
			for _, o := range buildInstaller(t, ex.Dir, "registry.example/op:v1") {
				if o.GetKind() != "ValidatingWebhookConfiguration" && o.GetKind() != "MutatingWebhookConfiguration" {
					continue
				}
				hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
				for i := range hooks {
					h := hooks[i].(map[string]any)
					h["clientConfig"] = map[string]any{"url": "https://127.0.0.1:1/nobody"}
				}
				if err := unstructured.SetNestedSlice(o.Object, hooks, "webhooks"); err != nil {
					t.Fatal(err)
				}
				if err := c.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			// A field each sample leaves alone, then another value of it.
			field := map[string][]string{"etcd": {"spec", "podTemplate", "annotations", "test"}, "memcached": {"spec", "image"}}[ex.Dir]
			specChange := func(ctx context.Context) error {
				cur := obj.DeepCopy()
				if err := c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
					return err
				}
				if err := unstructured.SetNestedField(cur.Object, "changed", field...); err != nil {
					return err
				}
				return c.Update(ctx, cur, client.DryRunAll)
			}
			if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				return specChange(ctx) != nil, nil
			}); err != nil {
				t.Fatalf("a spec change with no webhook serving: %v, want it refused", specChange(ctx))
			}

			update := func(what string, change func(*unstructured.Unstructured)) {
				t.Helper()
				cur := obj.DeepCopy()
				if err := c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
					t.Fatal(err)
				}
				change(cur)
				if err := c.Update(ctx, cur); err != nil {
					t.Errorf("%s with no webhook serving: %v", what, err)
				}
			}
			update("labelling", func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"team": "a"}) })
			if err := c.Delete(ctx, obj); err != nil {
				t.Fatal(err)
			}
			update("removing the finalizer of an object being deleted", func(u *unstructured.Unstructured) {
				controllerutil.RemoveFinalizer(u, "test.opkit.dev/hold")
			})
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj.DeepCopy()); !apierrors.IsNotFound(err) {
				t.Errorf("after its finalizer was removed: %v, want it gone", err)
			}
		})
	}
}

// TestMatchConditionsAreTheLibrarys: each example's kustomize patch adds
// webhook.MatchConditions to its webhook, as the chart does (hack/chartgen
// reads the same patch).
func TestMatchConditionsAreTheLibrarys(t *testing.T) {
	for _, ex := range repo.Operators {
		raw, err := os.ReadFile(filepath.Join(ex.Dir, "config", "webhook", "match_conditions.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var ops []struct {
			Op    string                                   `json:"op"`
			Path  string                                   `json:"path"`
			Value []admissionregistrationv1.MatchCondition `json:"value"`
		}
		if err := yaml.UnmarshalStrict(raw, &ops); err != nil {
			t.Fatalf("%s: %v", ex.Dir, err)
		}
		if len(ops) != 1 || ops[0].Op != "add" || ops[0].Path != "/webhooks/0/matchConditions" {
			t.Fatalf("%s: ops %+v, want one add of /webhooks/0/matchConditions", ex.Dir, ops)
		}
		if diff := cmp.Diff(webhook.MatchConditions(), ops[0].Value); diff != "" {
			t.Errorf("%s's match conditions (-library +patch):\n%s", ex.Dir, diff)
		}
	}
}

package reconcile

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestApplyContent: the content of an apply has no status, no server-set
// metadata, no nulls and no digest label (EnsureChild sets that itself),
// and building it leaves desired as it was, typed or unstructured: a write
// that fails must not leave the caller's object half-changed.
func TestApplyContent(t *testing.T) {
	deployment := func(meta map[string]any, spec map[string]any) *unstructured.Unstructured {
		meta["name"], meta["namespace"] = "web", "ns"
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec}}
	}
	selector := func() map[string]any {
		return map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}}}
	}
	tests := []struct {
		name    string
		desired func() client.Object // called twice: one is kept as it was
		want    map[string]any
	}{
		{"typed",
			func() client.Object {
				return &appsv1.Deployment{
					ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", Labels: map[string]string{"app": "web", LabelAppliedDigest: "0123-abcd"},
						UID: types.UID("u1"), ResourceVersion: "7", Generation: 2},
					Spec:   appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
					Status: appsv1.DeploymentStatus{Replicas: 1},
				}
			},
			deployment(map[string]any{"labels": map[string]any{"app": "web"}}, map[string]any{
				"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
				"strategy": map[string]any{},
				"template": map[string]any{"metadata": map[string]any{}, "spec": map[string]any{}},
			}).Object},
		{"unstructured",
			func() client.Object {
				u := deployment(map[string]any{
					"uid": "u1", "resourceVersion": "7", "generation": int64(2), "creationTimestamp": nil,
					"labels": map[string]any{"app": "web", LabelAppliedDigest: "0123-abcd"},
				}, selector())
				u.Object["status"] = map[string]any{"replicas": int64(1)}
				return u
			},
			deployment(map[string]any{"labels": map[string]any{"app": "web"}}, selector()).Object},
		// Go values that are not JSON's (a hand-built content) are
		// carried as they are, not refused.
		{"unstructured with Go values",
			func() client.Object {
				return deployment(map[string]any{}, map[string]any{"replicas": 2, "args": []string{"-a"}, "paused": nil})
			},
			deployment(map[string]any{}, map[string]any{"replicas": 2, "args": []string{"-a"}}).Object},
		{"only the digest label: no labels",
			func() client.Object {
				return deployment(map[string]any{"labels": map[string]any{LabelAppliedDigest: "0123"}}, selector())
			},
			deployment(map[string]any{}, selector()).Object},
		// As the shape of a POST recorded it before applyContent dropped
		// the label itself.
		{"empty labels are kept",
			func() client.Object { return deployment(map[string]any{"labels": map[string]any{}}, selector()) },
			deployment(map[string]any{"labels": map[string]any{}}, selector()).Object},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			desired, before := tt.desired(), tt.desired()
			u, err := applyContent(desired, "apps/v1", "Deployment")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, u.Object); diff != "" {
				t.Errorf("content (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, desired); diff != "" {
				t.Errorf("desired changed (-before +after):\n%s", diff)
			}
		})
	}
}

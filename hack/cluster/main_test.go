package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/testenv"
)

// TestTaintFakeNodes: beside real nodes, kwok's fake nodes get the taint
// that keeps what a user applies off them, once; real nodes do not.
// Before, `make cluster-up REAL_NODES=1` scheduled the etcd operator of
// `kubectl apply -k examples/etcd/config/default` onto a fake node, where
// it never ran.
func TestTaintFakeNodes(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	for _, n := range []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "node-000000", Labels: map[string]string{"type": "kwok"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-000001", Labels: map[string]string{"type": "kwok"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "real-node-0", Labels: map[string]string{"opkit.dev/real-node": "true"}}},
	} {
		if err := env.Client.Create(t.Context(), n); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // idempotent
		if err := taintFakeNodes(t.Context(), env.Config); err != nil {
			t.Fatal(err)
		}
	}
	var nodes corev1.NodeList
	if err := env.Client.List(t.Context(), &nodes, client.HasLabels{}); err != nil {
		t.Fatal(err)
	}
	// The API server adds its not-ready taint to new nodes: only ours is
	// counted.
	got := map[string]int{}
	for _, n := range nodes.Items {
		got[n.Name] = 0
		for _, taint := range n.Spec.Taints {
			if taint.MatchTaint(&fakeNodeTaint) && taint.Value == fakeNodeTaint.Value {
				got[n.Name]++
			}
		}
	}
	want := map[string]int{"node-000000": 1, "node-000001": 1, "real-node-0": 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s taints by node (-want +got):\n%s", fakeNodeTaint.ToString(), diff)
	}
}

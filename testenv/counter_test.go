package testenv_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestCountingClient: a test asserts how many requests, and writes, a
// piece of code sends.
func TestCountingClient(t *testing.T) {
	ns := env.Namespace(t)
	c, counter, err := env.CountingClient()
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns}}
	if err := c.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(cm), cm); err != nil {
		t.Fatal(err)
	}
	// The GETs include the client's first discovery requests.
	if got := counter.Counts(); got["POST"] != 1 || got["GET"] < 1 {
		t.Errorf("requests by method %v, want one POST and a GET", got)
	}
	if got := counter.Writes(); got != 1 || counter.WritesTo("/configmaps") != 1 {
		t.Errorf("Writes() = %d, WritesTo(/configmaps) = %d, want 1 and 1", got, counter.WritesTo("/configmaps"))
	}
	counter.Reset()
	if got := counter.Total(); got != 0 {
		t.Errorf("Total() after Reset = %d, want 0", got)
	}
}

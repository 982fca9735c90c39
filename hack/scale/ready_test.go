package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// readyMemcached is a Memcached at generation 2 whose status reports
// readyReplicas pods, observedGeneration og, and a Ready condition of
// status ready at generation cg, among the operator's other conditions.
func readyMemcached(og, readyReplicas, cg int64, ready string) *unstructured.Unstructured {
	cond := func(typ, status string) any {
		return map[string]any{"type": typ, "status": status, "observedGeneration": cg, "reason": "AsExpected", "message": "", "lastTransitionTime": "2026-11-26T00:00:00Z"}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cache.opkit.dev/v1beta1", "kind": "Memcached",
		"metadata": map[string]any{"name": "mc-0", "namespace": "opkit", "generation": int64(2)},
		"spec":     map[string]any{"replicas": readyReplicas},
		"status": map[string]any{
			"observedGeneration": og, "readyReplicas": readyReplicas, "nodes": []any{"mc-0-abc"},
			"conditions": []any{cond("Available", "True"), cond("Progressing", "False"), cond("Degraded", "False"),
				cond("Reconciling", "False"), cond("Stalled", "False"), cond("Ready", ready)},
		},
	}}
}

// TestMemcachedReady: Ready=True at the current generation, with the
// expected ready pods.
func TestMemcachedReady(t *testing.T) {
	tests := []struct {
		name string
		m    *unstructured.Unstructured
		pods int64
		want bool
	}{
		{"ready", readyMemcached(2, 1, 2, "True"), 1, true},
		{"not ready", readyMemcached(2, 1, 2, "False"), 1, false},
		{"status of an older generation", readyMemcached(1, 1, 1, "True"), 1, false},
		{"condition of an older generation", readyMemcached(2, 1, 1, "True"), 1, false},
		{"fewer pods", readyMemcached(2, 1, 2, "True"), 2, false},
		{"no status", &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"generation": int64(1)}}}, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := memcachedReady(tt.m, tt.pods); got != tt.want {
				t.Errorf("memcachedReady = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestMemcachedReadyAllocatesNothing: the benchmark runs this check on
// every Memcached ten times a second, on the same two cores as the
// contender it measures, so it must not copy the status (NestedSlice
// does) or allocate at all.
func TestMemcachedReadyAllocatesNothing(t *testing.T) {
	m := readyMemcached(2, 1, 2, "True")
	if allocs := testing.AllocsPerRun(100, func() { memcachedReady(m, 1) }); allocs != 0 {
		t.Errorf("memcachedReady allocates %.0f times per call, want 0", allocs)
	}
}

func BenchmarkMemcachedReady(b *testing.B) {
	m := readyMemcached(2, 1, 2, "True")
	for b.Loop() {
		memcachedReady(m, 1)
	}
}

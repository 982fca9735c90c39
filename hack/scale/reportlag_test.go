package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestReadyTrackerExtra: the last rollout, and the median, 90th percentile
// and largest time from an object's rollout to its Ready, over the objects
// seen both ways; a Ready seen in the same poll as the rollout is 0.
func TestReadyTrackerExtra(t *testing.T) {
	tests := []struct {
		name          string
		rolled, ready map[string]float64
		want          map[string]float64
	}{
		{
			name:   "nothing seen",
			rolled: map[string]float64{},
			ready:  map[string]float64{},
		},
		{
			name:   "rolled out, never Ready",
			rolled: map[string]float64{"a": 1},
			ready:  map[string]float64{},
		},
		{
			name: "ten objects",
			rolled: map[string]float64{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6, "g": 7, "h": 8, "i": 9,
				"j": 10, "late": 12},
			ready: map[string]float64{"a": 1, "b": 2.5, "c": 3.5, "d": 4.5, "e": 5.5, "f": 6.5, "g": 7.5, "h": 9, "i": 11,
				"j": 14, "ready only": 3},
			want: map[string]float64{extraRolledOut: 12, extraLagMedian: 0.5, extraLagP90: 2, extraLagMax: 4},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := &readyTracker{rolled: tt.rolled, ready: tt.ready}
			if diff := cmp.Diff(tt.want, tr.extra()); diff != "" {
				t.Errorf("extra (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReportLagTable: a row per step and contender measured, direct's
// rollout being its step; runs without the tracker's keys have no table.
func TestReportLagTable(t *testing.T) {
	r := fakeRun(1000, 1.2)
	o := r.Contenders[contOpkit]
	o.Create.Extra = map[string]float64{extraRolledOut: 30, extraLagMedian: 0.4, extraLagP90: 1.5, extraLagMax: 5}
	o.Resize.Extra = map[string]float64{extraRolledOut: 2.5, extraLagMedian: 0.2, extraLagP90: 0.3, extraLagMax: 0.5}
	renderAndWant(t, r,
		"| step | last Deployment rolled out | last done | Ready after its Deployment: median | 90th percentile | max |\n|---|---:|---:|---:|---:|---:|\n"+
			"| opkit: create | 30.0 s | 36.0 s | 0.4 s | 1.5 s | 5.0 s |\n"+
			"| direct: create | 30.0 s | 30.0 s | - | - | - |\n"+
			"| opkit: resize | 2.5 s | 3.0 s | 0.2 s | 0.3 s | 0.5 s |\n"+
			"| direct: resize | 3.0 s | 3.0 s | - | - | - |\n\n",
	)
	res := &results{Started: time.Now(), Nodes: 10, Primary: 1000, Runs: []*runResult{fakeRun(1000, 1.2)}}
	if md := markdown(report{Command: "scale", Results: res}, config{}); strings.Contains(md, "Rolled out, then reported") {
		t.Errorf("a run without rollout times has their table:\n%s", md)
	}
}

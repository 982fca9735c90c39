package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRoundOrder(t *testing.T) {
	for i, want := range [][]string{
		{contDirect, contOpkit, contTutorial},
		{contTutorial, contOpkit, contDirect},
		{contDirect, contOpkit, contTutorial},
		{contTutorial, contOpkit, contDirect},
	} {
		if diff := cmp.Diff(want, roundOrder(i)); diff != "" {
			t.Errorf("roundOrder(%d) (-want +got):\n%s", i, diff)
		}
	}
	if diff := cmp.Diff([]string{contDirect, contOpkit, contTutorial}, contenderOrder); diff != "" {
		t.Errorf("roundOrder reversed contenderOrder itself (-want +got):\n%s", diff)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{1.4}, 1.4},
		{[]float64{1.5, 1.1, 1.2}, 1.2},
		{[]float64{1.5, 1.1, 1.2, 1.3}, 1.25},
	} {
		if got := median(tc.xs); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

// TestRoundsReport: three rounds whose create ratios are 1.20, 1.40 and
// 1.10 are judged on 1.20 (met), whatever round 1 alone says.
func TestRoundsReport(t *testing.T) {
	r := fakeRun(1000, 1.4) // round 1: 1.40, not met on its own
	r.addRound(contenderOrder, r)
	for i, ratio := range []float64{1.2, 1.1} {
		r.addRound(roundOrder(i+1), fakeRun(1000, ratio))
	}
	if got := r.Rounds[1].Order; got[0] != contTutorial {
		t.Errorf("round 2's order %v, want the reverse of %v", got, contenderOrder)
	}
	renderAndWant(t, r,
		"| create 1000 of size 1, until all Ready / available | 42.0 s | 60.0 s | 30.0 s | 1.40 | <= 1.25 (**not met**) |",
		"| ratio | round 1 (direct, opkit, tutorial) | round 2 (tutorial, opkit, direct) | round 3 (direct, opkit, tutorial) | median | spread | target |",
		"| create, opkit / direct | 1.40 | 1.20 | 1.10 | **1.20** | 1.10-1.40 | <= 1.25 (met) |",
		"| create, opkit / tutorial | 0.70 | 0.60 | 0.55 | **0.60** | 0.55-0.70 | <= 0.65 (met) |",
		"| delete, opkit / direct | 1.00 | 1.00 | 1.00 | **1.00** | 1.00-1.00 | <= 1.20 (met) |",
		"| opkit: create | 42.0 | 36.0 | 33.0 |",
	)
	// One round: no rounds table.
	one := fakeRun(1000, 1.2)
	if md := markdown(report{Command: "scale", Results: &results{Primary: 1000, Runs: []*runResult{one}}}, config{}); strings.Contains(md, "median") {
		t.Errorf("a run of one round has a rounds table:\n%s", md)
	}
}

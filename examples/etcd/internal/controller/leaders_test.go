package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestLeadersObserve counts leader changes across passes, including the
// first pass after an operator restart, seeded from the status.
func TestLeadersObserve(t *testing.T) {
	type pass struct{ previous, leader string }
	tests := []struct {
		name   string
		passes []pass
		want   []bool
	}{
		{"first leader is no change", []pass{{"", "a"}}, []bool{false}},
		{"same leader", []pass{{"", "a"}, {"a", "a"}}, []bool{false, false}},
		{"new leader", []pass{{"", "a"}, {"a", "b"}}, []bool{false, true}},
		{"restart: status leader differs", []pass{{"a", "b"}}, []bool{true}},
		{"restart: status leader same", []pass{{"a", "a"}}, []bool{false}},
		{"leader unseen in between, then same", []pass{{"", "a"}, {"a", ""}, {"", "a"}}, []bool{false, false, false}},
		{"leader unseen in between, then other", []pass{{"", "a"}, {"a", ""}, {"", "b"}}, []bool{false, false, true}},
		{"restart while unseen, then other", []pass{{"a", ""}, {"", "b"}}, []bool{false, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l leaders
			var got []bool
			for _, p := range tt.passes {
				got = append(got, l.observe("ns/c", p.previous, p.leader))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
		})
	}
}

package shard_test

import (
	"fmt"
	"testing"

	"github.com/opkit-dev/opkit/shard"
)

func keys(n int) []string {
	k := make([]string, n)
	for i := range k {
		k[i] = fmt.Sprintf("default/memcached-%d", i)
	}
	return k
}

func TestOwnerSpreadsEvenly(t *testing.T) {
	for _, members := range [][]string{
		{"op-6c9f7-abcde", "op-6c9f7-abcdf", "op-6c9f7-abcdg"},
		{"a", "b"},
		{"r0", "r1", "r2", "r3", "r4"},
	} {
		const n = 10000
		count := map[string]int{}
		for _, k := range keys(n) {
			count[shard.Owner(k, members)]++
		}
		want := n / len(members)
		for _, m := range members {
			if got := count[m]; got < want*9/10 || got > want*11/10 {
				t.Errorf("members %v: %s owns %d of %d keys, want %d ±10%%", members, m, got, n, want)
			}
		}
	}
}

func TestOwnerMovesOnlyTheChangedShare(t *testing.T) {
	three := []string{"r0", "r1", "r2"}
	tests := []struct {
		name  string
		after []string
		// moved reports whether a key owned by before may move to after.
		moved func(before, after string) bool
	}{
		{"r1 leaves: only its keys move", []string{"r0", "r2"}, func(b, _ string) bool { return b == "r1" }},
		{"r3 joins: keys move only to it", []string{"r0", "r1", "r2", "r3"}, func(_, a string) bool { return a == "r3" }},
		{"order does not matter", []string{"r2", "r0", "r1"}, func(string, string) bool { return false }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			moves := 0
			for _, k := range keys(3000) {
				b, a := shard.Owner(k, three), shard.Owner(k, tt.after)
				if b == a {
					continue
				}
				moves++
				if !tt.moved(b, a) {
					t.Fatalf("key %s moved from %s to %s", k, b, a)
				}
			}
			t.Logf("%d of 3000 keys moved", moves)
		})
	}
}

func TestOwnerOfNoMembers(t *testing.T) {
	if got := shard.Owner("k", nil); got != "" {
		t.Errorf("Owner with no members = %q, want \"\"", got)
	}
}

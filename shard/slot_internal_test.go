package shard

import (
	"fmt"
	"testing"
)

func TestAssignSpreadsAndMovesLittle(t *testing.T) {
	owner := func(a map[string][]int) map[int]string {
		o := map[int]string{}
		for m, slots := range a {
			for _, s := range slots {
				o[s] = m
			}
		}
		return o
	}
	moved := func(from, to map[string][]int) int {
		a, b := owner(from), owner(to)
		n := 0
		for s := range a {
			if a[s] != b[s] {
				n++
			}
		}
		return n
	}
	for _, tc := range []struct{ n, members int }{{64, 1}, {64, 2}, {64, 3}, {64, 4}, {64, 7}, {32, 3}, {4, 3}} {
		var ms []string
		for i := range tc.members {
			ms = append(ms, fmt.Sprintf("memcached-operator-7d9f8c-%c", 'a'+i))
		}
		a := assign(tc.n, ms)
		lo, hi, total := tc.n, 0, 0
		for _, m := range ms {
			lo, hi, total = min(lo, len(a[m])), max(hi, len(a[m])), total+len(a[m])
		}
		if total != tc.n || hi-lo > 1 {
			t.Errorf("assign(%d, %d members): shares %d to %d, %d slots in all; want each slot once, shares within one of each other", tc.n, tc.members, lo, hi, total)
		}
		if tc.members == 1 {
			continue
		}
		left := assign(tc.n, ms[1:])
		joined := assign(tc.n, append(ms[1:len(ms):len(ms)], "memcached-operator-7d9f8c-z"))
		share := len(a[ms[0]])
		if m := moved(a, left); 2*m > 3*share {
			t.Errorf("assign(%d, %d members): a member holding %d slots left, %d moved; want at most 1.5x its share", tc.n, tc.members, share, m)
		}
		if m := moved(a, joined); m > 2*share {
			t.Errorf("assign(%d, %d members): a member holding %d slots was replaced, %d moved; want at most twice its share", tc.n, tc.members, share, m)
		}
	}
}

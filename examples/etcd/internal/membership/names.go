package membership

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

func sortedPods(in []Pod) []Pod {
	out := slices.Clone(in)
	slices.SortFunc(out, func(a, b Pod) int { return compareNames(a.Name, b.Name) })
	return out
}

// compareNames orders "<cluster>-<n>" names by n, then lexically.
func compareNames(a, b string) int {
	ia, ib := ordinal(a), ordinal(b)
	if c := cmp.Compare(ia, ib); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

func ordinal(name string) int {
	i := strings.LastIndexByte(name, '-')
	n, err := strconv.Atoi(name[i+1:])
	if err != nil {
		return -1
	}
	return n
}

// nextName returns "<cluster>-<n>" with the smallest n used by no pod,
// member or claim being deleted.
func nextName(o Observed, pods map[string]Pod, members map[string]Member) string {
	for n := 0; ; n++ {
		name := o.Cluster + "-" + strconv.Itoa(n)
		_, p := pods[name]
		_, m := members[name]
		if !p && !m && !o.ClaimsDeleting[name] {
			return name
		}
	}
}

package shard

import (
	"cmp"
	"hash/fnv"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
)

// DefaultSlots is a ring's number of slots when Ring.Slots is 0: enough
// for three members to hold shares within ±5% of each other.
const DefaultSlots = 64

func (r Ring) slots() int { return cmp.Or(r.Slots, DefaultSlots) }

// SlotLabel is the label whose value is an object's slot:
// slot.shard.opkit.dev/<Name>. It is written once, at creation; a
// member's cache selects the slots it holds, so ownership moves
// without writing to the objects.
func (r Ring) SlotLabel() string { return "slot.shard.opkit.dev/" + r.Name }

// Slot returns the slot of the object named key: FNV-1a of
// namespace/name modulo Slots. A child takes its owner's slot.
func (r Ring) Slot(key types.NamespacedName) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key.Namespace + "/" + key.Name))
	return int(h.Sum32() % uint32(r.slots()))
}

// slotsRequirement selects the objects of slots; nil selects those of
// no slot: unlabelled, or labelled with a value that is none.
func (r Ring) slotsRequirement(slots []int) labels.Requirement {
	op := selection.In
	if slots == nil {
		op = selection.NotIn
		for s := range r.slots() {
			slots = append(slots, s)
		}
	}
	vals := make([]string, len(slots))
	for i, s := range slots {
		vals[i] = strconv.Itoa(s)
	}
	req, err := labels.NewRequirement(r.SlotLabel(), op, vals)
	if err != nil {
		// Unreachable: the label is a valid key and the values numbers.
		panic(err)
	}
	return *req
}

// slotOf reads an object's slot from its labels.
func (r Ring) slotOf(l map[string]string) (int, bool) {
	s, err := strconv.Atoi(l[r.SlotLabel()])
	return s, err == nil && s >= 0 && s < r.slots()
}

// assign gives each of n slots to a member: (slot, member) pairs are
// taken in descending rendezvous score (as Owner), each while its slot
// is free and its member below its quota, n/len(members) or one more.
// Shares differ by one at most; a member leaving or joining moves
// little more than its share.
func assign(n int, members []string) map[string][]int {
	out := make(map[string][]int, len(members))
	if len(members) == 0 {
		return out
	}
	sorted := slices.Sorted(slices.Values(members))
	quota := make(map[string]int, len(sorted))
	for i, m := range sorted {
		quota[m] = n / len(sorted)
		if i < n%len(sorted) {
			quota[m]++
		}
	}
	type pair struct {
		slot   int
		member string
		score  uint64
	}
	pairs := make([]pair, 0, n*len(sorted))
	for s := range n {
		for _, m := range sorted {
			pairs = append(pairs, pair{s, m, score(m, strconv.Itoa(s))})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		return cmp.Or(cmp.Compare(b.score, a.score), cmp.Compare(a.slot, b.slot), cmp.Compare(a.member, b.member))
	})
	taken := make([]bool, n)
	for _, p := range pairs {
		if !taken[p.slot] && len(out[p.member]) < quota[p.member] {
			taken[p.slot] = true
			out[p.member] = append(out[p.member], p.slot)
		}
	}
	for _, m := range sorted {
		slices.Sort(out[m])
	}
	return out
}

// score is FNV-1a of member and key, finished with splitmix64's mixer:
// FNV alone scores names that differ in one character too alike.
// Rendezvous hashing is a dozen lines and keeps no state, so no library
// is used.
func score(member, key string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(member))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(key))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

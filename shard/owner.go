package shard

import "hash/fnv"

// Owner returns the member that owns key: the one with the highest hash
// of (member, key). Every caller with the same members agrees; when a
// member leaves only its keys move, and a member that joins takes keys
// only from the others. It returns "" for no members.
//
// Rendezvous hashing is a dozen lines and keeps no ring state, so no
// library is used.
func Owner(key string, members []string) string {
	var best string
	var bestScore uint64
	for _, m := range members {
		s := score(m, key)
		if best == "" || s > bestScore || (s == bestScore && m < best) {
			best, bestScore = m, s
		}
	}
	return best
}

// score is FNV-1a of member and key, finished with splitmix64's mixer:
// FNV alone scores names that differ in one character too alike.
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

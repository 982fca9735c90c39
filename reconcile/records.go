package reconcile

import "time"

// drop deletes k from *m, and the map itself once empty: a Go map keeps
// the storage of its largest size, and these records are many only while
// many objects are written at once (a create of thousands).
func drop[K comparable, V any](m *map[K]V, k K) {
	delete(*m, k)
	if len(*m) == 0 {
		*m = nil
	}
}

// pruneOlder drops the records of *m older than ttl by at, at most once
// every interval since *last: records whose key is never visited again
// are not kept forever.
func pruneOlder[K comparable, V any](m *map[K]V, last *time.Time, now time.Time, interval, ttl time.Duration, at func(V) time.Time) {
	if now.Sub(*last) <= interval {
		return
	}
	for k, v := range *m {
		if now.Sub(at(v)) > ttl {
			drop(m, k)
		}
	}
	*last = now
}

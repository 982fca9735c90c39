package reconcile

// drop deletes k from *m, and the map itself once empty: a Go map keeps
// the storage of its largest size, and these records are many only while
// many objects are written at once (a create of thousands).
func drop[K comparable, V any](m *map[K]V, k K) {
	delete(*m, k)
	if len(*m) == 0 {
		*m = nil
	}
}

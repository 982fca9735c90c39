package reconcile

// OwnWritesHeld is how many objects' own writes r remembers.
func OwnWritesHeld[T Object](r *Reconciler[T]) int {
	r.writes.mu.Lock()
	defer r.writes.mu.Unlock()
	return len(r.writes.m)
}

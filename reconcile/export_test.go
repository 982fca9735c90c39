package reconcile

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// OwnWritesHeld is how many objects' own writes r remembers.
func OwnWritesHeld[T Object](r *Reconciler[T]) int {
	r.writes.mu.Lock()
	defer r.writes.mu.Unlock()
	return len(r.writes.m)
}

// UnseenCreatesHeld is how many created children r waits to see an event of.
func UnseenCreatesHeld[T Object](r *Reconciler[T]) int {
	u := r.pass.unseen
	if u == nil {
		return 0
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.m)
}

// WatchedPass returns ctx as the pass of a Reconciler with fieldOwner that
// watches kinds (WithOwns), and the func its watch calls on each event.
func WatchedPass(ctx context.Context, fieldOwner string, kinds ...schema.GroupVersionKind) (context.Context, func(schema.GroupVersionKind, types.NamespacedName)) {
	u := &unseenCreates{kinds: map[schema.GroupVersionKind]bool{}}
	for _, k := range kinds {
		u.kinds[k] = true
	}
	return withPass(ctx, &pass{fieldOwner: fieldOwner, unseen: u}), u.observe
}

package reconcile

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// unseenCreates holds the children a Reconciler's passes POSTed, of kinds
// it watches (WithOwns), of which no watch event has arrived since. A
// cache miss on such a child is the cache lagging, not a deletion: a
// deletion's event takes the child out before it queues the owner (the
// predicate runs first), so the pass it brings reads the child again.
// Until then EnsureChild takes the POST's response for the child instead
// of an uncached GET, which a pass woken by the first of several children
// created together would otherwise send for each of the others.
type unseenCreates struct {
	kinds map[schema.GroupVersionKind]bool // set by SetupWithManager, then read-only

	mu        sync.Mutex
	next      uint64
	m         map[childKey]unseenCreate
	lastPrune time.Time
}

type unseenCreate struct {
	token   uint64
	at      time.Time
	created bool
}

// unseenCreateTTL bounds the trust in a POST's response: past it a watch
// that never shows the child (a selector it lacks) costs a GET again.
const unseenCreateTTL = 30 * time.Second

// begin is called before k is POSTed and returns the token for created; 0
// for a kind not watched.
func (u *unseenCreates) begin(k childKey) uint64 {
	if u == nil || !u.kinds[k.gvk] {
		return 0
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	now := time.Now()
	pruneOlder(&u.m, &u.lastPrune, now, unseenCreateTTL, unseenCreateTTL, func(c unseenCreate) time.Time { return c.at })
	if u.m == nil {
		u.m = map[childKey]unseenCreate{}
	}
	u.next++
	u.m[k] = unseenCreate{token: u.next, at: now}
	return u.next
}

// created marks k's POST, begun with token, as done, unless an event of
// k arrived meanwhile.
func (u *unseenCreates) created(k childKey, token uint64) {
	if token == 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if c, ok := u.m[k]; ok && c.token == token {
		c.created = true
		u.m[k] = c
	}
}

// unseen reports whether k was created and no event of it has arrived.
func (u *unseenCreates) unseen(k childKey) bool {
	if u == nil {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	c, ok := u.m[k]
	return ok && c.created && time.Since(c.at) <= unseenCreateTTL
}

// observe forgets the child of kind gvk named key: its event arrived.
func (u *unseenCreates) observe(gvk schema.GroupVersionKind, key types.NamespacedName) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.m) > 0 {
		drop(&u.m, childKey{gvk: gvk, key: key})
	}
}

// predicate filters nothing; it observes each event of gvk's children.
func (u *unseenCreates) predicate(gvk schema.GroupVersionKind) predicate.Predicate {
	see := func(o client.Object) bool {
		if o != nil {
			u.observe(gvk, client.ObjectKeyFromObject(o))
		}
		return true
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return see(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return see(e.ObjectNew) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return see(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return see(e.Object) },
	}
}

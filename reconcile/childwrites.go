package reconcile

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// appliedChildren gives EnsureChild read-your-writes over the manager's
// cache, as ownWrites does for the Reconciler's own object.
//
// After EnsureChild applies a change to a child, the cache serves the
// child's previous version until the watch event arrives. EnsureChild in
// that window sees the old digest and would apply the same content again.
// So Children remembers, per child, the digest it last applied and the
// resourceVersions that predate that apply; while the cache serves one of
// those versions and the desired child has the same digest, nothing is
// sent. The record is dropped as soon as the cache shows the applied
// version or a later one (or the child is deleted through DeleteChild),
// and records not looked at for appliedChildTTL are dropped too, so that
// children never visited again are not remembered forever.
//
// Children created by POST are remembered too (recordCreate): until the
// cache shows them, EnsureChild takes the POST's response while no watch
// event of them has arrived (childunseen.go), or else reads them through
// the uncached reader, instead of POSTing again (409 AlreadyExists).
type appliedChildren struct {
	mu        sync.Mutex
	m         map[childKey]appliedChild
	lastPrune time.Time
}

type childKey struct {
	gvk schema.GroupVersionKind
	key types.NamespacedName
}

type appliedChild struct {
	uid      types.UID
	digest   string
	staleRVs []string      // versions the cache may still serve that predate the apply
	applied  client.Object // the apply's response
	created  bool          // a record of a POST (recordCreate): no staleRVs; applied is the response
	at       time.Time
}

// appliedChildTTL bounds how long a record is kept: a watch event arrives
// long before.
const appliedChildTTL = 10 * time.Minute

// lookup returns what was last applied to k when current (read from the
// cache) predates that apply: the record, and true. A current that does
// not predate it drops the record.
func (a *appliedChildren) lookup(k childKey, current client.Object) (appliedChild, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	rec, ok := a.m[k]
	if !ok {
		return appliedChild{}, false
	}
	if !predates(current, rec.uid, rec.staleRVs, rec.applied) {
		drop(&a.m, k)
		return appliedChild{}, false
	}
	return rec, true
}

// record remembers applied (the server's response, carrying its UID and
// new resourceVersion) as the last apply of k, with digest; stale lists the
// versions the cache may still serve instead.
func (a *appliedChildren) record(k childKey, applied client.Object, digest string, stale []string) {
	var rvs []string
	for _, rv := range stale {
		if rv != "" && rv != applied.GetResourceVersion() && !slices.Contains(rvs, rv) {
			rvs = append(rvs, rv)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	pruneOlder(&a.m, &a.lastPrune, now, time.Minute, appliedChildTTL, func(r appliedChild) time.Time { return r.at })
	if len(rvs) == 0 {
		drop(&a.m, k)
		return
	}
	copied, ok := applied.DeepCopyObject().(client.Object)
	if !ok {
		return
	}
	if a.m == nil {
		a.m = map[childKey]appliedChild{}
	}
	a.m[k] = appliedChild{uid: applied.GetUID(), digest: digest, staleRVs: rvs, applied: copied, at: now}
}

// recordCreate remembers that k was created as uid with digest, so that a
// pass reading the cache before it has seen the create reads the child
// instead of POSTing it again; response, the POST's, may be nil when no
// pass can trust it (createdAs).
func (a *appliedChildren) recordCreate(k childKey, uid types.UID, digest string, response client.Object) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[childKey]appliedChild{}
	}
	a.m[k] = appliedChild{uid: uid, digest: digest, applied: response, created: true, at: time.Now()}
}

// createdAs returns a copy of the POST's response for k if k was created
// with digest and not looked up since, or nil.
func (a *appliedChildren) createdAs(k childKey, digest string) client.Object {
	a.mu.Lock()
	defer a.mu.Unlock()
	rec, ok := a.m[k]
	if !ok || !rec.created || rec.digest != digest || rec.applied == nil {
		return nil
	}
	obj, _ := rec.applied.DeepCopyObject().(client.Object)
	return obj
}

// wasCreated reports whether k was created by EnsureChild and not looked
// up since (a lookup, made once the child is read, drops the record).
func (a *appliedChildren) wasCreated(k childKey) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	rec, ok := a.m[k]
	return ok && rec.created && time.Since(rec.at) <= appliedChildTTL
}

// seen drops k's record once current, read from the cache, shows the
// cache has caught up, as lookup does; a pass that writes nothing calls
// it, so that records do not wait for an apply to prune them.
func (a *appliedChildren) seen(k childKey, current client.Object) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if rec, ok := a.m[k]; ok && !predates(current, rec.uid, rec.staleRVs, rec.applied) {
		drop(&a.m, k)
	}
}

// forget drops the record of k.
func (a *appliedChildren) forget(k childKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	drop(&a.m, k)
}

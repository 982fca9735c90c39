package reconcile

import (
	"reflect"
	"slices"
	"strconv"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// ownWrites gives a Reconciler read-your-writes over the manager's cache.
//
// After a pass writes its object (finalizer patch, status apply), the cache
// serves the previous version until the watch event arrives. A pass in that
// window, for example one triggered by the child it just created, would see
// no finalizer and the old status: it would patch the finalizer again with a
// stale resourceVersion (a certain 409 conflict) and re-apply the status.
//
// So the Reconciler remembers, per object, the resourceVersions that predate
// its own last writes and the finalizers, status and managedFields its last
// write left. When a pass reads one of those versions, it overlays them
// before running (managedFields decide which conditions the status apply
// sends: see writeStatus). The
// record is dropped as soon as the cache shows the version the writes left,
// or a later one. A version another writer made between the pass's read
// and its write predates it too, although the pass never read it.
type ownWrites struct {
	mu sync.Mutex
	m  map[types.NamespacedName]ownWrite
	// owner is the Reconciler's field owner; stripped is set once a read
	// of our own write lacked its status entry.
	owner    string
	stripped string
}

type ownWrite struct {
	uid      types.UID
	staleRVs []string      // versions the cache may still serve that predate our writes
	written  client.Object // the object as our last write left it
}

// overlay applies the remembered writes to obj when obj is a version that
// predates them, and returns the stale versions so that the pass can carry
// them forward. It returns nil when obj is current (and forgets the record).
func (w *ownWrites) overlay(key types.NamespacedName, obj client.Object, finalizer string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	rec, ok := w.m[key]
	if !ok {
		return nil
	}
	if !predates(obj, rec.uid, rec.staleRVs, rec.written) {
		w.check(rec, obj)
		drop(&w.m, key)
		return nil
	}
	if controllerutil.ContainsFinalizer(rec.written, finalizer) {
		controllerutil.AddFinalizer(obj, finalizer)
	} else {
		controllerutil.RemoveFinalizer(obj, finalizer)
	}
	copyStatus(rec.written.DeepCopyObject(), obj)
	// managedFields say which conditions this controller owns, and so
	// which the status apply sends: the stale copy's predate the write
	// that took the latest ones, and an apply without them deletes them.
	obj.SetManagedFields(rec.written.GetManagedFields())
	return rec.staleRVs
}

// record remembers obj as written by this pass; stale lists every version the
// cache may still serve instead, starting with readRV, the version the pass
// read. A pass that wrote nothing (obj is still at readRV) leaves the record
// as it is: overlay already dropped it if the read was current.
func (w *ownWrites) record(key types.NamespacedName, obj client.Object, readRV string, stale []string) {
	if obj.GetResourceVersion() == readRV {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[types.NamespacedName]ownWrite{}
	}
	current := obj.GetResourceVersion()
	var rvs []string
	for _, rv := range stale {
		if rv != "" && rv != current && !slices.Contains(rvs, rv) {
			rvs = append(rvs, rv)
		}
	}
	if len(rvs) == 0 {
		drop(&w.m, key)
		return
	}
	written, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return
	}
	w.m[key] = ownWrite{uid: obj.GetUID(), staleRVs: rvs, written: written}
}

// seen drops key's record when obj, the version the informer's store
// holds, is not one the record predates: the cache has our writes. It
// serves writesSeen and recordWrites, since a status-only change queues
// no pass that would drop the record through overlay.
func (w *ownWrites) seen(key types.NamespacedName, obj client.Object) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rec, ok := w.m[key]; ok && !predates(obj, rec.uid, rec.staleRVs, rec.written) {
		w.check(rec, obj)
		drop(&w.m, key)
	}
}

// check notes, reading obj, the version our last write left, when its
// managedFields lack the status entry that write left: the cache keeps
// another manager's entries (KeepManagedFieldsOf of another name), and a
// status write would drop every condition the pass does not set. No
// entries at all is a cache that strips them, which writeStatus handles.
// w.mu is held.
func (w *ownWrites) check(rec ownWrite, obj client.Object) {
	if rec.written == nil || obj.GetUID() != rec.uid || obj.GetResourceVersion() != rec.written.GetResourceVersion() ||
		len(obj.GetManagedFields()) == 0 {
		return
	}
	hasEntry := func(o client.Object) bool {
		return slices.ContainsFunc(o.GetManagedFields(), func(e metav1.ManagedFieldsEntry) bool {
			return e.Manager == w.owner && e.Subresource == "status"
		})
	}
	if hasEntry(rec.written) && !hasEntry(obj) {
		w.stripped = w.owner
	}
}

// strippedOwner returns the field owner whose entry the cache stripped
// from our own write, or "".
func (w *ownWrites) strippedOwner() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stripped
}

// predates says whether obj, read from the cache, is a version of the
// object uid from before written, our write: one listed as stale, or an
// older one (another writer's, between our read and our write).
// resourceVersions are opaque, but the API server's are etcd revisions,
// which only grow; where one does not parse as such, only the listed
// versions count.
func predates(obj client.Object, uid types.UID, staleRVs []string, written client.Object) bool {
	if obj.GetUID() != uid {
		return false
	}
	if slices.Contains(staleRVs, obj.GetResourceVersion()) {
		return true
	}
	if written == nil {
		return false
	}
	got, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	ours, err2 := strconv.ParseUint(written.GetResourceVersion(), 10, 64)
	return err == nil && err2 == nil && got < ours
}

// has says whether key has a record.
func (w *ownWrites) has(key types.NamespacedName) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.m[key]
	return ok
}

// forget drops the record of key.
func (w *ownWrites) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	drop(&w.m, key)
}

// copyStatus sets dst's Status field to src's, for typed objects of the same
// type; other objects are left alone.
func copyStatus(src, dst any) {
	sv, dv := reflect.ValueOf(src), reflect.ValueOf(dst)
	if sv.Kind() != reflect.Pointer || sv.Type() != dv.Type() || sv.Elem().Kind() != reflect.Struct {
		return
	}
	s, d := sv.Elem().FieldByName("Status"), dv.Elem().FieldByName("Status")
	if s.IsValid() && d.CanSet() {
		d.Set(s)
	}
}

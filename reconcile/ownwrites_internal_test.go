package reconcile

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
)

// store is a cache holding at most one Widget.
type store struct{ w *testv1.Widget }

func (s *store) Get(_ context.Context, key client.ObjectKey, out client.Object, _ ...client.GetOption) error {
	if s.w == nil {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "widgets"}, key.Name)
	}
	s.w.DeepCopyInto(out.(*testv1.Widget))
	return nil
}

func (s *store) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// TestWritesSeenReadsTheStore: a watch event can be delivered long after
// the informer stored newer versions, so writesSeen judges the record by
// the store, not by the event's object.
func TestWritesSeenReadsTheStore(t *testing.T) {
	widget := func(uid types.UID, rv string) *testv1.Widget {
		return &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns", UID: uid, ResourceVersion: rv}}
	}
	key := types.NamespacedName{Namespace: "ns", Name: "w"}
	s := &store{}
	r := &Reconciler[*testv1.Widget]{newObj: func() *testv1.Widget { return &testv1.Widget{} }, cache: s}
	held := func() bool { _, ok := r.writes.m[key]; return ok }
	pred := r.writesSeen()

	// A pass read v3 and wrote v4; a late event of v2 arrives while the
	// store still holds v3.
	r.writes.record(key, widget("a", "4"), "3", []string{"3"})
	s.w = widget("a", "3")
	pred.Update(event.UpdateEvent{ObjectOld: widget("a", "1"), ObjectNew: widget("a", "2")})
	if !held() {
		t.Fatal("a late event of v2 dropped the record while the store holds v3, which predates the write")
	}
	s.w = widget("a", "4")
	pred.Update(event.UpdateEvent{ObjectOld: widget("a", "3"), ObjectNew: widget("a", "4")})
	if held() {
		t.Fatal("the record outlived the store's holding the write")
	}

	// The delete event of an earlier object of that name, b's record made
	// since.
	r.writes.record(key, widget("b", "6"), "5", []string{"5"})
	s.w = widget("b", "5")
	pred.Delete(event.DeleteEvent{Object: widget("a", "4")})
	if !held() {
		t.Fatal("the late delete event of an earlier object dropped the record of its successor")
	}
	s.w = nil
	pred.Delete(event.DeleteEvent{Object: widget("b", "6")})
	if held() {
		t.Fatal("the record outlived the object")
	}
}

// TestDeferralForgottenOnceGone: an object that leaves the cache (a
// deletion, or a move to another shard, which reaches no pass) takes its
// deferred status write with it, unless the store holds a successor.
func TestDeferralForgottenOnceGone(t *testing.T) {
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns", UID: "a", ResourceVersion: "4"}}
	key := types.NamespacedName{Namespace: "ns", Name: "w"}
	s := &store{}
	r := &Reconciler[*testv1.Widget]{newObj: func() *testv1.Widget { return &testv1.Widget{} }, cache: s}
	held := func() bool { _, ok := r.progress.m[key]; return ok }
	pred := r.writesSeen()
	r.progress.remaining(key, "a", 2, time.Minute, time.Now())

	s.w = &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns", UID: "b", ResourceVersion: "6"}}
	pred.Delete(event.DeleteEvent{Object: w})
	if !held() {
		t.Fatal("the late delete event of an earlier object dropped the deferral of the one the store holds")
	}
	s.w = nil
	pred.Delete(event.DeleteEvent{Object: w})
	if held() {
		t.Fatal("the deferral outlived the object's leaving the cache")
	}
}

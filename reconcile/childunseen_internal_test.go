package reconcile

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

func TestUnseenCreates(t *testing.T) {
	watched := schema.GroupVersionKind{Version: "v1", Kind: "Service"}
	k := childKey{gvk: watched, key: types.NamespacedName{Namespace: "ns", Name: "a"}}
	other := childKey{gvk: schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, key: k.key}
	for _, tc := range []struct {
		name string
		run  func(u *unseenCreates) bool
		want bool
	}{
		{"created, no event", func(u *unseenCreates) bool {
			u.created(k, u.begin(k))
			return u.unseen(k)
		}, true},
		{"event after the create", func(u *unseenCreates) bool {
			u.created(k, u.begin(k))
			u.observe(k.gvk, k.key)
			return u.unseen(k)
		}, false},
		{"event during the POST", func(u *unseenCreates) bool {
			tok := u.begin(k)
			u.observe(k.gvk, k.key)
			u.created(k, tok)
			return u.unseen(k)
		}, false},
		{"POST failed", func(u *unseenCreates) bool {
			u.begin(k)
			return u.unseen(k)
		}, false},
		{"a later POST begun", func(u *unseenCreates) bool {
			first := u.begin(k)
			u.begin(k)
			u.created(k, first)
			return u.unseen(k)
		}, false},
		{"kind not watched", func(u *unseenCreates) bool {
			u.created(other, u.begin(other))
			return u.unseen(other)
		}, false},
		{"past the TTL", func(u *unseenCreates) bool {
			u.created(k, u.begin(k))
			c := u.m[k]
			c.at = c.at.Add(-unseenCreateTTL - time.Second)
			u.m[k] = c
			return u.unseen(k)
		}, false},
		{"no Reconciler", func(*unseenCreates) bool {
			var u *unseenCreates
			u.created(k, u.begin(k))
			return u.unseen(k)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &unseenCreates{kinds: map[schema.GroupVersionKind]bool{watched: true}}
			if got := tc.run(u); got != tc.want {
				t.Errorf("unseen = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestUnseenCreatesPrunesOld: entries whose event never came are dropped
// by a later begin, so the map does not grow with children never seen.
func TestUnseenCreatesPrunesOld(t *testing.T) {
	watched := schema.GroupVersionKind{Version: "v1", Kind: "Service"}
	u := &unseenCreates{kinds: map[schema.GroupVersionKind]bool{watched: true}}
	for i := range 100 {
		k := childKey{gvk: watched, key: types.NamespacedName{Name: string(rune('a' + i%26)), Namespace: string(rune('a' + i/26))}}
		u.created(k, u.begin(k))
	}
	for k, c := range u.m {
		c.at = c.at.Add(-2 * unseenCreateTTL)
		u.m[k] = c
	}
	u.lastPrune = time.Time{}
	k := childKey{gvk: watched, key: types.NamespacedName{Name: "new"}}
	u.begin(k)
	if len(u.m) != 1 {
		t.Errorf("entries after a prune = %d, want 1", len(u.m))
	}
}

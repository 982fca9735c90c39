package shard_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/opkit-dev/opkit/shard"
)

// TestViewTimesLeasesByItsOwnClock: a Lease that stops changing is live
// for its duration from when the View first saw it, whatever renewTime
// says; a change makes it live again. Leases of other rings, or named
// for another holder, are not members.
func TestViewTimesLeasesByItsOwnClock(t *testing.T) {
	ns := env.Namespace(t)
	r := shard.Ring{Name: "widgets", Namespace: ns}
	lease := func(name, ring, holder string) *coordinationv1.Lease {
		// renewTime an hour old: a clock behind the View's.
		old := metav1.NewMicroTime(time.Now().Add(-time.Hour))
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{shard.RingLabel: ring}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(15)), RenewTime: &old},
		}
	}
	silent := lease("widgets-c", "widgets", "c")
	for _, l := range []*coordinationv1.Lease{silent, lease("gadgets-d", "gadgets", "d"), lease("widgets-e", "widgets", "f")} {
		if err := env.Client.Create(t.Context(), l); err != nil {
			t.Fatal(err)
		}
	}
	v := r.View()
	t0 := time.Now()
	members := func(at time.Duration) []string {
		t.Helper()
		got, err := v.Members(t.Context(), env.Client, t0.Add(at))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, tt := range []struct {
		at   time.Duration
		want []string
	}{{0, []string{"c"}}, {14 * time.Second, []string{"c"}}, {15 * time.Second, nil}} {
		if diff := cmp.Diff(tt.want, members(tt.at)); diff != "" {
			t.Errorf("members %v after first seen (-want +got):\n%s", tt.at, diff)
		}
	}
	silent.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
	if err := env.Client.Update(t.Context(), silent); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"c"}, members(20*time.Second)); diff != "" {
		t.Errorf("members once renewed (-want +got):\n%s", diff)
	}
}

// TestViewDead: a member is dead once the View saw its Lease go or
// expire; one it never saw live only after a lease duration since it was
// first asked about, so that a sharder whose view lags never takes a
// member that just joined for a dead one.
func TestViewDead(t *testing.T) {
	ns := env.Namespace(t)
	r := shard.Ring{Name: "widgets", Namespace: ns}
	for _, id := range []string{"c", "e"} {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "widgets-" + id, Namespace: ns, Labels: map[string]string{shard.RingLabel: "widgets"}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(id), LeaseDurationSeconds: ptr.To(int32(15))},
		}
		if err := env.Client.Create(t.Context(), l); err != nil {
			t.Fatal(err)
		}
	}
	v := r.View()
	t0 := time.Now()
	members := func(at time.Duration) {
		t.Helper()
		if _, err := v.Members(t.Context(), env.Client, t0.Add(at)); err != nil {
			t.Fatal(err)
		}
	}
	dead := func(id string, at time.Duration, want bool) {
		t.Helper()
		if got := v.Dead(id, t0.Add(at)); got != want {
			t.Errorf("Dead(%s) %v after the first look = %v, want %v", id, at, got, want)
		}
	}
	members(0)
	dead("c", 0, false)
	dead("new", time.Second, false) // first asked
	dead("new", 15*time.Second, false)
	dead("new", 16*time.Second, true)
	if err := env.Client.Delete(t.Context(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "widgets-c", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	members(2 * time.Second)
	dead("c", 2*time.Second, true) // its Lease went
	dead("e", 2*time.Second, false)
	members(15 * time.Second)
	dead("e", 15*time.Second, true) // its Lease expired
}

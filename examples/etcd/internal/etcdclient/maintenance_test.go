package etcdclient_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdtest"
)

// TestDefragmentReturnsFreePages fragments a real member's database (4 MiB
// written, deleted and compacted away), checks that Status reports the
// free pages, defragments, and checks that the file shrank to about what is
// in use and that every key kept is still there, value for value.
func TestDefragmentReturnsFreePages(t *testing.T) {
	ms := etcdtest.StartCluster(t, "defrag", 1)
	raw := etcdtest.RawClient(t, ms...)
	c := etcdtest.Client(t, ms...)
	ctx := t.Context()
	want := map[string]string{}
	for i := range 50 {
		k, v := fmt.Sprintf("/app/keep/%03d", i), fmt.Sprintf("value-%d", i)
		if _, err := raw.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	etcdtest.Fragment(t, raw, "/app/", 4096, 1024)

	before, err := c.Status(ctx, ms[0].ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	if before.Reclaimable() < 2<<20 {
		t.Fatalf("after fragmenting: dbSize %d, in use %d: want at least 2 MiB free", before.DBSize, before.DBSizeInUse)
	}
	if err := c.Defragment(ctx, ms[0].ClientURL); err != nil {
		t.Fatal(err)
	}
	after, err := c.Status(ctx, ms[0].ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dbSize %d -> %d bytes (in use %d -> %d)", before.DBSize, after.DBSize, before.DBSizeInUse, after.DBSizeInUse)
	if after.DBSize > before.DBSize-before.Reclaimable()/2 {
		t.Errorf("dbSize after defragmenting = %d, want at most %d (was %d, %d of it free)",
			after.DBSize, before.DBSize-before.Reclaimable()/2, before.DBSize, before.Reclaimable())
	}
	if diff := cmp.Diff(want, etcdtest.Keys(t, raw, "/app/")); diff != "" {
		t.Errorf("keys after defragmenting (-want +got):\n%s", diff)
	}
}

// TestMoveLeader hands leadership of a real three-member cluster to a
// follower through a client on the leader, and checks that a client on a
// follower is refused.
func TestMoveLeader(t *testing.T) {
	ms := etcdtest.StartCluster(t, "move", 3)
	ctx := t.Context()
	anyMember := etcdtest.Client(t, ms...)
	st, err := anyMember.Status(ctx, ms[0].ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	var leader, follower *etcdtest.Member
	var followerID uint64
	for _, m := range ms {
		s, err := anyMember.Status(ctx, m.ClientURL)
		if err != nil {
			t.Fatal(err)
		}
		if s.ID == st.Leader {
			leader = m
		} else if follower == nil {
			follower, followerID = m, s.ID
		}
	}
	if leader == nil || follower == nil {
		t.Fatalf("no leader and follower among %d members", len(ms))
	}

	onFollower := etcdtest.Client(t, follower)
	if err := onFollower.MoveLeader(ctx, followerID); err == nil {
		t.Error("MoveLeader through a follower succeeded; etcd should refuse it")
	}
	onLeader := etcdtest.Client(t, leader)
	if err := onLeader.MoveLeader(ctx, followerID); err != nil {
		t.Fatal(err)
	}
	now, err := anyMember.Status(ctx, follower.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	if now.Leader != followerID {
		t.Errorf("leader after MoveLeader = %s, want %s", etcdclient.FormatID(now.Leader), etcdclient.FormatID(followerID))
	}
}

package etcdclient_test

import (
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdtest"
)

// TestSnapshotOfAnUnresponsiveMemberFails: a backup's caller passes a
// context without a deadline (a snapshot may take minutes), so a member
// that died or stopped answering must end the snapshot with an error,
// not hold the backup forever. The fault campaign found an on-demand
// backup stuck for good on a member killed just before it.
func TestSnapshotOfAnUnresponsiveMemberFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(m *etcdtest.Member)
	}{
		{"killed", func(m *etcdtest.Member) { m.Kill() }},
		{"stopped", func(m *etcdtest.Member) {
			if err := syscall.Kill(m.PID(), syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = syscall.Kill(m.PID(), syscall.SIGCONT) })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ms := etcdtest.StartCluster(t, "stall", 1)
			c, err := etcdclient.NewFactory(time.Second).New(t.Context(), []string{ms[0].ClientURL})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			tc.fault(ms[0])
			done := make(chan error, 1)
			go func() {
				_, err := c.Snapshot(t.Context(), io.Discard)
				done <- err
			}()
			limit := etcdclient.SnapshotStallTimeout + 10*time.Second
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("snapshot of an unresponsive member succeeded")
				}
				t.Logf("snapshot failed as it should: %v", err)
			case <-time.After(limit):
				t.Fatalf("snapshot of an unresponsive member still running after %s", limit)
			}
		})
	}
}

package backup_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/opkit-dev/opkit/backup"
)

// TestWithExtra: the caller's tags reach the manifest, over the
// Snapshotter's own entries of the same key, and the Snapshotter is still
// quiesced: nothing wraps it.
func TestWithExtra(t *testing.T) {
	store := newFS(t)
	snap := &quiesceSnap{bytesSnap: snapOf([]byte("data"))}
	snap.meta.Extra = map[string]string{"engine-detail": "kept", "trigger": "snapshotter's"}
	tags := map[string]string{"trigger": "final", "owner-uid": "1234"}
	m, err := backup.Backup(t.Context(), store, snap, backup.WithExtra(tags))
	if err != nil {
		t.Fatal(err)
	}
	tags["trigger"] = "changed after the call"
	want := map[string]string{"engine-detail": "kept", "trigger": "final", "owner-uid": "1234"}
	if diff := cmp.Diff(want, m.Snapshot.Extra); diff != "" {
		t.Errorf("manifest's Extra (-want +got):\n%s", diff)
	}
	stored, err := backup.Verify(t.Context(), store, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, stored.Snapshot.Extra); diff != "" {
		t.Errorf("stored manifest's Extra (-want +got):\n%s", diff)
	}
	if got := snap.meta.Extra["trigger"]; got != "snapshotter's" {
		t.Errorf("the Snapshotter's own Extra was changed: trigger %q", got)
	}
	if diff := cmp.Diff([]string{"quiesce", "snapshot", "resume"}, snap.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

package backup_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/storetest"
)

// TestPruneKeepsBackupsItCannotRead: Prune may collect only what is
// provably an unfinished backup (data without any manifest, past the grace
// period). A backup whose manifest exists but cannot be read (written by a
// newer opkit before a rollback, damaged) or disagrees with its data is
// kept, whatever its age, and reported with the reason.
func TestPruneKeepsBackupsItCannotRead(t *testing.T) {
	tests := []struct {
		name string
		// damage changes the stored objects of the complete backup m.
		damage func(t *testing.T, store backup.Store, m backup.Manifest)
		want   error
	}{
		{"a manifest of a newer formatVersion", func(t *testing.T, store backup.Store, m backup.Manifest) {
			m.FormatVersion = backup.ManifestFormatVersion + 1
			raw, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			storetest.MustPut(t, store, backup.ManifestKeyFor(m.ID), raw)
		}, backup.ErrBadManifest},
		{"a manifest that does not parse", func(t *testing.T, store backup.Store, m backup.Manifest) {
			storetest.MustPut(t, store, backup.ManifestKeyFor(m.ID), []byte(`{"formatVersion": 1, "id": `))
		}, backup.ErrBadManifest},
		{"data of another size than the manifest's", func(t *testing.T, store backup.Store, m backup.Manifest) {
			storetest.MustPut(t, store, m.DataKey, []byte("truncated"))
		}, backup.ErrSizeMismatch},
		{"a manifest whose data is gone", func(t *testing.T, store backup.Store, m backup.Manifest) {
			if err := store.Delete(t.Context(), m.DataKey); err != nil {
				t.Fatal(err)
			}
		}, backup.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newFS(t)
			old, err := backup.Backup(t.Context(), store, snapOf([]byte("the only copy of old data")), clock(t0, time.Second))
			if err != nil {
				t.Fatal(err)
			}
			newest, err := backup.Backup(t.Context(), store, snapOf([]byte("newest")), clock(t0.Add(time.Hour), time.Second))
			if err != nil {
				t.Fatal(err)
			}
			tt.damage(t, store, old)
			before := storetest.Keys(t, store, "")

			// Long past every grace period, with a policy keeping one.
			res, err := backup.Prune(t.Context(), store, backup.Policy{KeepLast: 1, IncompleteGrace: time.Hour}, time.Now().Add(1000*time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(before, storetest.Keys(t, store, "")); diff != "" {
				t.Errorf("Prune deleted objects of a backup it could not read (-before +after):\n%s", diff)
			}
			if len(res.DeletedIncomplete) != 0 || len(res.Deleted) != 0 || !slices.Equal(res.Kept, []string{newest.ID}) {
				t.Errorf("Prune = %+v; want %s kept and nothing deleted", res, newest.ID)
			}
			if len(res.Unreadable) != 1 || res.Unreadable[0].ID != old.ID || !errors.Is(res.Unreadable[0].Err, tt.want) {
				t.Errorf("Unreadable = %+v; want %s with an error wrapping %v", res.Unreadable, old.ID, tt.want)
			}
		})
	}
}

package backup_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/storetest"
)

func TestInvalidManifestsMakeBackupsIncomplete(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(m map[string]any)
		raw     string
		wantErr string
	}{
		{name: "future format", mutate: func(m map[string]any) { m["formatVersion"] = 99 }, wantErr: "formatVersion 99 is not supported"},
		{name: "missing format", mutate: func(m map[string]any) { delete(m, "formatVersion") }, wantErr: "formatVersion 0"},
		{name: "other id", mutate: func(m map[string]any) { m["id"] = "20000101T000000Z-00000000" }, wantErr: "does not match its key"},
		{name: "other data key", mutate: func(m map[string]any) { m["dataKey"] = "elsewhere.data" }, wantErr: "dataKey"},
		{name: "negative size", mutate: func(m map[string]any) { m["size"] = -1 }, wantErr: "negative"},
		{name: "uppercase sha", mutate: func(m map[string]any) { m["sha256"] = strings.ToUpper(m["sha256"].(string)) }, wantErr: "64 lowercase hex"},
		{name: "short sha", mutate: func(m map[string]any) { m["sha256"] = "abc" }, wantErr: "64 lowercase hex"},
		{name: "non-hex sha", mutate: func(m map[string]any) { m["sha256"] = strings.Repeat("g", 64) }, wantErr: "64 lowercase hex"},
		{name: "huge", raw: `{"pad":"` + strings.Repeat("x", 1<<20) + `"}`, wantErr: "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newFS(t)
			m, err := backup.Backup(t.Context(), store, snapOf([]byte("data")))
			if err != nil {
				t.Fatal(err)
			}
			raw := []byte(tc.raw)
			if tc.mutate != nil {
				var fields map[string]any
				if err := json.Unmarshal(storetest.MustGet(t, store, backup.ManifestKeyFor(m.ID)), &fields); err != nil {
					t.Fatal(err)
				}
				tc.mutate(fields)
				if raw, err = json.Marshal(fields); err != nil {
					t.Fatal(err)
				}
			}
			storetest.MustPut(t, store, backup.ManifestKeyFor(m.ID), raw)
			if list, err := backup.List(t.Context(), store); err != nil || len(list) != 0 {
				t.Errorf("List = %v, %v; want no complete backup", list, err)
			}
			_, err = backup.Restore(t.Context(), store, m.ID, &memRestorer{})
			if err == nil || !strings.Contains(err.Error(), "unusable manifest") || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Restore error = %v, want an unusable manifest error containing %q", err, tc.wantErr)
			}
			if errors.Is(err, backup.ErrChecksumMismatch) {
				t.Errorf("Restore error %v claims a checksum mismatch", err)
			}
		})
	}
}

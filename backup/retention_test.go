package backup_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/storetest"
)

// at makes a manifest started at t0 plus d, with an ID derived from it.
func at(d time.Duration) backup.Manifest {
	t := t0.Add(d)
	return backup.Manifest{ID: t.Format("20060102T150405Z") + "-00000000", StartTime: t}
}

func ids(ms []backup.Manifest) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.StartTime.Sub(t0).String())
	}
	return out
}

func TestPolicySelect(t *testing.T) {
	const day = 24 * time.Hour
	// Two backups a day (12:00 and 00:00) for 20 days from Sunday
	// 2026-03-01 12:00 (ISO week 9); the newest is Saturday 2026-03-21 00:00.
	var daily []backup.Manifest
	for i := range 40 {
		daily = append(daily, at(time.Duration(i)*12*time.Hour))
	}
	now := t0.Add(40 * 12 * time.Hour)
	for _, tc := range []struct {
		name     string
		p        backup.Policy
		in       []backup.Manifest
		now      time.Time
		wantKeep []string
	}{
		{name: "empty", p: backup.Policy{KeepLast: 3}, now: now},
		{
			name: "keep last 3", p: backup.Policy{KeepLast: 3}, in: daily, now: now,
			wantKeep: []string{"468h0m0s", "456h0m0s", "444h0m0s"},
		},
		{
			name: "max age caps keep last", p: backup.Policy{KeepLast: 10, MaxAge: 30 * time.Hour}, in: daily, now: now,
			wantKeep: []string{"468h0m0s", "456h0m0s"},
		},
		{
			name: "newest kept even if older than max age", p: backup.Policy{KeepLast: 3, MaxAge: time.Hour}, in: daily, now: now.Add(100 * day),
			wantKeep: []string{"468h0m0s"},
		},
		{
			name: "daily tier keeps newest per day", p: backup.Policy{KeepLast: 1, KeepDaily: 3}, in: daily, now: now,
			wantKeep: []string{"468h0m0s", "456h0m0s", "432h0m0s"},
		},
		{
			name: "weekly tier keeps newest per ISO week", p: backup.Policy{KeepLast: 1, KeepWeekly: 3}, in: daily, now: now,
			wantKeep: []string{"468h0m0s", "336h0m0s", "168h0m0s"},
		},
		{
			name: "tiers combine and dedupe", p: backup.Policy{KeepLast: 2, KeepDaily: 2, KeepWeekly: 1}, in: daily, now: now,
			wantKeep: []string{"468h0m0s", "456h0m0s"},
		},
		{
			name: "input order does not matter", p: backup.Policy{KeepLast: 2}, in: []backup.Manifest{at(time.Hour), at(3 * time.Hour), at(2 * time.Hour)}, now: now,
			wantKeep: []string{"3h0m0s", "2h0m0s"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keep, drop := tc.p.Select(tc.in, tc.now)
			if diff := cmp.Diff(tc.wantKeep, ids(keep)); diff != "" {
				t.Errorf("kept (-want +got):\n%s", diff)
			}
			if len(keep)+len(drop) != len(tc.in) {
				t.Errorf("kept %d + dropped %d != %d backups", len(keep), len(drop), len(tc.in))
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		p       backup.Policy
		wantErr string
	}{
		{backup.Policy{KeepLast: 1}, ""},
		{backup.Policy{KeepLast: 7, KeepDaily: 7, KeepWeekly: 4, MaxAge: time.Hour, IncompleteGrace: time.Hour}, ""},
		{backup.Policy{}, "KeepLast is 0"},
		{backup.Policy{KeepLast: 1, KeepDaily: -1}, "KeepDaily is -1"},
		{backup.Policy{KeepLast: 1, KeepWeekly: -1}, "KeepWeekly is -1"},
		{backup.Policy{KeepLast: 1, MaxAge: -1}, "MaxAge is -1ns"},
		{backup.Policy{KeepLast: 1, IncompleteGrace: -1}, "IncompleteGrace is -1ns"},
	} {
		err := tc.p.Validate()
		if (tc.wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.p, err, tc.wantErr)
		}
	}
}

func TestPrune(t *testing.T) {
	store := newFS(t)
	var made []backup.Manifest
	for i := range 5 {
		m, err := backup.Backup(t.Context(), store, snapOf([]byte(fmt.Sprint(i))), clock(t0.Add(time.Duration(i)*time.Hour), time.Second))
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, m)
	}
	// An incomplete backup (data without manifest), collected once older
	// than the grace period by file time (now), and a manifest without
	// data, which Prune cannot explain: kept and reported.
	storetest.MustPut(t, store, "20260301T000000Z-0000beef.data", []byte("leftover"))
	storetest.MustPut(t, store, "20260301T000000Z-0000cafe.manifest.json", []byte("{}"))
	storetest.MustPut(t, store, "unrelated.txt", []byte("keep me"))

	policy := backup.Policy{KeepLast: 2, IncompleteGrace: time.Hour}

	t.Run("unreachable store deletes nothing", func(t *testing.T) {
		for name, fs := range map[string]*faultStore{
			"list fails":          {Store: store, listErr: errUnreachable},
			"manifest read fails": {Store: store, getErr: errUnreachable},
		} {
			_, err := backup.Prune(t.Context(), fs, policy, time.Now().Add(48*time.Hour))
			if !errors.Is(err, errUnreachable) || !strings.Contains(err.Error(), "nothing deleted") {
				t.Errorf("%s: Prune error = %v, want the store error and 'nothing deleted'", name, err)
			}
			if len(fs.deleted) != 0 {
				t.Errorf("%s: Prune deleted %v, want nothing", name, fs.deleted)
			}
		}
	})

	t.Run("invalid policy", func(t *testing.T) {
		if _, err := backup.Prune(t.Context(), store, backup.Policy{}, time.Now()); err == nil {
			t.Error("Prune with KeepLast 0 succeeded")
		}
	})

	t.Run("within grace keeps leftovers", func(t *testing.T) {
		res, err := backup.Prune(t.Context(), store, backup.Policy{KeepLast: 5}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if len(res.DeletedIncomplete) != 0 || len(res.Deleted) != 0 {
			t.Errorf("Prune = %+v, want nothing deleted", res)
		}
	})

	t.Run("delete errors are reported", func(t *testing.T) {
		fs := &faultStore{Store: store, deleteErr: errUnreachable}
		_, err := backup.Prune(t.Context(), fs, policy, time.Now().Add(2*time.Hour))
		if !errors.Is(err, errUnreachable) {
			t.Errorf("Prune error = %v, want the delete error", err)
		}
	})

	t.Run("prunes", func(t *testing.T) {
		res, err := backup.Prune(t.Context(), store, policy, time.Now().Add(2*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		want := backup.PruneResult{
			Kept:              []string{made[4].ID, made[3].ID},
			Deleted:           []string{made[2].ID, made[1].ID, made[0].ID},
			DeletedIncomplete: []string{"20260301T000000Z-0000beef"},
			Unreadable:        []backup.UnreadableBackup{{ID: "20260301T000000Z-0000cafe"}},
		}
		if diff := cmp.Diff(want, res, cmpopts.IgnoreFields(backup.UnreadableBackup{}, "Err")); diff != "" {
			t.Errorf("PruneResult (-want +got):\n%s", diff)
		}
		if err := res.Unreadable[0].Err; !errors.Is(err, backup.ErrBadManifest) {
			t.Errorf("the manifest {} is unreadable with %v, want ErrBadManifest", err)
		}
		wantKeys := []string{
			"20260301T000000Z-0000cafe.manifest.json",
			made[4].DataKey, backup.ManifestKeyFor(made[4].ID),
			made[3].DataKey, backup.ManifestKeyFor(made[3].ID),
			"unrelated.txt",
		}
		if diff := cmp.Diff(slices.Sorted(slices.Values(wantKeys)), storetest.Keys(t, store, "")); diff != "" {
			t.Errorf("keys after Prune (-want +got):\n%s", diff)
		}
	})

	t.Run("never deletes the newest", func(t *testing.T) {
		res, err := backup.Prune(t.Context(), store, backup.Policy{KeepLast: 1, MaxAge: time.Nanosecond}, time.Now().Add(1000*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{made[4].ID}, res.Kept); diff != "" {
			t.Errorf("kept (-want +got):\n%s", diff)
		}
		latest, err := backup.Latest(t.Context(), store)
		if err != nil || latest.ID != made[4].ID {
			t.Errorf("Latest after Prune = %s, %v; want %s", latest.ID, err, made[4].ID)
		}
	})
}

// TestPruneAndFindByMatch: a policy with Match prunes only the backups it
// matches (here the scheduled ones, by what the manifest records); others
// in the same store (on-demand ones) are neither counted nor deleted, and
// Find returns the matching backups newest first.
func TestPruneAndFindByMatch(t *testing.T) {
	store := newFS(t)
	trigger := func(m backup.Manifest) string { return m.Snapshot.Extra["trigger"] }
	made := map[string][]string{}
	for i, tr := range []string{"schedule", "manual", "schedule", "schedule", "manual", "schedule"} {
		snap := snapOf([]byte(fmt.Sprint(i)))
		snap.meta.Extra = map[string]string{"trigger": tr}
		m, err := backup.Backup(t.Context(), store, snap, clock(t0.Add(time.Duration(i)*time.Hour), time.Second))
		if err != nil {
			t.Fatal(err)
		}
		made[tr] = append([]string{m.ID}, made[tr]...) // newest first
	}
	scheduled := func(m backup.Manifest) bool { return trigger(m) == "schedule" }

	found, err := backup.Find(t.Context(), store, scheduled)
	if err != nil {
		t.Fatal(err)
	}
	var foundIDs []string
	for _, m := range found {
		foundIDs = append(foundIDs, m.ID)
	}
	if diff := cmp.Diff(made["schedule"], foundIDs); diff != "" {
		t.Errorf("Find(scheduled) (-want +got):\n%s", diff)
	}

	res, err := backup.Prune(t.Context(), store, backup.Policy{KeepLast: 2, Match: scheduled}, t0.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(made["schedule"][:2], res.Kept); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(made["schedule"][2:], res.Deleted); diff != "" {
		t.Errorf("deleted (-want +got):\n%s", diff)
	}
	left, err := backup.List(t.Context(), store)
	if err != nil {
		t.Fatal(err)
	}
	var manual []string
	for _, m := range left {
		if trigger(m) == "manual" {
			manual = append(manual, m.ID)
		}
	}
	if diff := cmp.Diff(made["manual"], manual); diff != "" {
		t.Errorf("on-demand backups after the prune (-want +got):\n%s", diff)
	}
}

package backup

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultIncompleteGrace is used when [Policy.IncompleteGrace] is zero.
const DefaultIncompleteGrace = 24 * time.Hour

// Policy says which complete backups [Prune] keeps. A backup is kept when any
// of KeepLast, KeepDaily or KeepWeekly selects it and it is not older than
// MaxAge. The newest complete backup is always kept, whatever its age.
//
// Days and weeks are UTC calendar days and ISO weeks of the backups'
// StartTime.
type Policy struct {
	// KeepLast keeps the newest KeepLast complete backups. Must be >= 1.
	KeepLast int
	// KeepDaily additionally keeps the newest backup of each of the newest
	// KeepDaily days that have a backup. 0 disables the tier.
	KeepDaily int
	// KeepWeekly additionally keeps the newest backup of each of the newest
	// KeepWeekly ISO weeks that have a backup. 0 disables the tier.
	KeepWeekly int
	// MaxAge deletes backups that started longer than MaxAge ago even if a
	// Keep rule selects them (except the newest backup). 0 disables it.
	MaxAge time.Duration
	// IncompleteGrace is how old the objects of an incomplete backup must
	// be before Prune deletes them; 0 means [DefaultIncompleteGrace]. It must
	// exceed the duration of the longest backup if another process may be
	// writing one while Prune runs.
	IncompleteGrace time.Duration
	// Match, when set, restricts the policy to the complete backups it
	// returns true for, for example those of one trigger (scheduled, not
	// on demand) recorded in Metadata.Extra: the others are neither
	// counted nor deleted, and "the newest backup" is the newest matching
	// one. Incomplete backups are collected whatever Match says (they have
	// no manifest to match).
	Match func(Manifest) bool
}

// Validate returns an error naming the first invalid field and the fix.
func (p Policy) Validate() error {
	switch {
	case p.KeepLast < 1:
		return fmt.Errorf("retention policy: KeepLast is %d; set it to the number of newest backups to keep (at least 1)", p.KeepLast)
	case p.KeepDaily < 0:
		return fmt.Errorf("retention policy: KeepDaily is %d; set it to 0 to disable the daily tier or to the number of days to keep", p.KeepDaily)
	case p.KeepWeekly < 0:
		return fmt.Errorf("retention policy: KeepWeekly is %d; set it to 0 to disable the weekly tier or to the number of weeks to keep", p.KeepWeekly)
	case p.MaxAge < 0:
		return fmt.Errorf("retention policy: MaxAge is %s; set it to 0 for no age limit or to a positive duration", p.MaxAge)
	case p.IncompleteGrace < 0:
		return fmt.Errorf("retention policy: IncompleteGrace is %s; set it to 0 for the default (%s) or to a positive duration", p.IncompleteGrace, DefaultIncompleteGrace)
	}
	return nil
}

// Select splits complete backups into those to keep and those to delete at
// time now. The input may be in any order; both results are newest first.
// The newest backup is always kept. With p.Match, backups it does not match
// are in neither result. Select does not validate p.
func (p Policy) Select(backups []Manifest, now time.Time) (keep, drop []Manifest) {
	sorted := make([]Manifest, 0, len(backups))
	for _, m := range backups {
		if p.Match == nil || p.Match(m) {
			sorted = append(sorted, m)
		}
	}
	sortNewestFirst(sorted)
	days := map[string]bool{}
	weeks := map[string]bool{}
	for i, m := range sorted {
		t := m.StartTime.UTC()
		kept := i < p.KeepLast
		day := t.Format(time.DateOnly)
		if !days[day] && len(days) < p.KeepDaily {
			days[day] = true
			kept = true
		}
		y, w := t.ISOWeek()
		week := fmt.Sprintf("%d-W%02d", y, w)
		if !weeks[week] && len(weeks) < p.KeepWeekly {
			weeks[week] = true
			kept = true
		}
		if p.MaxAge > 0 && now.Sub(t) > p.MaxAge {
			kept = false
		}
		if i == 0 || kept {
			keep = append(keep, m)
		} else {
			drop = append(drop, m)
		}
	}
	return keep, drop
}

// PruneResult reports what [Prune] did.
type PruneResult struct {
	// Kept are the IDs of the complete backups the policy kept, newest
	// first (not those Policy.Match left out).
	Kept []string
	// Deleted are the IDs of the complete backups deleted, newest first.
	Deleted []string
	// DeletedIncomplete are the IDs of incomplete backups whose leftovers
	// were deleted.
	DeletedIncomplete []string
	// CleanedUploads is the number of store-level leftovers (temporary
	// files, unfinished multipart uploads) removed by an
	// [IncompleteCleaner] store.
	CleanedUploads int
	// Unreadable are the backups Prune kept because it cannot tell what
	// they are, by ID: report them; a person decides.
	Unreadable []UnreadableBackup
}

// UnreadableBackup is a backup whose manifest exists but cannot be used,
// or disagrees with its data. [Prune] never deletes one.
type UnreadableBackup struct {
	// ID is the backup's ID.
	ID string
	// Err says why: it wraps [ErrBadManifest] (the manifest does not
	// parse, fails validation, or is of a newer formatVersion),
	// [ErrSizeMismatch] (the data is not the manifest's size) or
	// [ErrNotFound] (the manifest's data object is missing).
	Err error
}

// Prune applies policy p to the backups in store at time now: it deletes the
// complete backups p does not keep, the data objects without a manifest
// (unfinished backups, interrupted deletions) older than p.IncompleteGrace
// and, if the store is an [IncompleteCleaner], its unfinished uploads older
// than the grace period.
//
// Prune deletes nothing it cannot prove unfinished: a backup whose manifest
// exists but cannot be read (it does not parse, or was written by a newer
// opkit, as after a rollback of the operator) or disagrees with its data is
// kept, however old, and listed in [PruneResult.Unreadable]; report those.
//
// When the store cannot be listed, or a manifest cannot be read for a reason
// other than being absent or invalid, Prune returns the error and deletes
// nothing. A backup is deleted manifest first, so a backup interrupted half-way
// is incomplete, never half-complete. Errors deleting single objects are
// joined; Prune carries on with the rest.
func Prune(ctx context.Context, store Store, p Policy, now time.Time) (PruneResult, error) {
	if err := p.Validate(); err != nil {
		return PruneResult{}, err
	}
	grace := p.IncompleteGrace
	if grace == 0 {
		grace = DefaultIncompleteGrace
	}
	inv, err := scan(ctx, store)
	if err != nil {
		return PruneResult{}, fmt.Errorf("prune: nothing deleted: %w", err)
	}
	keep, drop := p.Select(inv.complete, now)

	res := PruneResult{Unreadable: inv.unreadable}
	var errs []error
	for _, m := range keep {
		res.Kept = append(res.Kept, m.ID)
	}
	for _, m := range drop {
		if err := deleteKeys(ctx, store, ManifestKeyFor(m.ID), m.DataKey); err != nil {
			errs = append(errs, fmt.Errorf("prune: deleting backup %s: %w", m.ID, err))
			continue
		}
		res.Deleted = append(res.Deleted, m.ID)
	}
	cutoff := now.Add(-grace)
	for _, l := range inv.incomplete {
		if !l.object.ModTime.Before(cutoff) {
			continue
		}
		if err := deleteKeys(ctx, store, l.object.Key); err != nil {
			errs = append(errs, fmt.Errorf("prune: deleting incomplete backup %s: %w", l.id, err))
			continue
		}
		res.DeletedIncomplete = append(res.DeletedIncomplete, l.id)
	}
	if c, ok := store.(IncompleteCleaner); ok {
		n, err := c.CleanIncomplete(ctx, "", cutoff)
		res.CleanedUploads = n
		if err != nil {
			errs = append(errs, fmt.Errorf("prune: cleaning unfinished uploads: %w", err))
		}
	}
	return res, errors.Join(errs...)
}

func deleteKeys(ctx context.Context, store Store, keys ...string) error {
	for _, k := range keys {
		if err := store.Delete(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

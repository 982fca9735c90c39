package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// maxManifestSize bounds how much of a manifest object is read.
const maxManifestSize = 1 << 20

// ErrNoBackup is returned by [Latest] when the store holds no complete
// backup.
var ErrNoBackup = errors.New("no complete backup")

// List returns the manifests of all complete backups in store, newest first.
// A backup is complete when its manifest is readable and valid and its data
// object exists with the manifest's size. Incomplete backups are not returned.
// List does not read the data; use [Verify] for that.
func List(ctx context.Context, store Store) ([]Manifest, error) {
	inv, err := scan(ctx, store)
	if err != nil {
		return nil, err
	}
	return inv.complete, nil
}

// Find returns the manifests of the complete backups in store that match
// returns true for, newest first; List with a filter. Use it to find
// backups by what they record (Metadata.Extra), for example the backup a
// request took or a cluster's final backup.
func Find(ctx context.Context, store Store, match func(Manifest) bool) ([]Manifest, error) {
	all, err := List(ctx, store)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(m Manifest) bool { return !match(m) }), nil
}

// Latest returns the manifest of the newest complete backup in store, or an
// error wrapping [ErrNoBackup].
func Latest(ctx context.Context, store Store) (Manifest, error) {
	all, err := List(ctx, store)
	if err != nil {
		return Manifest{}, err
	}
	if len(all) == 0 {
		return Manifest{}, fmt.Errorf("backup: %w in store", ErrNoBackup)
	}
	return all[0], nil
}

// inventory is what scan found in a store.
type inventory struct {
	complete []Manifest // newest first
	// incomplete are data objects without a manifest: unfinished backups,
	// or backups whose deletion was interrupted. The only ones Prune may
	// collect.
	incomplete []leftover
	// unreadable are backups with a manifest that cannot be used or that
	// disagrees with the data: kept, reported.
	unreadable []UnreadableBackup
}

// leftover is an incomplete backup: a data object without a manifest.
type leftover struct {
	id     string
	object ObjectInfo
}

func scan(ctx context.Context, store Store) (inventory, error) {
	if store == nil {
		return inventory{}, errors.New("backup: store is nil")
	}
	objs, err := store.List(ctx, "")
	if err != nil {
		return inventory{}, fmt.Errorf("backup: listing store: %w", err)
	}
	type entry struct {
		data, manifest *ObjectInfo
	}
	byID := map[string]*entry{}
	for i := range objs {
		o := &objs[i]
		var id string
		var isData bool
		if s, ok := strings.CutSuffix(o.Key, dataSuffix); ok {
			id, isData = s, true
		} else if s, ok := strings.CutSuffix(o.Key, manifestSuffix); ok {
			id = s
		} else {
			continue // not ours: never touched
		}
		if CheckID(id) != nil {
			continue
		}
		e := byID[id]
		if e == nil {
			e = &entry{}
			byID[id] = e
		}
		if isData {
			e.data = o
		} else {
			e.manifest = o
		}
	}

	var inv inventory
	for id, e := range byID {
		if e.manifest != nil {
			m, err := readManifest(ctx, store, id)
			switch {
			case errors.Is(err, ErrNotFound):
				// Deleted since the listing (manifest first, by Prune):
				// what remains is data without a manifest.
			case errors.Is(err, ErrBadManifest):
				inv.unreadable = append(inv.unreadable, UnreadableBackup{ID: id, Err: err})
				continue
			case err != nil:
				// The store failed: do not guess.
				return inventory{}, err
			case e.data == nil:
				// Backup writes the manifest last and Prune deletes it
				// first: something else removed the data.
				inv.unreadable = append(inv.unreadable, UnreadableBackup{ID: id, Err: fmt.Errorf("backup %s: data object %s: %w", id, m.DataKey, ErrNotFound)})
				continue
			case m.Size != e.data.Size:
				inv.unreadable = append(inv.unreadable, UnreadableBackup{ID: id, Err: fmt.Errorf("backup %s: %w: the manifest says %d bytes, the store holds %d", id, ErrSizeMismatch, m.Size, e.data.Size)})
				continue
			default:
				inv.complete = append(inv.complete, m)
				continue
			}
		}
		if e.data == nil {
			continue
		}
		inv.incomplete = append(inv.incomplete, leftover{id: id, object: *e.data})
	}
	sortNewestFirst(inv.complete)
	slices.SortFunc(inv.incomplete, func(a, b leftover) int { return strings.Compare(a.id, b.id) })
	slices.SortFunc(inv.unreadable, func(a, b UnreadableBackup) int { return strings.Compare(a.ID, b.ID) })
	return inv, nil
}

func sortNewestFirst(ms []Manifest) {
	slices.SortFunc(ms, func(a, b Manifest) int {
		if c := b.StartTime.Compare(a.StartTime); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
}

// ErrBadManifest is wrapped by errors about a manifest that exists but
// cannot be used: it does not parse, fails validation, or has a
// formatVersion this opkit does not read (written by a newer one).
var ErrBadManifest = errors.New("unusable manifest")

// readManifest reads and validates the manifest of backup id. A missing
// manifest wraps ErrNotFound, an unusable one ErrBadManifest.
func readManifest(ctx context.Context, store Store, id string) (Manifest, error) {
	if err := CheckID(id); err != nil {
		return Manifest{}, fmt.Errorf("backup: %w", err)
	}
	rc, err := store.Get(ctx, ManifestKeyFor(id))
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return Manifest{}, fmt.Errorf("backup %s has no manifest (it is incomplete or does not exist): %w", id, err)
		}
		return Manifest{}, fmt.Errorf("backup %s: reading manifest: %w", id, err)
	}
	defer func() { _ = rc.Close() }()
	raw, err := io.ReadAll(io.LimitReader(rc, maxManifestSize+1))
	if err != nil {
		return Manifest{}, fmt.Errorf("backup %s: reading manifest: %w", id, err)
	}
	if len(raw) > maxManifestSize {
		return Manifest{}, fmt.Errorf("backup %s: %w: larger than %d bytes", id, ErrBadManifest, maxManifestSize)
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return Manifest{}, fmt.Errorf("backup %s: %w: %w", id, ErrBadManifest, err)
	}
	if err := m.validate(id); err != nil {
		return Manifest{}, fmt.Errorf("backup %s: %w: %w", id, ErrBadManifest, err)
	}
	return m, nil
}

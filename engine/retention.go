// Retention: which base versions stay readable, raising the registry's
// collection floor before any is deleted, and deleting the versions below
// it with the data files only they referenced (doc.go, step 6).

package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/rollstore/rollstore/objstore"
)

// collectVersions deletes base versions beyond retention (the newest
// RetainVersions, and any younger than RetainAge, are kept) and then the
// data files only they referenced. Manifests go first, so a pinned read of
// a collected version answers "gone" rather than finding half a version.
func (t *Table) collectVersions(ctx context.Context) (versions, files int, err error) {
	cfg := t.db.cfg
	entries, vs, err := t.listVersions(ctx)
	if err != nil {
		return 0, 0, err
	}
	if len(vs) <= cfg.RetainVersions {
		// All kept. (An object below the floor, a late merger's, is
		// listed beside the RetainVersions the floor was raised for.)
		return 0, 0, nil
	}
	reg, _, err := readRegistry(ctx, t.db, t.keys)
	if err != nil {
		return 0, 0, err
	}
	// The oldest version kept becomes the floor. What is below the floor
	// already is collected whatever its age: an object there was created
	// at a collected key by a merger that had lost its lease.
	cutoff := t.db.rt.Now().Add(-cfg.RetainAge)
	floor := vs[len(vs)-1]
	for i := len(vs) - 1; i >= 0 && vs[i] >= reg.Floor && (i >= len(vs)-cfg.RetainVersions || entries[i].LastModified.After(cutoff)); i-- {
		floor = vs[i]
	}
	floor = max(floor, reg.Floor)
	if vs[0] >= floor {
		return 0, 0, nil
	}
	// Recorded before the first delete: from then on every reader takes a
	// version below the floor for collected, whatever is at its key.
	newest := vs[len(vs)-1]
	reg, err = updateRegistry(ctx, t.db, t.keys, func(r *registry) bool {
		if r.Floor >= floor && r.Base >= newest {
			return false
		}
		r.Floor, r.Base = max(r.Floor, floor), max(r.Base, newest)
		return true
	})
	if err != nil {
		return 0, 0, fmt.Errorf("raising the collection floor to %d: %w", floor, err)
	}
	// Listed again: what is at or above the floor now is never deleted,
	// so this listing holds every version whose files must stay (the first
	// may predate versions committed, and collected by others, since).
	_, vs, err = t.listVersions(ctx)
	if err != nil {
		return 0, 0, err
	}
	var doomed []uint64
	for _, v := range vs {
		if v < reg.Floor {
			doomed = append(doomed, v)
		}
	}
	live, err := t.liveFiles(ctx, vs, doomed)
	if err != nil {
		return 0, 0, err
	}
	var dead []string
	queued := map[string]bool{}
	for _, v := range doomed {
		m, err := t.loadManifest(ctx, v)
		if err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return versions, files, err
		}
		if err := t.db.point(ctx, hookCollectBeforeDelete); err != nil {
			return versions, files, err
		}
		if err := t.db.store.Delete(ctx, t.keys.Version(v)); err != nil {
			return versions, files, err
		}
		t.pinned.Remove(v)
		versions++
		t.db.stats.VersionsCollected.Add(1)
		if m == nil {
			continue
		}
		for _, f := range m.Files {
			if !live[f.Name] && !queued[f.Name] {
				queued[f.Name] = true
				dk, ik, err := dataKeys(t.keys, f.Name)
				if err != nil {
					continue
				}
				dead = append(dead, dk, ik)
				files++
			}
		}
	}
	t.db.stats.FilesCollected.Add(int64(files))
	return versions, files, t.db.store.DeleteMany(ctx, dead)
}

// liveFiles returns the data files referenced by every version not doomed.
func (t *Table) liveFiles(ctx context.Context, all, doomed []uint64) (map[string]bool, error) {
	gone := map[uint64]bool{}
	for _, v := range doomed {
		gone[v] = true
	}
	live := map[string]bool{}
	for _, v := range all {
		if gone[v] {
			continue
		}
		m, err := t.loadManifest(ctx, v)
		if errors.Is(err, objstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, f := range m.Files {
			live[f.Name] = true
		}
	}
	return live, nil
}

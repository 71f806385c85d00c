// Reclaim: deleting WAL generations once a base version that holds them
// has been committed for ReclaimGrace (doc.go, step 7).

package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/rollstore/rollstore/objstore"
)

// reclaim deletes generations merged into a base version committed at least
// ReclaimGrace ago (doc.go, step 7), below the ones that version retains
// for the feed. It lists the base versions to find the newest one
// committed that long ago; the WAL itself is never listed: per shard it
// walks down from below that version's retained generations while seal records
// exist (one HEAD each), then deletes those generations in ascending order,
// each one's segments first and its seal record last (so a reclaim that
// stops midway is found and finished by the next). Readers that still hold
// such a generation get ErrNotFound and recover from the base.
func (t *Table) reclaim(ctx context.Context) ([]GenRef, error) {
	cfg := t.db.cfg
	entries, versions, err := t.listVersions(ctx)
	if err != nil || len(versions) == 0 {
		return nil, err
	}
	cutoff := t.db.rt.Now().Add(-cfg.ReclaimGrace)
	idx := -1
	for i := range entries {
		if cfg.ReclaimGrace == 0 || !entries[i].LastModified.After(cutoff) {
			idx = i
		}
	}
	if idx < 0 {
		return nil, nil
	}
	m, err := t.loadManifest(ctx, versions[idx])
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, nil // collected meanwhile; the next pass reclaims
	}
	if err != nil {
		return nil, err
	}
	var out []GenRef
	for _, shard := range sortedKeys(m.Watermarks) {
		var gens []uint64
		for g := m.retainedFrom(shard) - 1; g > 0; g-- {
			_, err := t.db.store.Head(ctx, t.keys.Seal(shard, g))
			if errors.Is(err, objstore.ErrNotFound) {
				break
			}
			if err != nil {
				return out, err
			}
			gens = append(gens, g)
		}
		for i := len(gens) - 1; i >= 0; i-- {
			g := gens[i]
			rec, err := t.loadSeal(ctx, shard, g)
			if errors.Is(err, objstore.ErrNotFound) {
				continue
			}
			if err != nil {
				return out, err
			}
			if err := t.db.store.DeleteMany(ctx, segmentKeys(t.keys, shard, g, uint64(len(rec.Segments)))); err != nil {
				return out, err
			}
			if err := t.db.point(ctx, hookMidReclaim); err != nil {
				return out, err
			}
			key := t.keys.Seal(shard, g)
			if err := t.db.store.Delete(ctx, key); err != nil {
				return out, err
			}
			t.db.seals.Remove(key)
			t.db.stats.GensReclaimed.Add(1)
			out = append(out, GenRef{Shard: shard, Gen: g})
		}
	}
	return out, nil
}

// retainStepMax bounds the generations one merge releases from the feed's
// retention per shard (one seal record read each); the next merge goes on.
const retainStepMax = 1024

// retain sets what m, the base version a merge commits on parent, keeps
// for the feed: per shard, the merged generations sealed less than
// FeedRetention ago (a generation is sealed after its last row was
// acknowledged, so each row stays at least that long). Without retention
// it keeps none.
func (t *Table) retain(ctx context.Context, parent, m *Manifest) error {
	keep := t.db.cfg.FeedRetention
	if keep <= 0 || t.partitions == 0 {
		m.Retained = nil
		return nil
	}
	cutoff := t.db.rt.Now().Add(-keep)
	retained := make(map[string]uint64, len(m.Watermarks))
	for _, shard := range sortedKeys(m.Watermarks) {
		lo, wm := parent.retainedFrom(shard), m.watermark(shard)
		for steps := 0; lo <= wm && steps < retainStepMax; steps++ {
			rec, err := t.loadSeal(ctx, shard, lo)
			if errors.Is(err, objstore.ErrNotFound) {
				lo++ // reclaimed already (by a merger that kept none)
				continue
			}
			if err != nil {
				return fmt.Errorf("retention of %s/%d: %w", shard, lo, err)
			}
			if rec.SealedAt.After(cutoff) {
				break
			}
			lo++
		}
		retained[shard] = lo
	}
	m.Retained = retained
	return nil
}

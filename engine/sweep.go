package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/rollstore/rollstore/objstore"
)

// SweepResult reports an orphan sweep.
type SweepResult struct {
	DataFiles    int `json:"data_files"`
	Payloads     int `json:"payloads"`
	Segments     int `json:"segments"`
	Incarnations int `json:"dead_incarnation_objects"`
}

// Sweep deletes objects that nothing references and that are older than
// grace: data files of merges that crashed or lost their commit, payloads
// uploaded for appends that were never acknowledged, WAL objects no head
// counts (a fenced writer's late segment, a reclaimed generation's
// leftovers), and what dead incarnations of the table left. The grace
// period protects work in progress (a payload is uploaded before its
// segment is written, a segment before the head swap that makes it part
// of its generation), so it must exceed the longest append or merge;
// Config.OrphanGrace is the default. Listing is fine here: the sweep is
// off the read path.
func (t *Table) Sweep(ctx context.Context, grace time.Duration) (SweepResult, error) {
	if err := t.live(); err != nil {
		return SweepResult{}, err
	}
	if err := t.mergeLock.Lock(ctx); err != nil {
		return SweepResult{}, err
	}
	defer t.mergeLock.Unlock()
	// The merger lease keeps merges of other processes out while the sweep
	// decides what is unreferenced: a merge commits references to files
	// and payloads this sweep would otherwise see as orphans.
	o, err := t.db.acquire(ctx, t.keys.MergerLease(), nil)
	if errors.Is(err, objstore.ErrLeased) {
		return SweepResult{}, fmt.Errorf("%w: %s", ErrMergerBusy, t.Name())
	}
	if err != nil {
		return SweepResult{}, fmt.Errorf("acquiring the merger lease: %w", err)
	}
	defer o.release(ctx)
	var res SweepResult
	for attempt := 0; attempt < 3; attempt++ {
		res, err = t.sweep(ctx, grace)
		if !errors.Is(err, objstore.ErrNotFound) {
			break // a version collected while the sweep read it: look again
		}
	}
	return res, t.noteGone(err)
}

func (t *Table) sweep(ctx context.Context, grace time.Duration) (SweepResult, error) {
	var res SweepResult
	start := t.db.rt.Now()
	cutoff := start.Add(-grace)
	old := func(e objstore.Entry) bool { return !e.LastModified.After(cutoff) }

	// The heads first, then the versions: a generation merged and
	// reclaimed in between is in a version read below, so none of its
	// payloads looks unreferenced.
	reg, _, err := readRegistry(ctx, t.db, t.keys)
	if errors.Is(err, objstore.ErrNotFound) {
		return res, errDropped
	}
	if err != nil {
		return res, err
	}
	if reg.Dropped {
		return res, errDropped
	}
	heads := map[string]head{}
	for _, shard := range sortedKeys(reg.Shards) {
		h, err := readHead(ctx, t.db, t.keys, shard)
		if errors.Is(err, errNoHead) {
			continue
		}
		if err != nil {
			return res, err
		}
		heads[shard] = h
	}
	// Pending generations, before the versions are listed: every segment a
	// head counts, and its payloads. Per shard the walk goes down from the
	// head while seal records exist; a generation reclaimed before its
	// record is read was merged into a version the listing below sees.
	refs := map[string]bool{}
	members := map[string]bool{}
	for _, shard := range sortedKeys(heads) {
		h := heads[shard]
		for g := h.Gen; g > 0; g-- {
			var n uint64
			if g == h.Gen && !h.Sealed {
				n = h.Segs
			} else {
				rec, err := t.loadSeal(ctx, shard, g)
				if errors.Is(err, objstore.ErrNotFound) {
					if g == h.Gen {
						n = h.Segs // sealed head, record not written yet
					} else {
						break
					}
				} else if err != nil {
					return res, err
				} else {
					n = uint64(len(rec.Segments))
				}
			}
			for seq := uint64(1); seq <= n; seq++ {
				key := t.keys.Segment(shard, g, seq)
				members[key] = true
				lay, err := t.segmentLayout(ctx, key)
				if errors.Is(err, objstore.ErrNotFound) {
					continue
				}
				if err != nil {
					return res, err
				}
				for _, r := range lay.Rows {
					if r.Ref != "" {
						refs[r.Ref] = true
					}
				}
			}
		}
	}
	// Segments of open generations that no head counts yet may be a
	// commit in flight (written, the head swap pending): they are kept, and
	// so are their payloads.
	err = t.db.store.List(ctx, t.keys.WALPrefix(), objstore.ListOptions{}, func(e objstore.Entry) error {
		k, ok := t.keys.ParseWAL(e.Key)
		if !ok || k.Registry || k.IsHead || k.IsSeal || k.IsOther || members[e.Key] {
			return nil
		}
		if h, known := heads[k.Shard]; known && k.Gen == h.Gen && !h.Sealed {
			members[e.Key] = true
			lay, err := t.segmentLayout(ctx, e.Key)
			if errors.Is(err, objstore.ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			for _, r := range lay.Rows {
				if r.Ref != "" {
					refs[r.Ref] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	_, versions, err := t.listVersions(ctx)
	if err != nil {
		return res, err
	}
	liveFiles, err := t.liveFiles(ctx, versions, nil)
	if err != nil {
		return res, err
	}
	var latest uint64
	base := emptyManifest()
	if len(versions) > 0 {
		latest = versions[len(versions)-1]
		// Versions are cumulative (rows are never removed), so the latest
		// references every payload an older retained version does.
		b, err := t.loadBase(ctx, latest)
		if err != nil {
			return res, err
		}
		base = b.m
		for _, f := range b.files {
			for _, r := range f.layout.Rows {
				if r.Ref != "" {
					refs[r.Ref] = true
				}
			}
		}
	}
	var doomed []string
	err = t.db.store.List(ctx, t.tableKeys.Root(), objstore.ListOptions{}, func(e objstore.Entry) error {
		if !old(e) {
			return nil
		}
		inc, ok := t.tableKeys.ParseIncarnation(e.Key)
		if !ok {
			return nil // the descriptor, or a stray outside any incarnation
		}
		if inc != t.keys.Name() {
			doomed = append(doomed, e.Key)
			res.Incarnations++
			return nil
		}
		if name, _, ok := t.keys.ParseDataObject(e.Key); ok {
			// A file named for a version not yet committed may belong to a
			// merge in progress.
			if !liveFiles[name] && fileVersion(name) <= latest {
				doomed = append(doomed, e.Key)
				res.DataFiles++
			}
			return nil
		}
		if t.keys.IsPayload(e.Key) {
			if !refs[e.Key] {
				doomed = append(doomed, e.Key)
				res.Payloads++
			}
			return nil
		}
		if k, ok := t.keys.ParseWAL(e.Key); ok && !k.Registry && !k.IsHead && !k.IsOther {
			h, known := heads[k.Shard]
			stale := k.Gen <= base.watermark(k.Shard) // merged: reclaim leftovers
			if k.IsSeal {
				if stale {
					doomed = append(doomed, e.Key)
					res.Segments++
				}
				return nil
			}
			if stale || (known && k.Gen <= h.Gen && !members[e.Key]) {
				doomed = append(doomed, e.Key)
				res.Segments++
			}
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	// A writer gives up committing rows whose payloads began uploading
	// more than half the grace ago; a pass running longer than a quarter of
	// it could act on a view that misses such a commit, so it deletes
	// nothing.
	if elapsed := t.db.rt.Now().Sub(start); grace > 0 && elapsed > grace/4 {
		return SweepResult{}, fmt.Errorf("sweep of %s gave up: it ran %v, more than a quarter of the grace %v", t.Name(), elapsed, grace)
	}
	t.db.stats.OrphansSwept.Add(int64(len(doomed)))
	for start := 0; start < len(doomed); start += 256 {
		chunk := doomed[start:min(start+256, len(doomed))]
		if err := t.db.store.DeleteMany(ctx, chunk); err != nil {
			for _, k := range chunk { // a leased blob of a dead incarnation
				if err := t.db.store.Delete(ctx, k); err != nil && !errors.Is(err, objstore.ErrLeased) {
					return res, err
				}
			}
		}
	}
	return res, nil
}

// fileVersion is the version a data file was written for: merges name their
// files "<version:020>-<random>".
func fileVersion(name string) uint64 {
	if len(name) < 20 {
		return 0
	}
	v, err := strconv.ParseUint(name[:20], 10, 64)
	if err != nil {
		return 0
	}
	return v
}

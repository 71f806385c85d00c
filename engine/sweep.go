package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/rollstore/rollstore/engine/rowfile"
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
	if err := t.checkLive(); err != nil {
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

	// The heads first, then the versions: a generation merged and
	// reclaimed in between is in a version read below, so none of its
	// payloads looks unreferenced.
	v := &sweepView{members: map[string]bool{}, refs: map[string]bool{}, merged: map[string]uint64{}}
	if s := t.snap.Load(); s != nil {
		// Merged before the heads are read, so in every version listed
		// below: the walk down from a head stops above them.
		v.merged = maps.Clone(s.base.m.Watermarks)
	}
	var err error
	if v.heads, err = t.sweepHeads(ctx); err != nil {
		return res, err
	}
	if err := t.countedSegments(ctx, v); err != nil {
		return res, err
	}
	if err := t.inFlightSegments(ctx, v); err != nil {
		return res, err
	}
	if err := t.retainedReferences(ctx, v); err != nil {
		return res, err
	}
	var doomed []string
	err = t.db.store.List(ctx, t.tableKeys.Root(), objstore.ListOptions{}, func(e objstore.Entry) error {
		if e.LastModified.After(cutoff) {
			return nil // younger than the grace
		}
		if counter := t.orphanCounter(v, e.Key, &res); counter != nil {
			doomed = append(doomed, e.Key)
			*counter++
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
	return res, t.deleteSwept(ctx, doomed)
}

// sweepView is what a sweep keeps: what the heads count and what the
// retained versions reference.
type sweepView struct {
	heads map[string]head
	// merged holds, per shard, a generation known merged before the sweep
	// began (and so in the versions it lists).
	merged map[string]uint64
	// members holds the WAL segments a head counts, and the segments of
	// open generations that may be a commit in flight.
	members map[string]bool
	// refs holds the payload objects the rows of members and of the newest
	// version reference.
	refs map[string]bool
	// liveFiles holds the data files of the versions listed.
	liveFiles map[string]bool
	latest    uint64    // the newest version listed (0: none)
	base      *Manifest // its manifest (empty when none)
}

// addRefs records the payload objects lay's rows reference.
func (v *sweepView) addRefs(lay *rowfile.Layout) {
	for _, r := range lay.Rows {
		if r.Ref != "" {
			v.refs[r.Ref] = true
		}
	}
}

// sweepHeads reads the registry and the head of every shard it names.
func (t *Table) sweepHeads(ctx context.Context) (map[string]head, error) {
	reg, _, err := readRegistry(ctx, t.db, t.keys)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, errDropped
	}
	if err != nil {
		return nil, err
	}
	if reg.Dropped {
		return nil, errDropped
	}
	heads := map[string]head{}
	for _, shard := range sortedKeys(reg.Shards) {
		h, err := readHead(ctx, t.db, t.keys, shard)
		if errors.Is(err, errNoHead) {
			continue
		}
		if err != nil {
			return nil, err
		}
		heads[shard] = h
	}
	return heads, nil
}

// countedSegments records the pending generations, before the versions
// are listed: every segment a head counts, and its payloads. Per shard the
// walk goes down from the head while seal records exist, to the
// generations known merged (the feed may retain days of those); a
// generation reclaimed before its record is read was merged into a
// version the listing sees.
func (t *Table) countedSegments(ctx context.Context, v *sweepView) error {
	for _, shard := range sortedKeys(v.heads) {
		h := v.heads[shard]
		for g := h.Gen; g > v.merged[shard]; g-- {
			n, ok, err := t.segmentCount(ctx, shard, g, h)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			for seq := uint64(1); seq <= n; seq++ {
				if err := t.addSegment(ctx, v, t.keys.Segment(shard, g, seq)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// segmentCount returns how many segments generation g of shard counts: the
// head's count for its generation while it is open, or sealed without its
// record written yet; else its seal record's. ok is false when the record
// is gone (the generation was reclaimed).
func (t *Table) segmentCount(ctx context.Context, shard string, g uint64, h head) (n uint64, ok bool, err error) {
	if g == h.Gen && !h.Sealed {
		return h.Segs, true, nil
	}
	rec, err := t.loadSeal(ctx, shard, g)
	switch {
	case errors.Is(err, objstore.ErrNotFound) && g == h.Gen:
		return h.Segs, true, nil // sealed head, record not written yet
	case errors.Is(err, objstore.ErrNotFound):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return uint64(len(rec.Segments)), true, nil
}

// addSegment records segment key and the payloads its rows reference (none
// when it is gone).
func (t *Table) addSegment(ctx context.Context, v *sweepView, key string) error {
	v.members[key] = true
	lay, err := t.segmentLayout(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	v.addRefs(lay)
	return nil
}

// inFlightSegments records the segments of open generations that no head
// counts yet: each may be a commit in flight (written, the head swap
// pending), so it is kept, and so are its payloads.
func (t *Table) inFlightSegments(ctx context.Context, v *sweepView) error {
	return t.db.store.List(ctx, t.keys.WALPrefix(), objstore.ListOptions{}, func(e objstore.Entry) error {
		k, ok := t.keys.ParseWAL(e.Key)
		if !ok || k.Registry || k.IsHead || k.IsSeal || k.IsOther || v.members[e.Key] {
			return nil
		}
		if h, known := v.heads[k.Shard]; known && k.Gen == h.Gen && !h.Sealed {
			return t.addSegment(ctx, v, e.Key)
		}
		return nil
	})
}

// retainedReferences lists the base versions and records the data files
// they reference and the payloads the newest one references.
func (t *Table) retainedReferences(ctx context.Context, v *sweepView) error {
	_, versions, err := t.listVersions(ctx)
	if err != nil {
		return err
	}
	if v.liveFiles, err = t.liveFiles(ctx, versions, nil); err != nil {
		return err
	}
	v.base = emptyManifest()
	if len(versions) > 0 {
		v.latest = versions[len(versions)-1]
		// Versions are cumulative (rows are never removed), so the latest
		// references every payload an older retained version does.
		b, err := t.loadBase(ctx, v.latest)
		if err != nil {
			return err
		}
		v.base = b.m
		for _, f := range b.files {
			v.addRefs(f.layout)
		}
	}
	return nil
}

// orphanCounter decides an object old enough to sweep: nil when it is kept,
// else the count of res it is deleted under.
func (t *Table) orphanCounter(v *sweepView, key string, res *SweepResult) *int {
	inc, ok := t.tableKeys.ParseIncarnation(key)
	if !ok {
		return nil // the descriptor, or a stray outside any incarnation
	}
	if inc != t.keys.Name() {
		return &res.Incarnations
	}
	if name, _, ok := t.keys.ParseDataObject(key); ok {
		// A file named for a version not yet committed may belong to a
		// merge in progress.
		if !v.liveFiles[name] && fileVersion(name) <= v.latest {
			return &res.DataFiles
		}
		return nil
	}
	if t.keys.IsPayload(key) {
		if !v.refs[key] {
			return &res.Payloads
		}
		return nil
	}
	k, ok := t.keys.ParseWAL(key)
	if !ok || k.Registry || k.IsHead || k.IsOther {
		return nil
	}
	h, known := v.heads[k.Shard]
	stale := k.Gen < v.base.retainedFrom(k.Shard) // merged and not retained: reclaim leftovers
	if k.IsSeal {
		if stale {
			return &res.Segments
		}
		return nil
	}
	if stale {
		return &res.Segments
	}
	if k.Gen <= v.base.watermark(k.Shard) {
		return nil // merged, and retained for the feed
	}
	if known && k.Gen <= h.Gen && !v.members[key] {
		return &res.Segments
	}
	return nil
}

// deleteSwept deletes what the sweep doomed, in batches; a batch that
// fails is deleted one by one, leaving leased blobs (of a dead
// incarnation).
func (t *Table) deleteSwept(ctx context.Context, doomed []string) error {
	t.db.stats.OrphansSwept.Add(int64(len(doomed)))
	for start := 0; start < len(doomed); start += 256 {
		chunk := doomed[start:min(start+256, len(doomed))]
		if err := t.db.store.DeleteMany(ctx, chunk); err != nil {
			for _, k := range chunk { // a leased blob of a dead incarnation
				if err := t.db.store.Delete(ctx, k); err != nil && !errors.Is(err, objstore.ErrLeased) {
					return err
				}
			}
		}
	}
	return nil
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

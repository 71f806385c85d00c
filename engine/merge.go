// The merge (doc.go, step 6): choosing the sealed generations to fold in
// (sealing abandoned ones first), the compaction pick, building the data
// files of the next base version, and committing it. Reclaim and retention
// follow each pass (reclaim.go, retention.go).

package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
)

// MergeOptions tune one pass.
type MergeOptions struct {
	// MaxBytes overrides Config.MergeMaxBytes for this pass.
	MaxBytes int64
}

// GenRef names a generation.
type GenRef struct {
	Shard string `json:"shard"`
	Gen   uint64 `json:"generation"`
}

// MergeResult reports a pass.
type MergeResult struct {
	// Version is the base version committed, 0 when nothing was merged.
	Version        uint64   `json:"version"`
	Merged         []GenRef `json:"merged"`
	Rows           int64    `json:"rows"`
	Bytes          int64    `json:"bytes"`
	Duplicates     int64    `json:"duplicates"`
	CompactedFiles int      `json:"compacted_files"`
	Conflicts      int      `json:"conflicts"`
	Reclaimed      []GenRef `json:"reclaimed"`
	// Sealed lists abandoned generations this pass sealed.
	Sealed []GenRef `json:"sealed,omitempty"`
	// Leftover is true when sealed generations remain for a later pass.
	Leftover          bool          `json:"leftover"`
	VersionsCollected int           `json:"versions_collected"`
	FilesCollected    int           `json:"files_collected"`
	Duration          time.Duration `json:"duration_ns"`
}

const maxCommitAttempts = 8

// Merge folds the oldest sealed generations into a new base version, then
// reclaims merged generations whose grace period has passed and collects
// base versions beyond retention. Losing the commit to another merger is
// normal: the pass reloads and plans again from the winner's version, so no
// row is merged twice.
func (t *Table) Merge(ctx context.Context, opts MergeOptions) (MergeResult, error) {
	if err := t.checkLive(); err != nil {
		return MergeResult{}, err
	}
	if err := t.mergeLock.Lock(ctx); err != nil {
		return MergeResult{}, err
	}
	defer t.mergeLock.Unlock()
	o, err := t.db.acquire(ctx, t.keys.MergerLease(), nil)
	if errors.Is(err, objstore.ErrLeased) {
		return MergeResult{}, fmt.Errorf("%w: %s", ErrMergerBusy, t.Name())
	}
	if err != nil {
		return MergeResult{}, fmt.Errorf("acquiring the merger lease: %w", err)
	}
	defer o.release(ctx)
	start := t.db.rt.Now()
	res, err := t.merge(ctx, opts)
	res.Duration = t.db.rt.Now().Sub(start)
	t.db.stats.MergeNanos.Add(int64(res.Duration))
	return res, t.noteGone(err)
}

func (t *Table) merge(ctx context.Context, opts MergeOptions) (MergeResult, error) {
	cfg := t.db.cfg
	budget := opts.MaxBytes
	if budget <= 0 {
		budget = cfg.MergeMaxBytes
	}
	var res MergeResult
	var again error // why the last attempt started over
	for attempt := 0; ; attempt++ {
		if attempt == maxCommitAttempts {
			return res, fmt.Errorf("%w: merge of %s started over %d times in a row, the last because: %w", ErrMergerBusy, t.Name(), attempt, again)
		}
		if err := t.checkLive(); err != nil {
			return res, err
		}
		reg, err := t.liveRegistry(ctx)
		if err != nil {
			return res, err
		}
		latest, reg, err := t.newestVersion(ctx, max(t.snap.Load().version(), reg.Base))
		if err != nil {
			return res, err
		}
		base, err := t.loadBase(ctx, latest)
		if errors.Is(err, objstore.ErrNotFound) {
			again = err
			continue // collected since it was found: a newer one exists
		}
		if err != nil {
			return res, err
		}
		cands, sealed, err := t.mergeCandidates(ctx, reg, base.m)
		res.Sealed = append(res.Sealed, sealed...)
		if errors.Is(err, objstore.ErrNotFound) {
			// Another merger merged and reclaimed a generation since this
			// pass loaded its base: plan again from the newer base.
			again = err
			continue
		}
		if err != nil {
			return res, err
		}
		plan, leftover := planMerge(cands, budget)
		compact := t.pickCompaction(base.m)
		if len(plan) == 0 && len(compact) == 0 {
			res.Leftover = leftover
			break
		}
		m, written, stats, err := t.buildVersion(ctx, base, plan, compact)
		if err != nil {
			t.deleteFiles(written)
			if errors.Is(err, objstore.ErrNotFound) {
				// A merger whose lease lapsed mid-pass (both think they are
				// the merger) merged and reclaimed it first: replan.
				again = err
				continue
			}
			return res, err
		}
		if err := t.db.point(ctx, hookMergeAfterData); err != nil {
			return res, err // a crash here leaves orphan data files
		}
		if err := t.checkLive(); err != nil { // dropped meanwhile: stop here
			t.deleteFiles(written)
			return res, err
		}
		err = t.commitManifest(ctx, m)
		if errors.Is(err, objstore.ErrPrecondition) {
			t.db.stats.MergeConflicts.Add(1)
			res.Conflicts++
			t.deleteFiles(written)
			again = err
			continue
		}
		if err != nil {
			// The commit may have landed with its response lost: keep the
			// files; the orphan sweep removes them if it did not.
			return res, fmt.Errorf("committing base version %d: %w", m.Version, err)
		}
		t.db.stats.Merges.Add(1)
		t.db.stats.MergedRows.Add(stats.rows)
		t.db.stats.MergeDuplicates.Add(stats.dups)
		res.Version, res.Rows, res.Bytes, res.Duplicates, res.CompactedFiles, res.Leftover = m.Version, stats.rows, stats.bytes, stats.dups, len(compact), leftover
		for _, g := range plan {
			res.Merged = append(res.Merged, GenRef{Shard: g.shard, Gen: g.gen})
		}
		// Readers learn of the new base from the registry, before any of
		// the merged generations is reclaimed.
		noteBase(ctx, t.db, t.keys, m.Version)
		if err := t.db.point(ctx, hookMergeAfterCommit); err != nil {
			return res, err // a crash here leaves merged generations unreclaimed
		}
		break
	}
	reclaimed, err := t.reclaim(ctx)
	res.Reclaimed = reclaimed
	if err != nil {
		return res, err
	}
	res.VersionsCollected, res.FilesCollected, err = t.collectVersions(ctx)
	if err == nil && res.Version > 0 {
		// This process's own view moves to the new base at once.
		_, err = t.refreshed(ctx, t.refresh.ticket(), true)
	}
	return res, err
}

// candidate is a sealed generation awaiting merge.
type candidate struct {
	shard string
	gen   uint64
	seal  *sealRecord
}

// abandonedAfter is how long an open generation's head must stand still
// before the merger takes its writer for gone and seals it: well past the
// GenMaxAge at which a live writer seals it itself (counted from its first
// segment, at or before the head's last change), with room for a head's
// Last-Modified, which the store rounds down to the second. Partitions
// hold no lease that would tell the merger their writer is alive, and
// sealing a live writer's generation fences it.
func abandonedAfter(genMaxAge time.Duration) time.Duration {
	return 2*genMaxAge + 2*time.Second
}

// mergeCandidates returns, per shard in name order, the sealed generations
// above the base's watermark, in generation order from watermark+1 on: the
// only order a merge may take them in (a watermark means "everything up to
// here"). Shards whose writer is gone get their open generation sealed
// first.
func (t *Table) mergeCandidates(ctx context.Context, reg *registry, m *Manifest) ([][]candidate, []GenRef, error) {
	var out [][]candidate
	var sealedNow []GenRef
	for _, shard := range sortedKeys(reg.Shards) {
		h, err := readHead(ctx, t.db, t.keys, shard)
		if errors.Is(err, errNoHead) {
			continue
		}
		if err != nil {
			return nil, sealedNow, err
		}
		if !h.Sealed && h.Segs > 0 && !(t.partitions == 0 && shard == t.db.cfg.Shard) && t.liveWriter(shard) == nil && t.db.rt.Now().Sub(h.modified) >= abandonedAfter(t.db.cfg.GenMaxAge) {
			if hs, ok, err := t.sealAbandoned(ctx, shard, h); err != nil {
				return nil, sealedNow, err
			} else if ok {
				h = hs
				sealedNow = append(sealedNow, GenRef{Shard: shard, Gen: h.Gen})
			}
		}
		last := h.Gen - 1
		if h.Sealed {
			last = h.Gen
		}
		wm := m.watermark(shard)
		if last <= wm {
			continue
		}
		cs := make([]candidate, last-wm)
		err = sched.Parallel(ctx, t.db.rt, len(cs), 16, func(ctx context.Context, i int) error {
			g := wm + 1 + uint64(i)
			var rec *sealRecord
			var err error
			if g == h.Gen {
				rec, err = t.sealOf(ctx, shard, h)
			} else {
				rec, err = t.loadSeal(ctx, shard, g)
			}
			if err != nil {
				return fmt.Errorf("generation %s/%d: %w", shard, g, err)
			}
			cs[i] = candidate{shard: shard, gen: g, seal: rec}
			return nil
		})
		if err != nil {
			return nil, sealedNow, err
		}
		out = append(out, cs)
	}
	return out, sealedNow, nil
}

// planMerge picks sealed generations, oldest seal first across shards but
// always a shard's next generation (so each shard's picks run on from its
// watermark without a gap), within budget bytes. The first pick is taken
// even if larger than the budget, so an oversized generation is merged
// whole, alone.
func planMerge(shards [][]candidate, budget int64) (plan []candidate, leftover bool) {
	next := make([]int, len(shards))
	var used int64
	for {
		best := -1
		for i, cs := range shards {
			if next[i] < len(cs) && (best < 0 || cs[next[i]].seal.SealedAt.Before(shards[best][next[best]].seal.SealedAt)) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		c := shards[best][next[best]]
		if len(plan) > 0 && used+c.seal.bytes() > budget {
			leftover = true
			break
		}
		plan = append(plan, c)
		used += c.seal.bytes()
		next[best]++
	}
	// (shard, generation) order: the order readers search the WAL in,
	// which the duplicate rule follows.
	sort.Slice(plan, func(i, j int) bool {
		if plan[i].shard != plan[j].shard {
			return plan[i].shard < plan[j].shard
		}
		return plan[i].gen < plan[j].gen
	})
	return plan, leftover
}

// pickCompaction returns the smallest data files to rewrite when the base
// has more than CompactMaxFiles, bounded by TargetFileBytes in total.
func (t *Table) pickCompaction(m *Manifest) []FileMeta {
	cfg := t.db.cfg
	if len(m.Files) < cfg.CompactMaxFiles {
		return nil
	}
	files := append([]FileMeta(nil), m.Files...)
	sort.Slice(files, func(i, j int) bool {
		if files[i].Bytes != files[j].Bytes {
			return files[i].Bytes < files[j].Bytes
		}
		return files[i].Name < files[j].Name
	})
	var pick []FileMeta
	var bytes int64
	for _, f := range files {
		if len(pick) >= 2 && bytes+f.Bytes > cfg.TargetFileBytes {
			break
		}
		pick = append(pick, f)
		bytes += f.Bytes
		if len(m.Files)-len(pick)+1 < cfg.CompactMaxFiles/2 {
			break
		}
	}
	if len(pick) < 2 {
		return nil
	}
	return pick
}

type buildStats struct{ rows, dups, payloadBytes, bytes int64 }

// buildVersion reads the planned generations and compacted files (in
// parallel), drops duplicate ids deterministically (a row already in the
// base wins; among WAL rows the first in (shard, generation, segment)
// order wins — the order readers search the WAL in), writes the new data
// files (uploading one while encoding the next) and returns the manifest
// of the next version. Memory is bounded by the pass's budget.
func (t *Table) buildVersion(ctx context.Context, base *baseView, plan []candidate, compact []FileMeta) (*Manifest, []string, buildStats, error) {
	var st buildStats
	type input struct {
		key   string
		limit int64
		rows  []rowfile.Record
	}
	var inputs []*input
	wm := map[string]uint64{}
	for _, c := range plan {
		for _, s := range c.seal.Segments {
			inputs = append(inputs, &input{key: t.keys.Segment(c.shard, c.gen, s.Seq), limit: max(s.Size, s.Layout.Size) + 1})
			st.bytes += s.Size
		}
		wm[c.shard] = max(wm[c.shard], c.gen)
	}
	nseg := len(inputs)
	dropped := map[string]bool{}
	for _, f := range compact {
		dataKey, _, err := dataKeys(t.keys, f.Name)
		if err != nil {
			return nil, nil, st, err
		}
		inputs = append(inputs, &input{key: dataKey, limit: f.Bytes + 1})
		dropped[f.Name] = true
	}
	err := sched.Parallel(ctx, t.db.rt, len(inputs), 16, func(ctx context.Context, i int) error {
		in := inputs[i]
		data, _, err := objstore.ReadAll(ctx, t.db.store, in.key, in.limit+(4<<20))
		if err != nil {
			return err
		}
		recs, err := rowfile.Decode(data, true)
		if err != nil {
			return fmt.Errorf("%s: %w", in.key, err)
		}
		in.rows = recs
		return nil
	})
	if err != nil {
		return nil, nil, st, err
	}
	var rows []rowfile.Record
	seen := map[string]bool{}
	for i, in := range inputs {
		for _, r := range in.rows {
			if i >= nseg {
				rows = append(rows, r) // a compacted base file
				continue
			}
			if _, inBase := base.find(r.ID); inBase || seen[r.ID] {
				st.dups++
				continue
			}
			seen[r.ID] = true
			rows = append(rows, r)
			st.rows++
			st.payloadBytes += r.PayloadSize
		}
		in.rows = nil
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].ID < rows[j].ID })

	m := base.m.clone()
	m.Version, m.Parent, m.CreatedAt = base.m.Version+1, base.m.Version, t.db.rt.Now().UTC()
	m.ID, m.ParentID = t.db.randomName()[:16], base.m.ID
	m.Files = m.Files[:0]
	for _, f := range base.m.Files {
		if !dropped[f.Name] {
			m.Files = append(m.Files, f)
		}
	}
	for shard, g := range wm {
		m.Watermarks[shard] = g
	}
	if err := t.retain(ctx, base.m, m); err != nil {
		return nil, nil, st, err
	}
	m.Rows += st.rows
	m.PayloadBytes += st.payloadBytes
	m.Duplicates += st.dups

	var chunks [][]rowfile.Record
	for start := 0; start < len(rows); {
		end, size := start, int64(0)
		for end < len(rows) && (end == start || size < t.db.cfg.TargetFileBytes) {
			size += int64(len(rows[end].Payload)) + 256
			end++
		}
		chunks = append(chunks, rows[start:end])
		start = end
	}
	metas := make([]FileMeta, len(chunks))
	var mu sync.Mutex
	var written []string
	// Two files at a time: one uploading while the next is encoded.
	err = sched.Parallel(ctx, t.db.rt, len(chunks), 2, func(ctx context.Context, i int) error {
		meta, keys, err := t.writeDataFile(ctx, m.Version, chunks[i])
		mu.Lock()
		written = append(written, keys...)
		mu.Unlock()
		metas[i] = meta
		return err
	})
	if err != nil {
		return nil, written, st, err
	}
	m.Files = append(m.Files, metas...)
	sort.Slice(m.Files, func(i, j int) bool {
		if m.Files[i].MinID != m.Files[j].MinID {
			return m.Files[i].MinID < m.Files[j].MinID
		}
		return m.Files[i].Name < m.Files[j].Name
	})
	return m, written, st, nil
}

func (t *Table) writeDataFile(ctx context.Context, version uint64, rows []rowfile.Record) (FileMeta, []string, error) {
	name := fmt.Sprintf("%020d-%s", version, t.db.randomName()[:16])
	dataKey, idxKey, err := dataKeys(t.keys, name)
	if err != nil {
		return FileMeta{}, nil, err
	}
	data, lay, err := rowfile.Encode(rows, rowfile.Options{})
	if err != nil {
		return FileMeta{}, nil, err
	}
	idx := rowfile.MarshalLayout(lay)
	var written []string
	for _, obj := range []struct {
		key, ct string
		body    []byte
	}{{dataKey, "application/vnd.apache.arrow.file", data}, {idxKey, "application/octet-stream", idx}} {
		// Names are unique, so no condition is needed (and large files may
		// then upload in blocks).
		if _, err := t.db.store.Put(ctx, obj.key, bytes.NewReader(obj.body), objstore.PutOptions{Size: int64(len(obj.body)), ContentType: obj.ct}); err != nil {
			return FileMeta{}, written, fmt.Errorf("writing %s: %w", obj.key, err)
		}
		written = append(written, obj.key)
	}
	t.db.layouts.Add(idxKey, lay, lay.MemSize())
	return FileMeta{Name: name, Rows: int64(len(rows)), Bytes: int64(len(data)), IndexBytes: int64(len(idx)),
		MinID: rows[0].ID, MaxID: rows[len(rows)-1].ID}, written, nil
}

func (t *Table) deleteFiles(keys []string) {
	if len(keys) == 0 {
		return
	}
	ctx, cancel := t.db.rt.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := t.db.store.DeleteMany(ctx, keys); err != nil {
		t.db.cfg.Logger.Warn("deleting uncommitted files (the orphan sweep will retry)", "table", t.Name(), "err", err)
	}
}

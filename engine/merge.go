package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rollstore/rollstore/engine/rowfile"
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
	Duplicates     int64    `json:"duplicates"`
	CompactedFiles int      `json:"compacted_files"`
	Conflicts      int      `json:"conflicts"`
	Reclaimed      []GenRef `json:"reclaimed"`
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
	t.mergeMu.Lock()
	defer t.mergeMu.Unlock()
	o, err := t.db.acquire(ctx, t.lay.MergerLease())
	if errors.Is(err, objstore.ErrLeased) {
		return MergeResult{}, fmt.Errorf("%w: %s", ErrMergerBusy, t.Name())
	}
	if err != nil {
		return MergeResult{}, fmt.Errorf("acquiring the merger lease: %w", err)
	}
	defer o.release(context.WithoutCancel(ctx))
	start := time.Now()
	defer func() { t.db.stats.MergeNanos.Add(int64(time.Since(start))) }()
	cfg := t.db.cfg
	budget := opts.MaxBytes
	if budget <= 0 {
		budget = cfg.MergeMaxBytes
	}
	var res MergeResult
	for attempt := 0; ; attempt++ {
		if attempt == maxCommitAttempts {
			return res, fmt.Errorf("merge of %s: lost the commit %d times in a row", t.Name(), attempt)
		}
		latest, err := t.latestVersion(ctx, t.snap.Load().version())
		if err != nil {
			return res, err
		}
		base, err := t.loadBase(ctx, latest)
		if err != nil {
			return res, err
		}
		gens, err := t.listWAL(ctx)
		if err != nil {
			return res, err
		}
		if sealed, err := t.sealAbandoned(ctx, base.m, gens); err != nil {
			return res, err
		} else if sealed {
			if gens, err = t.listWAL(ctx); err != nil {
				return res, err
			}
		}
		plan, leftover := planMerge(base.m, gens, budget)
		compact := t.pickCompaction(base.m)
		if len(plan) == 0 && len(compact) == 0 {
			res.Leftover = leftover
			break
		}
		m, written, stats, err := t.buildVersion(ctx, base, plan, compact)
		if err != nil {
			t.deleteFiles(written)
			return res, err
		}
		if err := cfg.Hooks.Call(ctx, "merge:after-data"); err != nil {
			return res, err // a crash here leaves orphan data files
		}
		err = t.commitManifest(ctx, m)
		if errors.Is(err, objstore.ErrPrecondition) {
			t.db.stats.MergeConflicts.Add(1)
			res.Conflicts++
			t.deleteFiles(written)
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
		res.Version, res.Rows, res.Duplicates, res.CompactedFiles, res.Leftover = m.Version, stats.rows, stats.dups, len(compact), leftover
		for _, g := range plan {
			res.Merged = append(res.Merged, GenRef{Shard: g.shard, Gen: g.gen})
		}
		if s, err := t.loadBase(ctx, m.Version); err == nil {
			t.install(s)
		}
		if err := cfg.Hooks.Call(ctx, "merge:after-commit"); err != nil {
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
	res.Duration = time.Since(start)
	return res, err
}

// planMerge picks sealed generations above the watermarks, oldest first,
// within budget bytes. Per shard only a contiguous run from the watermark
// qualifies (the watermark means "everything up to here"), so an unsealed
// generation stops its shard. The first pick is taken even if larger than
// the budget, so an oversized generation is merged whole, alone.
func planMerge(m *Manifest, gens []walGen, budget int64) (plan []walGen, leftover bool) {
	var cands []walGen
	blocked := map[string]bool{}
	for _, g := range gens {
		if g.gen <= m.watermark(g.shard) || blocked[g.shard] {
			continue
		}
		if !g.sealed {
			blocked[g.shard] = true
			continue
		}
		cands = append(cands, g)
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if !cands[i].oldest.Equal(cands[j].oldest) {
			return cands[i].oldest.Before(cands[j].oldest)
		}
		if cands[i].shard != cands[j].shard {
			return cands[i].shard < cands[j].shard
		}
		return cands[i].gen < cands[j].gen
	})
	var used int64
	stopped := map[string]bool{}
	for _, g := range cands {
		if stopped[g.shard] {
			leftover = true
			continue
		}
		if len(plan) > 0 && used+g.bytes > budget {
			stopped[g.shard] = true
			leftover = true
			continue
		}
		plan = append(plan, g)
		used += g.bytes
	}
	// Within a shard, generations must be merged in order; the sort by age
	// keeps them so, but re-sort by (shard, gen) for the duplicate rule.
	sort.Slice(plan, func(i, j int) bool {
		if plan[i].shard != plan[j].shard {
			return plan[i].shard < plan[j].shard
		}
		return plan[i].gen < plan[j].gen
	})
	// Drop any shard's picks that are not contiguous from its watermark.
	next := map[string]uint64{}
	out := plan[:0]
	for _, g := range plan {
		if n, ok := next[g.shard]; ok && g.gen != n {
			leftover = true
			continue
		}
		out = append(out, g)
		next[g.shard] = g.gen + 1
	}
	return out, leftover
}

// pickCompaction returns the smallest data files to rewrite when the base
// has more than CompactMaxFiles, bounded by TargetFileBytes in total.
func (t *Table) pickCompaction(m *Manifest) []FileMeta {
	cfg := t.db.cfg
	if len(m.Files) < cfg.CompactMaxFiles {
		return nil
	}
	files := append([]FileMeta(nil), m.Files...)
	sort.Slice(files, func(i, j int) bool { return files[i].Bytes < files[j].Bytes })
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

type buildStats struct{ rows, dups, payloadBytes int64 }

// buildVersion reads the planned generations and compacted files, drops
// duplicate ids deterministically (a row already in the base wins; among
// WAL rows the first in (shard, generation, segment) order wins — the order
// readers search the WAL in), writes the new data files and returns the
// manifest of the next version.
func (t *Table) buildVersion(ctx context.Context, base *snapshot, plan []walGen, compact []FileMeta) (*Manifest, []string, buildStats, error) {
	var st buildStats
	var rows []rowfile.Record
	seen := map[string]bool{}
	wm := map[string]uint64{}
	var segs []segView
	for _, g := range plan {
		gs, err := t.loadGeneration(ctx, g)
		if err != nil {
			return nil, nil, st, err
		}
		segs = append(segs, gs...)
		wm[g.shard] = max(wm[g.shard], g.gen)
	}
	decoded, err := t.readSegments(ctx, segs)
	if err != nil {
		return nil, nil, st, err
	}
	// In (shard, generation, segment) order: the first copy of an id wins.
	for _, recs := range decoded {
		for _, r := range recs {
			if _, inBase := base.findBase(r.ID); inBase || seen[r.ID] {
				st.dups++
				continue
			}
			seen[r.ID] = true
			rows = append(rows, r)
			st.rows++
			st.payloadBytes += r.PayloadSize
		}
	}
	dropped := map[string]bool{}
	for _, f := range compact {
		dataKey, _, err := dataKeys(t.lay, f.Name)
		if err != nil {
			return nil, nil, st, err
		}
		data, _, err := objstore.ReadAll(ctx, t.db.store, dataKey, f.Bytes+1)
		if err != nil {
			return nil, nil, st, err
		}
		recs, err := rowfile.Decode(data, true)
		if err != nil {
			return nil, nil, st, fmt.Errorf("%s: %w", dataKey, err)
		}
		rows = append(rows, recs...)
		dropped[f.Name] = true
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].ID < rows[j].ID })

	m := base.m.clone()
	m.Version, m.Parent, m.CreatedAt = base.m.Version+1, base.m.Version, t.db.cfg.Now().UTC()
	m.Files = m.Files[:0]
	for _, f := range base.m.Files {
		if !dropped[f.Name] {
			m.Files = append(m.Files, f)
		}
	}
	for shard, g := range wm {
		m.Watermarks[shard] = g
	}
	m.Rows += st.rows
	m.PayloadBytes += st.payloadBytes
	m.Duplicates += st.dups

	var written []string
	for start := 0; start < len(rows); {
		end, size := start, int64(0)
		for end < len(rows) && (end == start || size < t.db.cfg.TargetFileBytes) {
			size += int64(len(rows[end].Payload)) + 256
			end++
		}
		meta, keys, err := t.writeDataFile(ctx, m.Version, rows[start:end])
		written = append(written, keys...)
		if err != nil {
			return nil, written, st, err
		}
		m.Files = append(m.Files, meta)
		start = end
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].MinID < m.Files[j].MinID })
	return m, written, st, nil
}

// readSegments fetches and decodes segments, several at a time (a pass may
// hold hundreds of small segments), returning them in the order given.
func (t *Table) readSegments(ctx context.Context, segs []segView) ([][]rowfile.Record, error) {
	out := make([][]rowfile.Record, len(segs))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, seg := range segs {
		g.Go(func() error {
			data, _, err := objstore.ReadAll(ctx, t.db.store, seg.key, seg.layout.Size+1)
			if err != nil {
				return err
			}
			recs, err := rowfile.Decode(data, true)
			if err != nil {
				return fmt.Errorf("%s: %w", seg.key, err)
			}
			out[i] = recs
			return nil
		})
	}
	return out, g.Wait()
}

func (t *Table) writeDataFile(ctx context.Context, version uint64, rows []rowfile.Record) (FileMeta, []string, error) {
	name := fmt.Sprintf("%020d-%s", version, randomName()[:16])
	dataKey, idxKey, err := dataKeys(t.lay, name)
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
		key  string
		body []byte
	}{{dataKey, data}, {idxKey, idx}} {
		if _, err := t.db.store.Put(ctx, obj.key, bytes.NewReader(obj.body), objstore.PutOptions{IfNotExists: true, Size: int64(len(obj.body))}); err != nil {
			return FileMeta{}, written, fmt.Errorf("writing %s: %w", obj.key, err)
		}
		written = append(written, obj.key)
	}
	t.db.layouts.Add(t.ck(idxKey), lay, lay.MemSize())
	return FileMeta{Name: name, Rows: int64(len(rows)), Bytes: int64(len(data)), IndexBytes: int64(len(idx)),
		MinID: rows[0].ID, MaxID: rows[len(rows)-1].ID}, written, nil
}

func (t *Table) deleteFiles(keys []string) {
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := t.db.store.DeleteMany(ctx, keys); err != nil {
		t.db.cfg.Logger.Warn("deleting uncommitted files (the orphan sweep will retry)", "table", t.Name(), "err", err)
	}
}

// reclaim deletes generations merged into a base version committed at least
// ReclaimGrace ago: the segments first, the seal record last. Readers that
// still hold such a generation get ErrNotFound and recover from the base.
func (t *Table) reclaim(ctx context.Context) ([]GenRef, error) {
	cfg := t.db.cfg
	entries, versions, err := t.listVersions(ctx)
	if err != nil || len(versions) == 0 {
		return nil, err
	}
	cutoff := cfg.Now().Add(-cfg.ReclaimGrace)
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
	if err != nil {
		return nil, err
	}
	gens, err := t.listWAL(ctx)
	if err != nil {
		return nil, err
	}
	var out []GenRef
	for _, g := range gens {
		if g.gen > m.watermark(g.shard) {
			continue
		}
		var seal []string
		var rest []string
		for _, k := range g.keys {
			if wk, _ := t.lay.ParseWAL(k); wk.IsSeal {
				seal = append(seal, k)
			} else {
				rest = append(rest, k)
			}
		}
		for i, k := range rest {
			if err := t.db.store.Delete(ctx, k); err != nil {
				return out, err
			}
			if i == 0 {
				if err := cfg.Hooks.Call(ctx, "merge:mid-reclaim"); err != nil {
					return out, err
				}
			}
		}
		if err := t.db.store.DeleteMany(ctx, seal); err != nil {
			return out, err
		}
		t.db.stats.GensReclaimed.Add(1)
		out = append(out, GenRef{Shard: g.shard, Gen: g.gen})
	}
	return out, nil
}

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
	cutoff := cfg.Now().Add(-cfg.RetainAge)
	var doomed []uint64
	for i, v := range vs {
		keep := i >= len(vs)-cfg.RetainVersions || entries[i].LastModified.After(cutoff)
		if !keep {
			doomed = append(doomed, v)
		}
	}
	if len(doomed) == 0 {
		return 0, 0, nil
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
		if err := t.db.store.Delete(ctx, t.lay.Version(v)); err != nil {
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
				dk, ik, err := dataKeys(t.lay, f.Name)
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

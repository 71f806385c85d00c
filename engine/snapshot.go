package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/objstore"
)

// snapshot is an immutable view of a table: one base version with the
// layouts of its data files, and the pending generations (those above the
// base's watermarks) as they were listed. Readers share it without locks; a
// refresh builds a new one and swaps the pointer.
type snapshot struct {
	m       *Manifest
	files   []baseFile
	pending []genView
	// walLoaded is false for snapshots that hold only a base (pinned reads,
	// the "check the latest base once more" step).
	walLoaded bool
	// capErr is set when the pending generations exceed a read cap; WAL
	// lookups on this snapshot are refused with it.
	capErr error
	// flight is the refresh that built it (0 for pinned snapshots).
	flight  uint64
	builtAt time.Time
}

type baseFile struct {
	meta    FileMeta
	key     string
	layout  *rowfile.Layout
	version uint64
}

type genView struct {
	shard  string
	gen    uint64
	sealed bool
	segs   []segView
}

type segView struct {
	seq    uint64
	key    string
	layout *rowfile.Layout
}

// location is where a row was found: the file, the batch holding its
// metadata, and its payload span (inline) or object (external).
type location struct {
	key     string
	batch   rowfile.Batch
	loc     rowfile.Loc
	inBase  bool
	version uint64 // base version, when inBase
	shard   string // generation, when in the WAL
	gen     uint64
}

func (s *snapshot) findBase(id string) (location, bool) {
	for i := range s.files {
		f := &s.files[i]
		if !f.meta.covers(id) {
			continue
		}
		if l, ok := f.layout.Find(id); ok {
			return location{key: f.key, batch: f.layout.Batches[l.Batch], loc: l, inBase: true, version: s.m.Version}, true
		}
	}
	return location{}, false
}

// findWAL looks through pending generations in (shard, generation, segment)
// order, which is also the order the merge uses to pick among cross-shard
// duplicates, so a row read from the WAL is the row the base will keep.
func (s *snapshot) findWAL(id string) (location, bool, error) {
	if s.capErr != nil {
		return location{}, false, s.capErr
	}
	for _, g := range s.pending {
		for _, seg := range g.segs {
			if l, ok := seg.layout.Find(id); ok {
				return location{key: seg.key, batch: seg.layout.Batches[l.Batch], loc: l, shard: g.shard, gen: g.gen}, true, nil
			}
		}
	}
	return location{}, false, nil
}

// manifestSize estimates the memory a snapshot holds beyond the shared
// layouts, for byte-bounded caches.
func (s *snapshot) manifestSize() int64 {
	n := int64(512)
	for _, f := range s.m.Files {
		n += int64(len(f.Name)+len(f.MinID)+len(f.MaxID)) + 160
	}
	return n
}

func (s *snapshot) version() uint64 {
	if s == nil || s.m == nil {
		return 0
	}
	return s.m.Version
}

// loadBase builds a base-only snapshot of version v (0: empty base).
func (t *Table) loadBase(ctx context.Context, v uint64) (*snapshot, error) {
	if v == 0 {
		return &snapshot{m: emptyManifest(), builtAt: t.db.cfg.Now()}, nil
	}
	m, err := t.loadManifest(ctx, v)
	if err != nil {
		return nil, err
	}
	s := &snapshot{m: m, builtAt: t.db.cfg.Now(), files: make([]baseFile, len(m.Files))}
	for i, f := range m.Files {
		dataKey, idxKey, err := dataKeys(t.lay, f.Name)
		if err != nil {
			return nil, fmt.Errorf("base version %d: %w", v, err)
		}
		lay, err := t.db.layouts.GetOrLoad(ctx, t.ck(idxKey), func(ctx context.Context) (*rowfile.Layout, int64, error) {
			data, _, err := objstore.ReadAll(ctx, t.db.store, idxKey, max(f.IndexBytes, 1)<<1+(64<<10))
			if err != nil {
				return nil, 0, err
			}
			l, err := rowfile.UnmarshalLayout(data)
			if err != nil {
				return nil, 0, fmt.Errorf("%s: %w", idxKey, err)
			}
			return l, l.MemSize(), nil
		})
		if err != nil {
			return nil, err
		}
		s.files[i] = baseFile{meta: f, key: dataKey, layout: lay, version: v}
	}
	return s, nil
}

// refreshSnapshot builds the latest view: the WAL listing first, then the
// newest base. The order is what makes a miss trustworthy: a generation
// reclaimed before the listing was merged into a base committed before the
// reclaim, so the base found after the listing holds its rows. (This is the
// "check the latest base once more after a WAL miss" of DESIGN.md, done once
// inside the refresh instead of after it.) A listed generation whose files
// vanish before their layouts load was merged into a still newer base: the
// refresh starts over, a bounded number of times.
func (t *Table) refreshSnapshot(ctx context.Context, flight uint64) (*snapshot, error) {
	t.db.stats.Refreshes.Add(1)
	var lastErr error
	for attempt := 0; attempt <= maxRetries; attempt++ {
		gens, err := t.listWAL(ctx)
		if err != nil {
			return nil, err
		}
		if err := t.db.cfg.Hooks.Call(ctx, "refresh:after-list"); err != nil {
			return nil, err
		}
		cur := t.snap.Load()
		// The descriptor check rides along with the version probe: a table
		// dropped (and perhaps created again) by another process retires
		// this handle instead of serving another incarnation's files.
		var desc objstore.Attrs
		var descErr error
		var wg sync.WaitGroup
		wg.Go(func() { desc, descErr = t.db.store.Head(ctx, t.lay.Descriptor()) })
		v, err := t.latestVersion(ctx, cur.version())
		wg.Wait()
		if errors.Is(descErr, objstore.ErrNotFound) || (descErr == nil && desc.ETag != t.inc) {
			t.dropped.Store(true)
			return nil, fmt.Errorf("%w: %s", ErrTableNotFound, t.Name())
		}
		if descErr != nil {
			return nil, descErr
		}
		if err != nil {
			return nil, err
		}
		var s *snapshot
		if cur != nil && cur.version() == v {
			c := *cur
			s = &c
		} else if s, err = t.loadBase(ctx, v); err != nil {
			return nil, err
		}
		if err := t.db.cfg.Hooks.Call(ctx, "refresh:after-base"); err != nil {
			return nil, err
		}
		s.pending, s.capErr, err = t.loadPending(ctx, s.m, gens)
		if errors.Is(err, objstore.ErrNotFound) {
			lastErr = err
			t.db.stats.RefreshRetries.Add(1)
			continue
		}
		if err != nil {
			return nil, err
		}
		s.walLoaded, s.flight, s.builtAt = true, flight, t.db.cfg.Now()
		return s, nil
	}
	t.db.stats.ReadMissingFile.Add(1)
	return nil, fmt.Errorf("%w: refreshing %s: %w", ErrMissingFile, t.Name(), lastErr)
}

// loadPending loads the layouts of every listed generation above the base's
// watermarks. Sealed generations come from their seal record; open ones
// from their segments (each read once, then cached: immutable). When the
// pending generations exceed a read cap, it loads nothing and returns the
// cap's error as capErr (the snapshot still serves the base).
func (t *Table) loadPending(ctx context.Context, m *Manifest, gens []walGen) (pending []genView, capErr error, err error) {
	perShard := map[string]int{}
	var src []walGen // the listing of each pending generation
	for _, g := range gens {
		if g.gen <= m.watermark(g.shard) {
			continue // merged; awaiting reclamation
		}
		perShard[g.shard]++
		pending = append(pending, genView{shard: g.shard, gen: g.gen, sealed: g.sealed})
		src = append(src, g)
	}
	cfg := t.db.cfg
	for shard, n := range perShard {
		if n > cfg.ReadMaxPendingPerShard {
			return nil, fmt.Errorf("%w: shard %s has %d pending generations (cap %d)", ErrOverloaded, shard, n, cfg.ReadMaxPendingPerShard), nil
		}
	}
	if len(pending) > cfg.ReadMaxPendingTotal {
		return nil, fmt.Errorf("%w: %d pending generations (cap %d)", ErrOverloaded, len(pending), cfg.ReadMaxPendingTotal), nil
	}
	// Load layouts concurrently: a cold snapshot may need many small GETs.
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		sem      = make(chan struct{}, 16)
	)
	for i := range pending {
		g := &pending[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			segs, err := t.loadGeneration(ctx, src[i])
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			g.segs = segs
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, nil, firstErr
	}
	return pending, nil, nil
}

// walGen is one generation as listed.
type walGen struct {
	shard  string
	gen    uint64
	sealed bool
	segs   []uint64 // listed segment numbers, ascending
	bytes  int64
	keys   []string // every key under the generation (for reclamation)
	oldest time.Time
}

// listWAL lists every generation of every shard, in (shard, gen) order.
func (t *Table) listWAL(ctx context.Context) ([]walGen, error) {
	var out []walGen
	err := t.db.store.List(ctx, t.lay.WALPrefix(), objstore.ListOptions{}, func(e objstore.Entry) error {
		k, ok := t.lay.ParseWAL(e.Key)
		if !ok {
			return nil
		}
		if n := len(out); n == 0 || out[n-1].shard != k.Shard || out[n-1].gen != k.Gen {
			out = append(out, walGen{shard: k.Shard, gen: k.Gen, oldest: e.LastModified})
		}
		g := &out[len(out)-1]
		g.keys = append(g.keys, e.Key)
		if e.LastModified.Before(g.oldest) {
			g.oldest = e.LastModified
		}
		switch {
		case k.IsSeal:
			g.sealed = true
		case !k.IsOther:
			g.segs = append(g.segs, k.Seg)
			g.bytes += e.Size
		}
		return nil
	})
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].shard != out[j].shard {
			return out[i].shard < out[j].shard
		}
		return out[i].gen < out[j].gen
	})
	return out, err
}

// loadGeneration returns the segments of a generation with their layouts.
// A sealed generation's seal record is authoritative: segments it does not
// list (a fenced writer's late writes) are not part of the generation.
func (t *Table) loadGeneration(ctx context.Context, g walGen) ([]segView, error) {
	if g.sealed {
		seal, err := t.loadSeal(ctx, g.shard, g.gen)
		if err != nil {
			return nil, err
		}
		segs := make([]segView, len(seal.Segments))
		for i, s := range seal.Segments {
			segs[i] = segView{seq: s.Seq, key: t.lay.Segment(g.shard, g.gen, s.Seq), layout: s.Layout}
		}
		return segs, nil
	}
	segs := make([]segView, 0, len(g.segs))
	for _, seq := range g.segs {
		key := t.lay.Segment(g.shard, g.gen, seq)
		lay, err := t.segmentLayout(ctx, key)
		if err != nil {
			return nil, err
		}
		segs = append(segs, segView{seq: seq, key: key, layout: lay})
	}
	return segs, nil
}

func (t *Table) segmentLayout(ctx context.Context, key string) (*rowfile.Layout, error) {
	return t.db.layouts.GetOrLoad(ctx, t.ck(key), func(ctx context.Context) (*rowfile.Layout, int64, error) {
		data, _, err := objstore.ReadAll(ctx, t.db.store, key, t.db.cfg.SegmentMaxBytes*2+(1<<20))
		if err != nil {
			return nil, 0, err
		}
		lay, _, err := rowfile.LayoutOf(data)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", key, err)
		}
		return lay, lay.MemSize(), nil
	})
}

func (t *Table) loadSeal(ctx context.Context, shard string, gen uint64) (*sealRecord, error) {
	key := t.lay.Seal(shard, gen)
	return t.db.seals.GetOrLoad(ctx, t.ck(key), func(ctx context.Context) (*sealRecord, int64, error) {
		data, _, err := objstore.ReadAll(ctx, t.db.store, key, t.db.cfg.MaxManifestBytes)
		if err != nil {
			return nil, 0, err
		}
		s, err := decodeSeal(data)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", key, err)
		}
		if s.Shard != shard || s.Gen != gen {
			return nil, 0, fmt.Errorf("%s: seal record names %s/%d", key, s.Shard, s.Gen)
		}
		return s, int64(len(data)), nil
	})
}

// refresher deduplicates snapshot refreshes. A read must see every write
// acknowledged before it began, so it may only join a refresh that started
// after it began; one already running when the read began is waited out
// and followed by a fresh one (which later readers share in turn).
type refresher struct {
	mu  sync.Mutex
	seq uint64
	cur *flight
}

type flight struct {
	id   uint64
	done chan struct{}
	snap *snapshot
	err  error
}

// ticket returns the id of the last refresh started; a refresh with a
// larger id started after this call.
func (r *refresher) ticket() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seq
}

// after returns the result of a refresh that started after ticket. The
// refresh runs detached from any one caller's cancellation, bounded by
// timeout, so an impatient caller does not fail the others.
func (r *refresher) after(ctx context.Context, ticket uint64, timeout time.Duration, run func(ctx context.Context, id uint64) (*snapshot, error)) (*snapshot, error) {
	for {
		r.mu.Lock()
		f := r.cur
		if f == nil {
			r.seq++
			f = &flight{id: r.seq, done: make(chan struct{})}
			r.cur = f
			go func() {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
				f.snap, f.err = run(rctx, f.id)
				cancel()
				r.mu.Lock()
				r.cur = nil
				r.mu.Unlock()
				close(f.done)
			}()
		}
		r.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if f.id > ticket {
			return f.snap, f.err
		}
	}
}

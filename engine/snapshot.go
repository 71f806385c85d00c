package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
)

// snapshot is an immutable view of a table: one base version with the
// layouts of its data files, and per shard the pending generations (those
// above the base's watermark, up to the shard's head as last observed)
// with the layouts of their segments. Readers share it without locks; a
// refresh builds a new one (sharing what did not change) and swaps the
// pointer.
type snapshot struct {
	base   *baseView
	shards map[string]*shardView
	names  []string // shard names, sorted: the order of WAL lookups
	reg    *registry
	// pendingGens counts pending generations over all shards.
	pendingGens int
	// size is what the snapshot holds in memory, layouts included.
	size         int64
	flight       uint64
	baseProbedAt time.Time
	// checkedAt is when the refresh that built it began: reads trust the
	// snapshot without a refresh for ResidentMaxAge after it.
	checkedAt time.Time
}

type baseView struct {
	m     *Manifest
	files []baseFile
	size  int64
}

type baseFile struct {
	meta   FileMeta
	key    string
	layout *rowfile.Layout
}

type shardView struct {
	head head
	gens []*genView // ascending and contiguous from the watermark + 1
}

type genView struct {
	shard  string
	gen    uint64
	sealed bool
	segs   []segView // segments 1..n
	// index lists every row of a sealed generation by id, so a lookup
	// costs one binary search per generation, not one per segment.
	index []genRow
	size  int64
}

type segView struct {
	seq    uint64
	key    string
	layout *rowfile.Layout
}

type genRow struct {
	id  string
	seg int32
	row int32
}

func newGenView(shard string, gen uint64, sealed bool, segs []segView) *genView {
	g := &genView{shard: shard, gen: gen, sealed: sealed, segs: segs, size: 128}
	for _, s := range segs {
		g.size += s.layout.MemSize() + 64
	}
	if sealed && len(segs) > 1 {
		for si, s := range segs {
			for ri := range s.layout.Rows {
				g.index = append(g.index, genRow{id: s.layout.Rows[ri].ID, seg: int32(si), row: int32(ri)})
			}
		}
		// Stable: for an id in two segments the earlier one wins.
		sort.SliceStable(g.index, func(i, j int) bool { return g.index[i].id < g.index[j].id })
		g.size += int64(len(g.index)) * 40
	}
	return g
}

func (g *genView) find(id string) (segView, rowfile.Loc, bool) {
	if g.index != nil {
		i := sort.Search(len(g.index), func(i int) bool { return g.index[i].id >= id })
		if i < len(g.index) && g.index[i].id == id {
			s := g.segs[g.index[i].seg]
			return s, s.layout.Rows[g.index[i].row], true
		}
		return segView{}, rowfile.Loc{}, false
	}
	for _, s := range g.segs {
		if l, ok := s.layout.Find(id); ok {
			return s, l, true
		}
	}
	return segView{}, rowfile.Loc{}, false
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

func (b *baseView) find(id string) (location, bool) {
	for i := range b.files {
		f := &b.files[i]
		if !f.meta.covers(id) {
			continue
		}
		if l, ok := f.layout.Find(id); ok {
			return location{key: f.key, batch: f.layout.Batches[l.Batch], loc: l, inBase: true, version: b.m.Version}, true
		}
	}
	return location{}, false
}

// findWAL looks through pending generations in (shard, generation,
// segment) order, which is also the order the merge uses to pick among
// cross-shard duplicates, so a row read from the WAL is the row the base
// will keep.
func (s *snapshot) findWAL(id string) (location, bool) {
	for _, name := range s.names {
		for _, g := range s.shards[name].gens {
			if seg, l, ok := g.find(id); ok {
				return location{key: seg.key, batch: seg.layout.Batches[l.Batch], loc: l, shard: name, gen: g.gen}, true
			}
		}
	}
	return location{}, false
}

// find looks in the base, then the WAL.
func (s *snapshot) find(id string) (location, bool) {
	if l, ok := s.base.find(id); ok {
		return l, true
	}
	return s.findWAL(id)
}

func (s *snapshot) version() uint64 {
	if s == nil {
		return 0
	}
	return s.base.m.Version
}

// loadBase builds the view of base version v (0: the empty base).
func (t *Table) loadBase(ctx context.Context, v uint64) (*baseView, error) {
	if v == 0 {
		return &baseView{m: emptyManifest(), size: 256}, nil
	}
	m, err := t.loadManifest(ctx, v)
	if err != nil {
		return nil, err
	}
	b := &baseView{m: m, files: make([]baseFile, len(m.Files)), size: 512}
	err = sched.Parallel(ctx, t.db.rt, len(m.Files), 16, func(ctx context.Context, i int) error {
		f := m.Files[i]
		dataKey, idxKey, err := dataKeys(t.keys, f.Name)
		if err != nil {
			return fmt.Errorf("%w: base version %d: %w", ErrCorruptObject, v, err)
		}
		lay, err := t.db.layouts.GetOrLoad(ctx, idxKey, func(ctx context.Context) (*rowfile.Layout, int64, error) {
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
			return err
		}
		b.files[i] = baseFile{meta: f, key: dataKey, layout: lay}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, f := range b.files {
		b.size += f.layout.MemSize() + int64(len(f.meta.Name)+len(f.meta.MinID)+len(f.meta.MaxID)) + 160
	}
	return b, nil
}

// maxRefreshAttempts bounds how often one refresh starts over because a
// generation it was loading was reclaimed (merged into a newer base, which
// the next attempt loads).
const maxRefreshAttempts = 4

// refreshSnapshot builds the latest view from cur. A read that begins
// after a write was acknowledged sees it, in any process:
//
//   - The write's segment became part of its generation by a swap of the
//     shard's head, before the acknowledgement; the writer's shard was
//     active in the registry then (a writer registers as active before
//     it acknowledges, and leaves the active set only after its last
//     acknowledgement).
//   - This refresh starts after the read began. It reads the registry,
//     and then probes the head of every shard that is active, or changed
//     since the registry version cur was built from: so it sees that head,
//     or a later one, and fetches every segment up to it.
//   - A segment the head names but that is gone was reclaimed: its
//     generation was merged into a base committed before the reclaim, and
//     the refresh starts over, loading the newest base. So a complete miss
//     needs no second look at the base: a row is never lost between the
//     base and the WAL.
func (t *Table) refreshSnapshot(ctx context.Context, flight uint64, probeBase bool) (*snapshot, error) {
	t.db.stats.Refreshes.Add(1)
	cur := t.snap.Load()
	var causes []error // every attempt's failure, reported together
	for attempt := 0; attempt < maxRefreshAttempts; attempt++ {
		s, err := t.buildSnapshot(ctx, cur, flight, probeBase || attempt > 0)
		if errors.Is(err, objstore.ErrNotFound) {
			causes = append(causes, err)
			t.db.stats.RefreshRetries.Add(1)
			continue
		}
		return s, err
	}
	// Files vanishing attempt after attempt may be a drop deleting the
	// incarnation: then that is the answer.
	if reg, _, err := readRegistry(ctx, t.db, t.keys); errors.Is(err, objstore.ErrNotFound) || (err == nil && reg.Dropped) {
		return nil, fmt.Errorf("%w: %s", errDropped, t.Name())
	}
	return nil, t.missing(ctx, fmt.Errorf("%w: refreshing %s after %d attempts: %w", ErrMissingFile, t.Name(), maxRefreshAttempts, errors.Join(causes...)))
}

type headResult struct {
	h   head
	err error
}

// buildSnapshot builds one view from cur (nil: the first view), in the
// order refreshSnapshot's reasoning rests on: the registry and the heads of
// every shard that may have acknowledged since cur, then the base, then the
// layouts of the segments the heads newly count. A file found missing fails
// it with objstore.ErrNotFound, and refreshSnapshot starts over.
func (t *Table) buildSnapshot(ctx context.Context, cur *snapshot, flight uint64, probeBase bool) (*snapshot, error) {
	if err := t.checkLive(); err != nil {
		return nil, err
	}
	db := t.db
	now := db.rt.Now()
	var curReg *registry
	if cur != nil {
		curReg = cur.reg
	}
	doProbe := probeBase || cur == nil || now.Sub(cur.baseProbedAt) >= db.cfg.BaseProbeInterval
	// A first view probes for the base after reading the registry, whose
	// hint names a version to probe from: no listing of the versions.
	probeLate := cur == nil
	known := cur.version()

	first, err := t.refreshFirstRound(ctx, curReg, known, doProbe && !probeLate)
	if err != nil {
		return nil, err
	}
	if err := db.point(ctx, hookRefreshAfterHeads); err != nil {
		return nil, err
	}
	found := doProbe && !probeLate && first.probed != known
	reg, probed, err := t.refreshRegistry(ctx, curReg, first, probeLate, found)
	if err != nil {
		return nil, err
	}
	got, err := t.refreshHeads(ctx, cur, curReg, reg, first)
	if err != nil {
		return nil, err
	}

	// The base: the newest of what cur had, what the registry names and
	// what the probe found.
	target := max(known, reg.Base, probed)
	if err := db.point(ctx, hookRefreshBeforeBase); err != nil {
		return nil, err
	}
	base, err := t.refreshBase(ctx, cur, known, target, probed)
	if err != nil {
		return nil, err
	}
	if err := db.point(ctx, hookRefreshAfterBase); err != nil {
		return nil, err
	}

	s := &snapshot{base: base, shards: map[string]*shardView{}, reg: reg, flight: flight, baseProbedAt: now, checkedAt: now}
	if !doProbe {
		s.baseProbedAt = cur.baseProbedAt
	}
	if err := t.loadPending(ctx, s, cur, got); err != nil {
		return nil, err
	}
	s.account()
	return s, nil
}

// firstRound is what a refresh's first round of requests found.
type firstRound struct {
	early    []string       // the shards active in the registry as last read
	heads    []headResult   // their heads, in the same order
	regAttrs objstore.Attrs // the registry's HEAD
	probed   uint64         // the newest base version the probe found
}

// refreshFirstRound is a refresh's first round, in parallel: the registry's
// HEAD, the heads of the shards active in the registry as last read
// (curReg), and, with probe, a probe for a base version newer than known.
func (t *Table) refreshFirstRound(ctx context.Context, curReg *registry, known uint64, probe bool) (firstRound, error) {
	db := t.db
	var r firstRound
	if curReg != nil {
		for _, name := range sortedKeys(curReg.Shards) {
			if curReg.Shards[name].Active {
				r.early = append(r.early, name)
			}
		}
	}
	r.heads = make([]headResult, len(r.early))
	var regErr, probeErr error
	n := 1 + len(r.early)
	if probe {
		n++
	}
	err := sched.Parallel(ctx, db.rt, n, 64, func(ctx context.Context, i int) error {
		switch {
		case i == 0:
			r.regAttrs, regErr = db.store.Head(ctx, t.keys.Registry())
		case i <= len(r.early):
			r.heads[i-1].h, r.heads[i-1].err = readHead(ctx, db, t.keys, r.early[i-1])
		default:
			r.probed, probeErr = t.latestVersion(ctx, known)
		}
		return nil
	})
	if err != nil {
		// Parallel may return before every call did (a cancelled context):
		// nothing they write is read.
		return firstRound{}, err
	}
	if errors.Is(regErr, objstore.ErrNotFound) {
		return r, fmt.Errorf("%w: %s has no registry", errDropped, t.Name())
	}
	if regErr != nil {
		return r, regErr
	}
	return r, probeErr
}

// refreshRegistry returns the registry as the refresh uses it (curReg, or
// read again when its HEAD changed or the probe found another version) and
// the base version found by the probe that is the table's (0 if none). A
// first view (probeLate) probes for the newest version here, from the
// registry's hint.
func (t *Table) refreshRegistry(ctx context.Context, curReg *registry, first firstRound, probeLate, found bool) (*registry, uint64, error) {
	reg := curReg
	probed := first.probed
	// A probe that found another version is checked against the
	// collection floor as it is after the probe answered: a version found
	// below it is a late merger's object at a collected key.
	if reg == nil || first.regAttrs.ETag != reg.etag || found {
		r, _, err := readRegistry(ctx, t.db, t.keys)
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, 0, fmt.Errorf("%w: %s has no registry", errDropped, t.Name())
		}
		if err != nil {
			return nil, 0, err
		}
		reg = r
	}
	if reg.Dropped {
		return nil, 0, fmt.Errorf("%w: %s", errDropped, t.Name())
	}
	if probeLate {
		var err error
		if probed, reg, err = t.newestVersion(ctx, reg.Base); err != nil {
			return nil, 0, err
		}
	} else if probed < reg.Floor {
		probed = 0 // not the table's: the registry's base is the newest known
	}
	return reg, probed, nil
}

// refreshHeads returns the head of every shard that may have acknowledged
// since cur was built: those the first round read, and those probed now.
func (t *Table) refreshHeads(ctx context.Context, cur *snapshot, curReg, reg *registry, first firstRound) (map[string]headResult, error) {
	got := map[string]headResult{}
	for i, name := range first.early {
		got[name] = first.heads[i]
	}
	// A shard that changed state (became active or idle) since cur's
	// registry is probed again now, after the registry was read: a probe
	// from round one may predate the shard's last commit before it went
	// idle, and an idle shard is not probed again until it changes.
	var late []string
	for _, name := range sortedKeys(reg.Shards) {
		e := reg.Shards[name]
		changed := curReg == nil || e.Changed > curReg.Version || cur.shards[name] == nil
		if _, ok := got[name]; changed || (!ok && e.Active) {
			late = append(late, name)
		}
	}
	lateHeads := make([]headResult, len(late))
	if err := sched.Parallel(ctx, t.db.rt, len(late), 64, func(ctx context.Context, i int) error {
		lateHeads[i].h, lateHeads[i].err = readHead(ctx, t.db, t.keys, late[i])
		return nil
	}); err != nil {
		return nil, err
	}
	for i, name := range late {
		got[name] = lateHeads[i]
	}
	for _, name := range sortedKeys(got) {
		if r := got[name]; r.err != nil && !errors.Is(r.err, errNoHead) {
			return nil, r.err
		}
	}
	return got, nil
}

// refreshBase returns the view of base version target: cur's when it is
// cur's version, else loaded. A target other than the probe's that was
// collected meanwhile is replaced by the newest version listed.
func (t *Table) refreshBase(ctx context.Context, cur *snapshot, known, target, probed uint64) (*baseView, error) {
	if cur != nil && target == known {
		return cur.base, nil
	}
	b, err := t.loadBase(ctx, target)
	if errors.Is(err, objstore.ErrNotFound) && target != probed {
		// The hinted version was collected meanwhile: a newer exists.
		latest, lerr := t.listLatest(ctx)
		if lerr != nil {
			return nil, lerr
		}
		b, err = t.loadBase(ctx, latest)
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

// loadPending fills s.shards with the pending generations of every shard
// cur had or the refresh probed: it reuses what did not change and fetches
// (in parallel) the layouts the heads newly count.
func (t *Table) loadPending(ctx context.Context, s, cur *snapshot, got map[string]headResult) error {
	var fetches []func(ctx context.Context) error
	var mu sync.Mutex
	names := map[string]bool{}
	if cur != nil {
		for name := range cur.shards {
			names[name] = true
		}
	}
	for name := range got {
		names[name] = true
	}
	for _, name := range sortedKeys(names) {
		wm := s.base.m.watermark(name)
		var prev *shardView
		if cur != nil {
			prev = cur.shards[name]
		}
		r, probedShard := got[name]
		if !probedShard {
			// Not probed: unchanged, less what the base now holds.
			sv := &shardView{head: prev.head}
			for _, g := range prev.gens {
				if g.gen > wm {
					sv.gens = append(sv.gens, g)
				}
			}
			s.shards[name] = sv
			continue
		}
		sv := &shardView{head: r.h} // a zero head when the shard has none yet
		s.shards[name] = sv
		fetches = append(fetches, t.pendingGens(name, sv, prev, wm, &mu)...)
	}
	return sched.Parallel(ctx, t.db.rt, len(fetches), 8, func(ctx context.Context, i int) error {
		return fetches[i](ctx)
	})
}

// pendingGens fills sv.gens with the generations of shard name from the
// watermark wm + 1 up to sv.head: those prev holds are reused (a sealed
// generation whole, the open one's segments), the rest are fetched by the
// functions it returns, each of which fills its generation's slot under mu.
func (t *Table) pendingGens(name string, sv, prev *shardView, wm uint64, mu *sync.Mutex) []func(ctx context.Context) error {
	old := map[uint64]*genView{}
	if prev != nil {
		for _, g := range prev.gens {
			if g.gen > wm {
				old[g.gen] = g
			}
		}
	}
	var fetches []func(ctx context.Context) error
	h := sv.head
	for g := wm + 1; g <= h.Gen; g++ {
		if g == h.Gen && !h.Sealed && h.Segs == 0 {
			break // claimed, nothing written yet: nothing pending
		}
		idx := len(sv.gens)
		sv.gens = append(sv.gens, nil)
		set := func(gv *genView) {
			mu.Lock()
			sv.gens[idx] = gv
			mu.Unlock()
		}
		o := old[g]
		sealed := g < h.Gen || h.Sealed
		switch {
		case o != nil && o.sealed:
			sv.gens[idx] = o
		case sealed:
			fetches = append(fetches, t.fetchSealedGen(name, g, h, set))
		default: // the open generation
			if gv, fetch := t.openGen(name, g, h, o, set); fetch != nil {
				fetches = append(fetches, fetch)
			} else {
				sv.gens[idx] = gv
			}
		}
	}
	return fetches
}

// fetchSealedGen returns the fetch of sealed generation gen of shard name:
// its seal record, passed to set as a view.
func (t *Table) fetchSealedGen(name string, gen uint64, h head, set func(*genView)) func(ctx context.Context) error {
	segs := h.Segs
	headGen := gen == h.Gen
	return func(ctx context.Context) error {
		rec, err := t.loadSeal(ctx, name, gen)
		if errors.Is(err, objstore.ErrNotFound) && headGen {
			// The head is sealed but its record not written yet
			// (its writer stopped in between): the head says
			// how many segments to read.
			var ss []sealedSegment
			if ss, err = t.segmentLayouts(ctx, name, gen, 1, segs); err == nil {
				rec = &sealRecord{Shard: name, Gen: gen, Segments: ss}
			}
		}
		if err != nil {
			return err
		}
		set(newGenView(name, gen, true, segViews(t, name, gen, rec.Segments)))
		return nil
	}
}

// openGen returns the view of the open generation gen of shard name, whose
// head h counts h.Segs segments, when o (its view in the previous snapshot)
// already holds them all; otherwise the fetch of the segments o lacks,
// which passes the whole view to set.
func (t *Table) openGen(name string, gen uint64, h head, o *genView, set func(*genView)) (*genView, func(ctx context.Context) error) {
	db := t.db
	var have []segView
	if o != nil {
		have = o.segs
	}
	if uint64(len(have)) >= h.Segs {
		return newGenView(name, gen, false, have[:h.Segs]), nil
	}
	from, to := uint64(len(have))+1, h.Segs
	if lay := h.countedLayout(); lay != nil {
		// The segment the head counts last, as its writer
		// encoded it: fetching it below finds it here.
		db.layouts.Add(t.keys.Segment(name, gen, h.Segs), lay, lay.MemSize())
	}
	return nil, func(ctx context.Context) error {
		ss, err := t.segmentLayouts(ctx, name, gen, from, to)
		if err != nil {
			return err
		}
		all := append(append([]segView(nil), have...), segViews(t, name, gen, ss)...)
		set(newGenView(name, gen, false, all))
		return nil
	}
}

// account orders s's shards (the order of WAL lookups) and sums what s
// holds.
func (s *snapshot) account() {
	s.names = sortedKeys(s.shards)
	s.size = s.base.size + 256
	for _, name := range s.names {
		for _, g := range s.shards[name].gens {
			s.pendingGens++
			s.size += g.size
		}
	}
}

func segViews(t *Table, shard string, gen uint64, ss []sealedSegment) []segView {
	out := make([]segView, len(ss))
	for i, s := range ss {
		out[i] = segView{seq: s.Seq, key: t.keys.Segment(shard, gen, s.Seq), layout: s.Layout}
	}
	return out
}

// install makes s the resident snapshot unless a newer one is already there.
func (t *Table) install(s *snapshot) {
	if t.retiredErr() != nil {
		return
	}
	for {
		cur := t.snap.Load()
		if cur != nil && (cur.flight > s.flight) {
			return
		}
		if t.snap.CompareAndSwap(cur, s) {
			t.db.resident.Add(t, s, s.size)
			return
		}
	}
}

// refresher deduplicates snapshot refreshes. A read must see every write
// acknowledged before it began, so it may only join a refresh that started
// after it began; one already running when the read began is waited out
// and followed by a fresh one (which later readers share in turn). A read
// that needs the newest base (it found a file reclaimed) only joins a
// refresh that probes for it.
type refresher struct {
	rt sched.Runtime
	// seq numbers flights; a table's refreshers (the whole table's and
	// each partition's) share it, so a ticket taken from any of them
	// orders every flight.
	seq       *atomic.Uint64
	mu        sync.Mutex
	cur       *flight
	wantProbe bool
}

type flight struct {
	id     uint64
	probes bool
	done   sched.Event
	snap   *snapshot
	err    error
}

// ticket returns the id of the last refresh started; a refresh with a
// larger id started after this call.
func (r *refresher) ticket() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seq.Load()
}

const refreshTimeout = 30 * time.Second

// refreshed returns a snapshot built by a refresh that started after
// ticket (and probed for a newer base, if probeBase).
func (t *Table) refreshed(ctx context.Context, ticket uint64, probeBase bool) (*snapshot, error) {
	return t.refresh.after(ctx, ticket, probeBase, func(ctx context.Context, id uint64, probe bool) (*snapshot, error) {
		s, err := t.refreshSnapshot(ctx, id, probe)
		if err != nil {
			return nil, t.noteGone(err)
		}
		t.install(s)
		return s, nil
	})
}

// after runs (or joins) a refresh. The refresh runs detached from any one
// caller's cancellation, bounded by refreshTimeout, so an impatient caller
// does not fail the others.
func (r *refresher) after(ctx context.Context, ticket uint64, probe bool, run func(ctx context.Context, id uint64, probe bool) (*snapshot, error)) (*snapshot, error) {
	for {
		r.mu.Lock()
		if probe {
			r.wantProbe = true
		}
		f := r.cur
		if f == nil {
			f = &flight{id: r.seq.Add(1), probes: r.wantProbe, done: r.rt.NewEvent()}
			r.wantProbe = false
			r.cur = f
			fctx := context.WithoutCancel(ctx)
			r.rt.Go(func() {
				rctx, cancel := r.rt.WithTimeout(fctx, refreshTimeout)
				f.snap, f.err = run(rctx, f.id, f.probes)
				cancel()
				r.mu.Lock()
				r.cur = nil
				r.mu.Unlock()
				f.done.Fire()
			})
		}
		r.mu.Unlock()
		if _, err := r.rt.Wait(ctx, f.done); err != nil {
			return nil, err
		}
		if f.id > ticket && (f.probes || !probe) {
			return f.snap, f.err
		}
	}
}

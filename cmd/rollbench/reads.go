package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollstore/rollstore/engine"
)

// Read kinds. Every read is of a whole 53,248-byte payload (OpenPayload,
// then read to EOF), one at a time.
const (
	kHot     = "hot"
	kWarm    = "warm"
	kCold    = "cold"
	kWAL     = "wal"
	kColdWAL = "coldwal"
	kRecent  = "recent"
	kFresh   = "fresh"
	kAbsent  = "absent"
	kRaw     = "raw"
	kRawHead = "rawhead"
	kRawSpan = "rawspan"
)

var kindNames = map[string]string{
	kHot:     "base hit, hot payload",
	kWarm:    "base hit",
	kCold:    "cold base hit",
	kWAL:     "WAL hit",
	kColdWAL: "WAL hit, cold process",
	kRecent:  "recent row (WAL↔base race)",
	kFresh:   "just acknowledged elsewhere",
	kAbsent:  "absent id",
	kRaw:     "raw SDK GET (baseline)",
	kRawHead: "raw SDK HEAD",
	kRawSpan: "raw SDK ranged GET, same span",
}

var kindNotes = map[string]string{
	kHot: "merged into the base; read before by a reader process with the default payload cache " +
		"(64 MiB, items up to 1 MiB), so it is served from that cache",
	kWarm: "merged into the base; a long-lived reader process whose payload cache is off, so every read " +
		"fetches the payload's bytes (its snapshot, with the data files' layouts, is resident)",
	kCold: "merged into the base; a fresh engine.Open per sample, after one tb.Refresh (snapshot resident, " +
		"nothing of the row cached): the \"fresh process\" of the goal",
	kWAL:     "appended and sealed, not merged; the long-lived reader without payload cache (segment layouts resident)",
	kColdWAL: "appended and sealed, not merged; a fresh engine.Open per sample, after one tb.Refresh",
	kRecent:  "a row of the generation the churn loop sealed last: its merge and zero-grace reclaim race the read",
	kFresh: "a row another process (a writer child) acknowledged just before the read began: the read must " +
		"see it (read-after-write across processes); the reader learns of its segment by probing the shard's head",
	kAbsent: "an id never written",
	kRaw:    "azblob DownloadStream of a 53,248-byte blob, read to EOF",
	kRawHead: "azblob GetProperties of the same blobs: one HEAD, the request an absent-id lookup makes " +
		"(of the table's registry, and of each active shard's head)",
	kRawSpan: "not a goal's baseline, a diagnosis: azblob DownloadStream with the Range a base hit's payload read asks for " +
		"(the same span of the same data file), so the difference between a base hit and the raw GET splits into what the " +
		"engine adds and what a ranged read inside a large multi-block blob costs Azurite",
}

// counters is an ordered set of engine counters.
type counters []struct {
	name string
	v    int64
}

func readCounters(s *engine.Stats) counters {
	return counters{
		{"base hits", s.ReadBaseHits.Load()},
		{"WAL hits", s.ReadWALHits.Load()},
		{"late base hits", s.ReadLateBaseHits.Load()},
		{"absent", s.ReadAbsent.Load()},
		{"retries", s.ReadRetries.Load()},
		{"missing-file errors", s.ReadMissingFile.Load()},
		{"overloaded", s.ReadOverloaded.Load()},
		{"refreshes", s.Refreshes.Load()},
	}
}

func writerCounters(s *engine.Stats) counters {
	return counters{
		{"appends", s.Appends.Load()},
		{"segments", s.Segments.Load()},
		{"seals", s.Seals.Load()},
		{"merges", s.Merges.Load()},
		{"merge conflicts", s.MergeConflicts.Load()},
		{"merged rows", s.MergedRows.Load()},
		{"generations reclaimed", s.GensReclaimed.Load()},
		{"versions collected", s.VersionsCollected.Load()},
		{"files collected", s.FilesCollected.Load()},
	}
}

func (c counters) sub(o counters) counters {
	out := append(counters(nil), c...)
	for i := range out {
		out[i].v -= o[i].v
	}
	return out
}

func (c counters) add(o counters) counters {
	if c == nil {
		return append(counters(nil), o...)
	}
	for i := range c {
		c[i].v += o[i].v
	}
	return c
}

func (c counters) get(name string) int64 {
	for _, x := range c {
		if x.name == name {
			return x.v
		}
	}
	return 0
}

// readPhase is the result of one read phase (quiet, or under load).
type readPhase struct {
	name    string
	kinds   []string
	series  map[string]*series
	tallies map[string]*tally
	stats   map[string]counters // engine read counters per kind
	cached  map[string]int      // samples served from the payload cache
	errs    []string
	nErrs   int
	load    *loadInfo
	dur     time.Duration
}

func newReadPhase(name string, kinds []string) *readPhase {
	p := &readPhase{name: name, kinds: kinds, series: map[string]*series{}, tallies: map[string]*tally{}, stats: map[string]counters{},
		cached: map[string]int{}}
	for _, k := range kinds {
		p.series[k] = &series{}
		p.tallies[k] = newTally()
	}
	return p
}

func (p *readPhase) fail(kind, id string, err error) {
	p.nErrs++
	if len(p.errs) < 20 {
		p.errs = append(p.errs, fmt.Sprintf("%s %s: %v", kindNames[kind], id, err))
	}
	logf("READ ERROR (%s) %s %s: %s", p.name, kindNames[kind], id, firstLine(err.Error()))
}

// reads holds the read-side fixture: the table, its rows, the reader
// processes, and the raw blobs every phase's baseline reads.
type reads struct {
	e     *env
	size  int
	table string
	wdb   *engine.DB
	wt    *engine.Table
	// The reader processes: rdb has the default payload cache (hot
	// payloads); ndb has none, so its hits fetch the payload's bytes.
	rdb, ndb *engine.DB
	tgt      *target  // the reads table, for the quiet and load phases
	base     []string // merged into the base
	wal      []string // sealed, not merged (until the load phase merges them)
	raw      []string // raw-SDK blobs, same size
	buf      []byte
	rng      *rand.Rand
	// recent holds the ids of the generation the churn loop sealed last.
	recent atomic.Pointer[[]string]
	// spans are where the base rows' payloads are (from the warm-up reads).
	spans map[string]span
	// prober watches Azurite itself for the whole run.
	prober *prober
}

// target is what a read phase reads: a table as two reader processes see
// it, and which of its ids are where.
type target struct {
	table     string
	tb        *engine.Table // the reader without payload cache
	hot       *engine.Table // the reader with the default payload cache
	base, wal []string
	recent    *atomic.Pointer[[]string]
}

func appendRows(ctx context.Context, tb *engine.Table, ids []string, size, conc int) error {
	_, err := runPool(ctx, len(ids), conc, func(ctx context.Context, i int) error {
		id := ids[i]
		_, err := tb.Append(ctx, record(id, i), bytes.NewReader(payload(id, size)), int64(size))
		if err != nil {
			return fmt.Errorf("append %s: %w", id, err)
		}
		return nil
	})
	return err
}

func idList(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return ids
}

// setupReads writes the fixture: baseRows rows merged into a base version,
// walRows rows appended and sealed but not merged, and as many raw blobs of
// the same size as base rows; then opens the reader processes.
func setupReads(ctx context.Context, e *env, wdb *engine.DB) (*reads, error) {
	o := e.opts
	r := &reads{e: e, size: o.readSize, table: "reads", wdb: wdb, buf: make([]byte, o.readSize+1),
		rng: rand.New(rand.NewPCG(o.seed, 0x5eed))}
	if err := wdb.CreateTable(ctx, r.table); err != nil {
		return nil, err
	}
	var err error
	if r.wt, err = wdb.Table(ctx, r.table); err != nil {
		return nil, err
	}
	r.base, r.wal, r.raw = idList("base", o.baseRows), idList("wal", o.walRows), idList("raw", o.baseRows)
	if err := appendRows(ctx, r.wt, r.base, r.size, 16); err != nil {
		return nil, err
	}
	if err := r.wt.Flush(ctx); err != nil {
		return nil, err
	}
	mr, err := r.wt.Merge(ctx, engine.MergeOptions{})
	if err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	if mr.Rows != int64(len(r.base)) {
		return nil, fmt.Errorf("merge folded %d rows into version %d, want %d", mr.Rows, mr.Version, len(r.base))
	}
	if err := appendRows(ctx, r.wt, r.wal, r.size, 16); err != nil {
		return nil, err
	}
	if err := r.wt.Flush(ctx); err != nil {
		return nil, err
	}
	if _, err := runPool(ctx, len(r.raw), 16, func(ctx context.Context, i int) error {
		return e.base.upload(ctx, r.table+"/"+r.raw[i], payload(r.raw[i], r.size))
	}); err != nil {
		return nil, fmt.Errorf("raw upload: %w", err)
	}
	r.recent.Store(&r.wal)

	if r.rdb, err = engine.Open(e.store, readerConfig()); err != nil {
		return nil, err
	}
	if r.ndb, err = engine.Open(e.store, uncachedReaderConfig()); err != nil {
		return nil, err
	}
	if r.tgt, err = r.target(ctx, r.table, r.base, r.wal); err != nil {
		return nil, err
	}
	r.tgt.recent = &r.recent
	// Read every row once, untimed: warm and WAL samples are second reads
	// by the same process, and hot payloads are in the payload cache. Raw
	// blobs too, so Azurite serves both sides from the same warmth.
	r.spans = map[string]span{}
	for _, id := range append(append([]string(nil), r.base...), r.wal...) {
		var sp span
		for _, tb := range []*engine.Table{r.tgt.tb, r.tgt.hot} {
			if _, _, _, err := r.engineRead(withSpan(ctx, &sp), tb, id); err != nil {
				return nil, fmt.Errorf("warm-up read: %w", err)
			}
		}
		r.spans[id] = sp
	}
	for _, id := range r.raw {
		if _, _, err := r.rawRead(ctx, id); err != nil {
			return nil, fmt.Errorf("raw warm-up read: %w", err)
		}
	}
	logf("reads: fixture ready: %d base rows (version %d), %d sealed WAL rows, %d raw blobs of %d bytes",
		len(r.base), mr.Version, len(r.wal), len(r.raw), r.size)
	return r, nil
}

// target opens table in both reader processes, with a refresh each.
func (r *reads) target(ctx context.Context, table string, base, wal []string) (*target, error) {
	t := &target{table: table, base: base, wal: wal}
	var err error
	if t.tb, err = r.ndb.Table(ctx, table); err != nil {
		return nil, err
	}
	if t.hot, err = r.rdb.Table(ctx, table); err != nil {
		return nil, err
	}
	for _, tb := range []*engine.Table{t.tb, t.hot} {
		if err := tb.Refresh(ctx); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// engineRead reads id's whole payload: time to the payload's response
// headers (OpenPayload returned) and to its last byte, then checks the bytes.
func (r *reads) engineRead(ctx context.Context, tb *engine.Table, id string) (first, total time.Duration, cached bool, err error) {
	start := time.Now()
	p, err := tb.OpenPayload(ctx, id, 0, -1, engine.ReadOptions{})
	if err != nil {
		return 0, time.Since(start), false, err
	}
	first = time.Since(start)
	n, err := io.ReadFull(p, r.buf)
	total = time.Since(start)
	p.Close()
	return first, total, p.Cached, r.check(id, n, err)
}

func (r *reads) rawRead(ctx context.Context, id string) (first, total time.Duration, err error) {
	return r.rawDownload(id, func() (io.ReadCloser, error) { return r.e.base.open(ctx, r.table+"/"+id) })
}

// rawSpanRead reads the span of the store where id's payload is, with the
// raw side (the raw SDK from the rollstore container, on Azurite).
func (r *reads) rawSpanRead(ctx context.Context, id string) (first, total time.Duration, err error) {
	sp, ok := r.spans[id]
	if !ok || sp.key == "" {
		return 0, 0, fmt.Errorf("no span recorded for %s", id)
	}
	return r.rawDownload(id, func() (io.ReadCloser, error) { return r.e.base.openSpan(ctx, sp) })
}

// rawHead is one raw HEAD of id's raw blob: the time to its answer.
func (r *reads) rawHead(ctx context.Context, id string) (time.Duration, error) {
	start := time.Now()
	err := r.e.base.head(ctx, r.table+"/"+id)
	return time.Since(start), err
}

// rawDownload times one raw download of id's payload bytes: to the
// response headers (open returned), and to the last byte.
func (r *reads) rawDownload(id string, open func() (io.ReadCloser, error)) (first, total time.Duration, err error) {
	start := time.Now()
	rc, err := open()
	if err != nil {
		return 0, time.Since(start), err
	}
	first = time.Since(start)
	n, err := io.ReadFull(rc, r.buf)
	total = time.Since(start)
	rc.Close()
	return first, total, r.check(id, n, err)
}

// check: exactly size bytes then EOF (ReadFull into size+1 bytes reports
// ErrUnexpectedEOF), equal to what was written.
func (r *reads) check(id string, n int, err error) error {
	if err != io.ErrUnexpectedEOF || n != r.size {
		return fmt.Errorf("read %d bytes (%v), want exactly %d", n, err, r.size)
	}
	if !bytes.Equal(r.buf[:n], payload(id, r.size)) {
		return fmt.Errorf("payload bytes differ from what was written")
	}
	return nil
}

// absentRead looks up an id that was never written.
func (r *reads) absentRead(ctx context.Context, tb *engine.Table, id string) (time.Duration, error) {
	start := time.Now()
	p, err := tb.OpenPayload(ctx, id, 0, -1, engine.ReadOptions{})
	d := time.Since(start)
	if err == nil {
		p.Close()
		return d, fmt.Errorf("found a payload for an id never written")
	}
	if !errors.Is(err, engine.ErrNotFound) {
		return d, err
	}
	return d, nil
}

// isRaw reports whether kind k is of the raw side (no engine involved).
func isRaw(k string) bool { return k == kRaw || k == kRawHead || k == kRawSpan }

func (r *reads) pick(ids []string) string { return ids[r.rng.IntN(len(ids))] }

// sample takes one measurement of kind k on the reads table into p.
func (r *reads) sample(ctx context.Context, p *readPhase, k string) {
	r.sampleOn(ctx, p, k, r.tgt, "")
}

// sampleOn takes one measurement of kind k on t into p; id is the row for
// kFresh (the other kinds pick their own).
func (r *reads) sampleOn(plain context.Context, p *readPhase, k string, t *target, id string) {
	ctx := withTally(plain, p.tallies[k])
	s := p.series[k]
	var (
		first, total time.Duration
		cached       bool
		err          error
		db           = r.ndb
		tb           = t.tb
	)
	switch k {
	case kHot:
		db, tb = r.rdb, t.hot
	case kCold, kColdWAL:
		// A fresh process: its own caches, one refresh (untimed,
		// uncounted) so the snapshot is resident.
		if db, err = engine.Open(r.e.store, readerConfig()); err == nil {
			if tb, err = db.Table(plain, t.table); err == nil {
				err = tb.Refresh(plain)
			}
		}
		if err != nil {
			p.fail(k, "", fmt.Errorf("opening a cold reader (engine.Open, Table, then tb.Refresh): %w", err))
			return
		}
		defer db.Close(plain)
	}
	before := readCounters(db.Stats())
	switch k {
	case kHot, kWarm, kCold:
		id = r.pick(t.base)
		first, total, cached, err = r.engineRead(ctx, tb, id)
	case kWAL, kColdWAL:
		id = r.pick(t.wal)
		first, total, cached, err = r.engineRead(ctx, tb, id)
	case kRecent:
		id = r.pick(*t.recent.Load())
		first, total, cached, err = r.engineRead(ctx, tb, id)
	case kFresh, kNewest, kEarlier:
		first, total, cached, err = r.engineRead(ctx, tb, id)
	case kAbsent:
		id = fmt.Sprintf("absent-%016x", r.rng.Uint64())
		total, err = r.absentRead(ctx, tb, id)
	case kRaw:
		id = r.pick(r.raw)
		first, total, err = r.rawRead(ctx, id)
	case kRawHead:
		id = r.pick(r.raw)
		total, err = r.rawHead(ctx, id)
	case kRawSpan:
		id = r.pick(r.base)
		first, total, err = r.rawSpanRead(ctx, id)
	}
	if !isRaw(k) {
		p.stats[k] = p.stats[k].add(readCounters(db.Stats()).sub(before))
	}
	if err != nil {
		p.fail(k, id, err)
		return
	}
	if cached {
		p.cached[k]++
	}
	s.add(first, total)
}

func quietReads(ctx context.Context, r *reads, samples int) *readPhase {
	p := newReadPhase("quiet", []string{kHot, kWarm, kCold, kWAL, kColdWAL, kAbsent, kRaw, kRawSpan})
	start := time.Now()
	for i := range samples {
		// Interleave the kinds, rotating the order, so drift in the
		// machine's load falls on every kind alike.
		for j := range p.kinds {
			r.sample(ctx, p, p.kinds[(i+j)%len(p.kinds)])
		}
		if ctx.Err() != nil {
			break
		}
	}
	p.dur = time.Since(start)
	logSummaries(p)
	return p
}

// loadInfo describes the concurrent load of the second read phase.
type loadInfo struct {
	hugeSize        int64
	hugeDone        int
	hugeDur         []time.Duration
	churnIters      int
	churnRows       int
	merges          int
	reclaimed       int
	mergeDur        []time.Duration
	writer          counters
	timedOut        bool
	samplesWithHuge int
	samplesTotal    int
}

// loadReads samples the read kinds while the writer process (a) streams
// 300 MB appends into the same table, back to back, and (b) loops small
// appends, Flush and Merge with zero reclaim grace. Sampling stops when
// every kind has samples measurements and at least one large append and one
// merge completed (or at the time cap).
func loadReads(ctx context.Context, r *reads, samples int, hugeSize int64, churnRows int, maxDur time.Duration) (*readPhase, error) {
	p := newReadPhase("under load", []string{kWarm, kCold, kRecent, kAbsent, kRaw})
	li := &loadInfo{hugeSize: hugeSize, churnRows: churnRows}
	p.load = li
	w0 := writerCounters(r.wdb.Stats())

	loadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		stop       atomic.Bool
		hugeActive atomic.Bool
		hugeDone   atomic.Int64
		merges     atomic.Int64
		mu         sync.Mutex // guards li's slices and counts written by the loops
		wg         sync.WaitGroup
		loadErrs   = make(chan error, 2)
	)
	wg.Go(func() {
		for k := 0; !stop.Load(); k++ {
			id := fmt.Sprintf("huge-%03d", k)
			hugeActive.Store(true)
			t0 := time.Now()
			_, err := r.wt.Append(loadCtx, record(id, k), newStream(id, hugeSize), hugeSize)
			hugeActive.Store(false)
			if err != nil {
				loadErrs <- fmt.Errorf("300 MB append %s: %w", id, err)
				return
			}
			mu.Lock()
			li.hugeDur = append(li.hugeDur, time.Since(t0))
			mu.Unlock()
			hugeDone.Add(1)
		}
	})
	wg.Go(func() {
		for it := 0; !stop.Load(); it++ {
			ids := idList(fmt.Sprintf("churn-%05d", it), churnRows)
			if err := appendRows(loadCtx, r.wt, ids, r.size, churnRows); err != nil {
				loadErrs <- err
				return
			}
			if err := r.wt.Flush(loadCtx); err != nil {
				loadErrs <- fmt.Errorf("flush: %w", err)
				return
			}
			r.recent.Store(&ids)
			t0 := time.Now()
			res, err := r.wt.Merge(loadCtx, engine.MergeOptions{})
			if err != nil {
				loadErrs <- fmt.Errorf("merge: %w", err)
				return
			}
			mu.Lock()
			li.churnIters++
			li.mergeDur = append(li.mergeDur, time.Since(t0))
			if res.Version > 0 {
				li.merges++
			}
			li.reclaimed += len(res.Reclaimed)
			mu.Unlock()
			merges.Add(1)
		}
	})

	start := time.Now()
	var loadErr error
sampling:
	for i := 0; ; i++ {
		select {
		case loadErr = <-loadErrs:
			break sampling
		default:
		}
		for j := range p.kinds {
			k := p.kinds[(i+j)%len(p.kinds)]
			during := hugeActive.Load()
			r.sample(ctx, p, k)
			li.samplesTotal++
			if during || hugeActive.Load() {
				li.samplesWithHuge++
				p.series[k].underHuge++
			}
		}
		enough := hugeDone.Load() >= 1 && merges.Load() >= 1
		for _, k := range p.kinds {
			enough = enough && len(p.series[k].total) >= samples
		}
		if enough || ctx.Err() != nil {
			break
		}
		if time.Since(start) > maxDur {
			li.timedOut = true
			break
		}
	}
	p.dur = time.Since(start)
	stop.Store(true)
	if loadErr != nil {
		cancel()
	}
	wg.Wait()
	close(loadErrs)
	for err := range loadErrs {
		loadErr = errors.Join(loadErr, err)
	}
	li.hugeDone = int(hugeDone.Load())
	li.writer = writerCounters(r.wdb.Stats()).sub(w0)
	logSummaries(p)
	logf("load: %d × %d MB appends, %d churn iterations (%d merges, %d generations reclaimed), %d of %d samples during a large append",
		li.hugeDone, hugeSize/1e6, li.churnIters, li.merges, li.reclaimed, li.samplesWithHuge, li.samplesTotal)
	if loadErr != nil {
		return p, fmt.Errorf("the concurrent load failed: %w", loadErr)
	}
	return p, nil
}

func logSummaries(p *readPhase) {
	for _, k := range p.kinds {
		s := p.series[k].summary()
		logf("reads %-10s %-28s n=%4d p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms", p.name, kindNames[k], s.n, ms(s.p50), ms(s.p99), ms(s.max))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// verify applies the correctness rules to a read phase: no read error, no
// missing-file error, no overload, and "absent" exactly for the absent
// lookups (a false absent on a present row is already a read error).
func (p *readPhase) verify() []string {
	var bad []string
	if p.nErrs > 0 {
		bad = append(bad, fmt.Sprintf("%s: %d read errors", p.name, p.nErrs))
	}
	for _, k := range p.kinds {
		st := p.stats[k]
		if st == nil {
			continue
		}
		if n := st.get("missing-file errors"); n != 0 {
			bad = append(bad, fmt.Sprintf("%s: %s: %d missing-file errors", p.name, kindNames[k], n))
		}
		if n := st.get("overloaded"); n != 0 {
			bad = append(bad, fmt.Sprintf("%s: %s: %d overloaded refusals", p.name, kindNames[k], n))
		}
		want := int64(0)
		if k == kAbsent {
			want = int64(len(p.series[k].total))
		}
		if n := st.get("absent"); n != want {
			bad = append(bad, fmt.Sprintf("%s: %s: engine counted %d absent answers, want %d", p.name, kindNames[k], n, want))
		}
	}
	return bad
}

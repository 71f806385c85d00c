package main

// The partitions phase: what hash-partitioned tables cost, against the raw
// store in the same run.
//
//  1. On objstore/latency's model (requests served in parallel, as on
//     Azure): absent-id lookups with writers active, over a grid of writer
//     counts × partition counts, against the raw GET through the model; and
//     the writers' store calls per acknowledged append.
//  2. On Azurite (Azurite runs only): absent-id lookups with 1 / 4 / 16
//     writers active, and an append through a writer that does not own the
//     id's partition (Stage there, Commit on the owner) against one through
//     the owner.
//  3. On the model: sustained writes at an offered rate from 3 and 16
//     writers with a merger, for -part-sustain each.
//
// Writers are engines of this process (one engine.DB each, its own store
// client), appending through routedAppend. The reader and the merger are
// engines of their own too. The phase writes its own section of
// BENCHMARKS.md (partHeading), which other runs keep.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/azure"
	"github.com/rollstore/rollstore/objstore/latency"
	"github.com/rollstore/rollstore/objstore/memory"
)

// pside is one store the phase runs on: how a new engine reaches it, and
// the raw side of the same store.
type pside struct {
	name  string // "latency model", "Azurite"
	model *latency.Model
	// open returns a store for a new engine, its calls counted into t.
	open func(t *tally) (objstore.Bucket, func() error, error)
	raw  baseline
	// rawNames are the raw blobs (of -read-size bytes) the raw GETs read.
	rawNames []string
	size     int
	buf      []byte
	rng      *rand.Rand
	warn     func(string)
}

func newModelSide(o *options, warn func(string)) (*pside, error) {
	cfg := o.lat
	if cfg.Head.P50 == 0 {
		cfg = latency.StandardConfig()
	}
	m, err := latency.New(memory.New(), cfg)
	if err != nil {
		return nil, err
	}
	return &pside{name: "latency model", model: m,
		open: func(t *tally) (objstore.Bucket, func() error, error) {
			return newCountingBucket(m.Bucket(), t, nil), func() error { return nil }, nil
		},
		raw: storeBaseline{b: newCountingBucket(m.Bucket(), newTally(), nil)}, size: o.readSize, warn: warn,
		rng: rand.New(rand.NewPCG(o.seed, 0x9a27))}, nil
}

func newAzuriteSide(e *env) *pside {
	o := e.opts
	return &pside{name: "Azurite",
		open: func(t *tally) (objstore.Bucket, func() error, error) {
			az, err := azure.New(context.Background(), azure.Config{
				Auth:             azure.AuthConnectionString,
				ConnectionString: os.Getenv(EnvConnectionString),
				Container:        e.rsContainer,
				HTTPClient:       newHTTPClient(azure.DefaultMaxConnsPerHost, t),
			})
			if err != nil {
				return nil, nil, err
			}
			return newCountingBucket(az, t, nil), az.Close, nil
		},
		raw: e.base, size: o.readSize, warn: e.warn, rng: rand.New(rand.NewPCG(o.seed, 0xa2e))}
}

// setupRaw uploads the raw blobs the raw GETs read.
func (s *pside) setupRaw(ctx context.Context) error {
	s.buf = make([]byte, s.size+1)
	for i := range 16 {
		name := fmt.Sprintf("partitions/raw-%02d", i)
		if err := s.raw.upload(ctx, name, payload(name, s.size)); err != nil {
			return fmt.Errorf("%s: raw upload: %w", s.name, err)
		}
		s.rawNames = append(s.rawNames, name)
	}
	return nil
}

func (s *pside) rawGet(ctx context.Context) (time.Duration, error) {
	name := s.rawNames[s.rng.IntN(len(s.rawNames))]
	start := time.Now()
	rc, err := s.raw.open(ctx, name)
	if err != nil {
		return 0, err
	}
	n, err := io.ReadFull(rc, s.buf)
	d := time.Since(start)
	rc.Close()
	if err != io.ErrUnexpectedEOF || n != s.size || !bytes.Equal(s.buf[:n], payload(name, s.size)) {
		return d, fmt.Errorf("raw GET of %s: %d bytes (%v), want %d equal to what was written", name, n, err, s.size)
	}
	return d, nil
}

func (s *pside) rawHead(ctx context.Context) (time.Duration, error) {
	name := s.rawNames[s.rng.IntN(len(s.rawNames))]
	start := time.Now()
	err := s.raw.head(ctx, name)
	return time.Since(start), err
}

func (s *pside) rawPut(ctx context.Context, key string, data []byte) (time.Duration, error) {
	start := time.Now()
	err := s.raw.upload(ctx, key, data)
	return time.Since(start), err
}

// ---- A cluster: one partitioned table, its writers and a reader. ----

type pwriter struct {
	name  string
	db    *engine.DB
	tb    *engine.Table
	t     *tally
	close func() error
}

type pcluster struct {
	side    *pside
	table   string
	ws      []*pwriter
	byName  map[string]*engine.DB
	reader  *engine.DB
	rt      *engine.Table
	rtally  *tally
	closers []func() error
}

func (c *pcluster) route(name string) *engine.DB { return c.byName[name] }

func quietLogger(name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("engine", name)
}

// newCluster creates table with partitions partitions and opens writers
// writer engines on it and one reader; every writer joins the members, and
// the cluster waits until the writers' views of the members agree.
func (s *pside) newCluster(ctx context.Context, table string, writers, partitions int) (*pcluster, error) {
	c := &pcluster{side: s, table: table, byName: map[string]*engine.DB{}, rtally: newTally()}
	rb, rclose, err := s.open(c.rtally)
	if err != nil {
		return nil, err
	}
	c.closers = append(c.closers, rclose)
	rcfg := uncachedReaderConfig()
	rcfg.Logger = quietLogger("reader")
	if c.reader, err = engine.Open(rb, rcfg); err != nil {
		return nil, err
	}
	if err := c.reader.CreateTableWith(ctx, table, engine.TableOptions{Partitions: partitions}); err != nil {
		c.close(ctx)
		return nil, err
	}
	for i := range writers {
		w := &pwriter{name: fmt.Sprintf("pw-%02d", i), t: newTally()}
		b, closeStore, err := s.open(w.t)
		if err != nil {
			c.close(ctx)
			return nil, err
		}
		w.close = closeStore
		cfg := engine.DefaultConfig()
		cfg.Shard = w.name
		cfg.Logger = quietLogger(w.name)
		if w.db, err = engine.Open(b, cfg); err != nil {
			c.close(ctx)
			return nil, err
		}
		c.ws = append(c.ws, w)
		c.byName[w.name] = w.db
	}
	// Join: a writer's first look at the owners adds it to the members.
	if _, err := runPool(ctx, len(c.ws), len(c.ws), func(ctx context.Context, i int) error {
		w := c.ws[i]
		var err error
		if w.tb, err = w.db.Table(ctx, table); err != nil {
			return err
		}
		_, err = w.tb.Owner(ctx, "join")
		return err
	}); err != nil {
		c.close(ctx)
		return nil, err
	}
	// Every writer reads the members once a MembersPollInterval: wait until
	// all see all, so ownership has settled before anything is measured.
	if err := c.settle(ctx, partitions); err != nil {
		c.close(ctx)
		return nil, err
	}
	if c.rt, err = c.reader.Table(ctx, table); err != nil {
		c.close(ctx)
		return nil, err
	}
	if err := c.rt.Refresh(ctx); err != nil {
		c.close(ctx)
		return nil, err
	}
	return c, nil
}

// settle waits until every writer names the same owner for every
// partition, and that owner is one of the writers.
func (c *pcluster) settle(ctx context.Context, partitions int) error {
	ws := make([]namedTable, len(c.ws))
	for i, w := range c.ws {
		ws[i] = namedTable{w.name, w.tb}
	}
	return settleOwners(ctx, c.table, ws, partitions)
}

// namedTable is a writer's handle of a table.
type namedTable struct {
	writer string
	tb     *engine.Table
}

// settleOwners waits until every writer's handle of table (each Owners
// call joins its writer to the members, in the order given) names the
// same owner for every one of the table's partitions, one of the writers.
// Rows written before would be written by writers whose partitions then
// move to writers that join later, and the first owners, fenced, fail
// their next flush.
func settleOwners(ctx context.Context, table string, ws []namedTable, partitions int) error {
	byName := map[string]bool{}
	for _, w := range ws {
		byName[w.writer] = true
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		agree := true
		var want []engine.Owner
		for _, w := range ws {
			owners, err := w.tb.Owners(ctx)
			if err != nil {
				return err
			}
			if want == nil {
				want = owners
			}
			for i, o := range owners {
				if !byName[o.Writer] || o.Writer != want[i].Writer {
					agree = false
				}
			}
			if len(owners) != partitions {
				agree = false
			}
		}
		if agree {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: the writers' views of the owners did not agree within 30s", table)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *pcluster) close(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	_, _ = runPool(cctx, len(c.ws), len(c.ws), func(ctx context.Context, i int) error {
		w := c.ws[i]
		if w.db != nil {
			if err := w.db.Close(ctx); err != nil {
				c.side.warn(fmt.Sprintf("%s: closing writer %s: %v", c.table, w.name, err))
			}
		}
		if w.close != nil {
			_ = w.close()
		}
		return nil
	})
	if c.reader != nil {
		_ = c.reader.Close(cctx)
	}
	for _, f := range c.closers {
		_ = f()
	}
}

func (c *pcluster) writerOps() map[string]int64 {
	out := map[string]int64{}
	for _, w := range c.ws {
		for k, v := range w.t.snap().ops {
			out[k] += v
		}
	}
	return out
}

// writeStats are the appends of a write job.
type writeStats struct {
	mu        sync.Mutex
	offered   int
	acked     int
	forwarded int
	bp        int
	errs      int
	errSample []string
	lat       series
	ids       []string
}

func (ws *writeStats) note(id string, d time.Duration, fwd bool, err error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	switch {
	case err == nil:
		ws.acked++
		ws.lat.add(0, d)
		ws.ids = append(ws.ids, id)
		if fwd {
			ws.forwarded++
		}
	case errors.Is(err, engine.ErrBackpressure):
		ws.bp++
	default:
		ws.errs++
		if len(ws.errSample) < 5 {
			ws.errSample = append(ws.errSample, fmt.Sprintf("%s: %s", id, firstLine(err.Error())))
		}
	}
}

// write has every writer append rows of size bytes at rate rows per second
// each, conc at a time, until stop is called (which returns once every
// append in flight has answered). A row whose turn comes while all conc
// are busy is offered and not appended: the offered rate stays honest.
func (c *pcluster) write(prefix string, size int, rate float64, conc int) (*writeStats, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	st := &writeStats{}
	var wg sync.WaitGroup
	for _, w := range c.ws {
		tokens := make(chan int, conc)
		var seq int
		wg.Go(func() {
			t := time.NewTicker(time.Duration(float64(time.Second) / rate))
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					close(tokens)
					return
				case <-t.C:
					st.mu.Lock()
					st.offered++
					st.mu.Unlock()
					select {
					case tokens <- seq:
					default:
					}
					seq++
				}
			}
		})
		for range conc {
			wg.Go(func() {
				for i := range tokens {
					id := fmt.Sprintf("%s%s-%07d", prefix, w.name, i)
					data := payload(id, size)
					start := time.Now()
					fwd, err := routedAppend(context.Background(), w.tb, w.name, c.route, record(id, i), data)
					st.note(id, time.Since(start), fwd, err)
				}
			})
		}
	}
	return st, func() { cancel(); wg.Wait() }
}

// absent looks an id that was never written up through the reader.
func (c *pcluster) absent(ctx context.Context, id string) (time.Duration, error) {
	start := time.Now()
	p, err := c.rt.OpenPayload(ctx, id, 0, -1, engine.ReadOptions{})
	d := time.Since(start)
	if err == nil {
		p.Close()
		return d, fmt.Errorf("found a payload for %s, never written", id)
	}
	if !errors.Is(err, engine.ErrNotFound) {
		return d, err
	}
	return d, nil
}

// ---- 1 and 2: absent lookups with writers active. ----

// partCell is one measurement of absent lookups: so many writers active on
// a table of so many partitions.
type partCell struct {
	side                string
	writers, partitions int
	ph                  *readPhase
	w                   *writeStats
	dur                 time.Duration
	writerOps           map[string]int64 // the writers' calls while active
	// The writers' segments written and commit checks answered from the
	// owner's own view (no request) while active.
	segments, owned int64
}

func (c *pcluster) commitStats() (segments, owned int64) {
	for _, w := range c.ws {
		st := w.db.Stats()
		segments += st.Segments.Load()
		owned += st.OwnedChecks.Load()
	}
	return segments, owned
}

// measureCell trickles appends from every writer (one row of 1 KiB per
// -active-interval each) and samples absent lookups, raw GETs and raw
// HEADs, interleaved, over at least spread.
func (s *pside) measureCell(ctx context.Context, table string, writers, partitions, samples int, spread, interval time.Duration) (*partCell, error) {
	c, err := s.newCluster(ctx, table, writers, partitions)
	if err != nil {
		return nil, err
	}
	defer c.close(ctx)
	cell := &partCell{side: s.name, writers: writers, partitions: partitions, ph: newReadPhase(table, []string{kAbsent, kRaw, kRawHead})}
	// Each writer takes its partitions with a first row, untimed.
	warm, stopWarm := c.write(table+"-warm-", 1024, 50, 1)
	time.Sleep(300 * time.Millisecond)
	stopWarm()
	if warm.errs > 0 {
		s.warn(fmt.Sprintf("%s: %d warm-up appends failed: %v", table, warm.errs, warm.errSample))
	}
	before := c.writerOps()
	seg0, own0 := c.commitStats()
	st, stop := c.write(table+"-", 1024, float64(time.Second)/float64(interval), 2)
	start := time.Now()
	kinds := cell.ph.kinds
	for i := range samples {
		if d := time.Until(start.Add(spread * time.Duration(i) / time.Duration(samples))); d > 0 {
			time.Sleep(d)
		}
		for j := range kinds {
			k := kinds[(i+j)%len(kinds)]
			var d time.Duration
			var err error
			switch k {
			case kAbsent:
				id := fmt.Sprintf("absent-%016x", s.rng.Uint64())
				d, err = c.absent(withTally(ctx, cell.ph.tallies[k]), id)
			case kRaw:
				d, err = s.rawGet(ctx)
			case kRawHead:
				d, err = s.rawHead(ctx)
			}
			if err != nil {
				cell.ph.fail(k, table, err)
				continue
			}
			cell.ph.series[k].add(0, d)
		}
		if ctx.Err() != nil {
			break
		}
	}
	cell.dur = time.Since(start)
	// The cell is of lookups with writers active: on a machine slow
	// enough that the sampling ended before any trickled append was
	// acknowledged, the writers go on until one is (bounded).
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(10 * time.Millisecond) {
		st.mu.Lock()
		done := st.acked > 0 || st.errs > 0
		st.mu.Unlock()
		if done {
			break
		}
	}
	stop()
	cell.w = st
	cell.writerOps = snap{ops: c.writerOps()}.sub(snap{ops: before}).ops
	seg1, own1 := c.commitStats()
	cell.segments, cell.owned = seg1-seg0, own1-own0
	if st.errs > 0 {
		s.warn(fmt.Sprintf("%s: %d of %d appends failed: %v", table, st.errs, st.acked+st.errs, st.errSample))
	}
	ab, raw := cell.ph.series[kAbsent].summary(), cell.ph.series[kRaw].summary()
	logf("partitions %s %2d writers × %3d partitions: absent p50 %.2f ms (%s) p99 %s; %d appends (%d forwarded), %.2f writer calls per append",
		s.name, writers, partitions, ms(ab.p50), dratio(ab.p50, raw.p50), dratio(ab.p99, raw.p99), st.acked, st.forwarded,
		float64(total(cell.writerOps))/float64(max(st.acked, 1)))
	return cell, nil
}

// ---- 2: an append through a non-owner against one through the owner. ----

const (
	kOwner    = "owner"    // Append on the owner
	kRouted   = "routed"   // the non-owner: Stage, Commit on the owner
	kViaError = "viaerror" // the non-owner's Append, NotOwnerError, then Stage + Commit
	kRawPut   = "rawput"
)

func init() {
	kindNames[kOwner] = "append through the owner"
	kindNames[kRouted] = "append through a non-owner (Stage + owner's Commit)"
	kindNames[kViaError] = "append through a non-owner that tries Append first"
	kindNames[kRawPut] = "raw PUT"
}

type partFwd struct {
	side string
	size int
	ph   *readPhase
	// Calls per append of each path, the two writers' together.
	ops map[string]map[string]int64
}

// measureForward appends rows of size bytes one at a time, all of
// partitions writer A owns: through A, through B routing to A, through B
// trying Append first; and raw PUTs of the same size, interleaved.
func (s *pside) measureForward(ctx context.Context, table string, size, samples int) (*partFwd, error) {
	c, err := s.newCluster(ctx, table, 2, engine.DefaultPartitions)
	if err != nil {
		return nil, err
	}
	defer c.close(ctx)
	a, b := c.ws[0], c.ws[1]
	f := &partFwd{side: s.name, size: size, ph: newReadPhase(table, []string{kOwner, kRouted, kViaError, kRawPut}), ops: map[string]map[string]int64{}}
	// Ids A owns, found by A's view (its cached members).
	var ids []string
	for i := 0; len(ids) < 4*(samples+2); i++ {
		id := fmt.Sprintf("%s-%07d", table, i)
		o, err := a.tb.Owner(ctx, id)
		if err != nil {
			return nil, err
		}
		if o.Self {
			ids = append(ids, id)
		}
	}
	next := 0
	one := func(k string, timed bool) error {
		id := ids[next]
		next++
		data := payload(id, size)
		before := [2]snap{a.t.snap(), b.t.snap()}
		start := time.Now()
		var err error
		var fwd bool
		switch k {
		case kOwner:
			fwd, err = routedAppend(ctx, a.tb, a.name, c.route, record(id, next), data)
		case kRouted:
			fwd, err = routedAppend(ctx, b.tb, b.name, c.route, record(id, next), data)
		case kViaError:
			_, err = b.tb.Append(ctx, record(id, next), bytes.NewReader(data), int64(size))
			var ne *engine.NotOwnerError
			if errors.As(err, &ne) {
				fwd, err = true, forwardAppend(ctx, b.tb, c.route, ne.Owner.Writer, record(id, next), data)
			}
		case kRawPut:
			_, err = s.rawPut(ctx, "partitions/put-"+id, data)
			fwd = true
		}
		d := time.Since(start)
		if err == nil && k != kRawPut && fwd != (k != kOwner) {
			err = fmt.Errorf("%s: forwarded %v, want %v", id, fwd, k != kOwner)
		}
		if !timed {
			return err
		}
		if err != nil {
			f.ph.fail(k, id, err)
			return nil
		}
		f.ph.series[k].add(0, d)
		if k != kRawPut {
			if f.ops[k] == nil {
				f.ops[k] = map[string]int64{}
			}
			for _, sn := range []snap{a.t.snap().sub(before[0]), b.t.snap().sub(before[1])} {
				for op, v := range sn.ops {
					f.ops[k][op] += v
				}
			}
		}
		return nil
	}
	// Untimed: A takes its partitions, both paths warm their connections.
	for _, k := range f.ph.kinds {
		if err := one(k, false); err != nil {
			return nil, fmt.Errorf("%s: warm-up %s: %w", table, kindNames[k], err)
		}
	}
	for i := range samples {
		for j := range f.ph.kinds {
			_ = one(f.ph.kinds[(i+j)%len(f.ph.kinds)], true)
		}
		if ctx.Err() != nil {
			break
		}
	}
	o, r := f.ph.series[kOwner].summary(), f.ph.series[kRouted].summary()
	logf("partitions %s: append %d B p50 through the owner %.2f ms, through a non-owner %.2f ms (%s), raw PUT %.2f ms",
		s.name, size, ms(o.p50), ms(r.p50), dratio(r.p50, o.p50), ms(f.ph.series[kRawPut].summary().p50))
	return f, nil
}

// ---- 3: sustained writes with merges. ----

type pendingPoint struct {
	at         time.Duration
	gens, rows int64
	maxPart    int
	version    uint64
}

type partSustain struct {
	writers, partitions int
	rate                float64 // offered rows/s, all writers
	size, conc          int
	dur                 time.Duration
	w                   *writeStats
	rawPut              series
	points              []pendingPoint
	passes, mergeErrs   int
	merged              int64
	verified, checked   int
	statusErrs          int
	writerOps           map[string]int64
}

// sustain offers rate rows per second (all writers together) of size
// bytes for dur, with a merger merging in a loop, a raw PUT of the same
// size every 100 ms on the same store, and the table's pending
// generations sampled every tick.
func (s *pside) sustain(ctx context.Context, table string, writers int, rate float64, size, conc int, dur, tick time.Duration, verify int) (*partSustain, error) {
	c, err := s.newCluster(ctx, table, writers, engine.DefaultPartitions)
	if err != nil {
		return nil, err
	}
	defer c.close(ctx)
	res := &partSustain{writers: writers, partitions: engine.DefaultPartitions, rate: rate, size: size, conc: conc}
	mb, mclose, err := s.open(newTally())
	if err != nil {
		return nil, err
	}
	defer func() { _ = mclose() }()
	mcfg := engine.DefaultConfig()
	mcfg.ReclaimGrace = 0
	mcfg.Logger = quietLogger("merger")
	mdb, err := engine.Open(mb, mcfg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = mdb.Close(context.WithoutCancel(ctx)) }()
	mt, err := mdb.Table(ctx, table)
	if err != nil {
		return nil, err
	}
	mctx, stopMerge := context.WithCancel(ctx)
	var mwg sync.WaitGroup
	mwg.Go(func() {
		for mctx.Err() == nil {
			r, err := mt.Merge(mctx, engine.MergeOptions{})
			if mctx.Err() != nil {
				return
			}
			res.passes++
			if err != nil {
				res.mergeErrs++
				s.warn(fmt.Sprintf("%s: merge pass: %v", table, err))
			}
			res.merged += r.Rows
			if err != nil || r.Version == 0 {
				select {
				case <-mctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	})
	var pwg sync.WaitGroup
	var pmu sync.Mutex
	pwg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-mctx.Done():
				return
			case <-t.C:
			}
			key := fmt.Sprintf("partitions/sustain-%s-%06d", table, i)
			d, err := s.rawPut(mctx, key, payload(key, size))
			if err == nil {
				pmu.Lock()
				res.rawPut.add(0, d)
				pmu.Unlock()
			}
		}
	})
	before := c.writerOps()
	st, stop := c.write(table+"-", size, rate/float64(writers), conc)
	start := time.Now()
	t := time.NewTicker(tick)
	for time.Since(start) < dur && ctx.Err() == nil {
		<-t.C
		stt, err := c.rt.Status(ctx)
		if err != nil {
			res.statusErrs++
			continue
		}
		p := pendingPoint{at: time.Since(start), gens: int64(len(stt.Pending)), rows: stt.PendingRows, version: stt.Version}
		per := map[string]int{}
		for _, g := range stt.Pending {
			per[g.Shard]++
		}
		for _, n := range per {
			p.maxPart = max(p.maxPart, n)
		}
		res.points = append(res.points, p)
		if len(res.points)%max(1, int(30*time.Second/tick)) == 0 {
			logf("partitions sustain %d writers: t=%v pending %d generations (max %d in a partition), %d rows; base v%d",
				writers, p.at.Round(time.Second), p.gens, p.maxPart, p.rows, p.version)
		}
	}
	t.Stop()
	stop()
	res.dur = time.Since(start)
	stopMerge()
	mwg.Wait()
	pwg.Wait()
	res.w = st
	res.writerOps = snap{ops: c.writerOps()}.sub(snap{ops: before}).ops
	if st.errs > 0 {
		s.warn(fmt.Sprintf("%s: %d appends failed: %v", table, st.errs, st.errSample))
	}
	// A sample of the acknowledged rows, read back byte for byte.
	ids := st.ids
	s.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	buf := make([]byte, size+1)
	for _, id := range ids[:min(len(ids), verify)] {
		res.checked++
		p, err := c.rt.OpenPayload(ctx, id, 0, -1, engine.ReadOptions{})
		if err != nil {
			return res, fmt.Errorf("%s: acknowledged row %s: %w", table, id, err)
		}
		n, rerr := io.ReadFull(p, buf)
		p.Close()
		if rerr != io.ErrUnexpectedEOF || n != size || !bytes.Equal(buf[:n], payload(id, size)) {
			return res, fmt.Errorf("%s: acknowledged row %s: read %d bytes (%v), not what was written", table, id, n, rerr)
		}
		res.verified++
	}
	logf("partitions sustain %d writers: %v, offered %d rows, %d acknowledged (%d forwarded), %d refused for back-pressure, %d failed; %d merge passes; %d of %d sampled rows read back",
		writers, res.dur.Round(time.Second), st.offered, st.acked, st.forwarded, st.bp, st.errs, res.passes, res.verified, res.checked)
	return res, nil
}

// ---- The phase. ----

type partResult struct {
	model    latency.Config
	grid     []*partCell
	az       []*partCell
	fwd      []*partFwd
	sustains []*partSustain
	load0    string
	load1    string
	dur      time.Duration
}

// runPartitions runs the phase: the model's parts always, Azurite's when
// the run has Azurite.
func runPartitions(ctx context.Context, e *env) (*partResult, error) {
	o := e.opts
	res := &partResult{load0: loadavg()}
	start := time.Now()
	defer func() { res.dur, res.load1 = time.Since(start), loadavg() }()
	ms, err := newModelSide(o, e.warn)
	if err != nil {
		return nil, err
	}
	res.model = ms.model.Config()
	if err := ms.setupRaw(ctx); err != nil {
		return nil, err
	}
	for _, w := range o.partWriters {
		for _, p := range o.partCounts {
			cell, err := ms.measureCell(ctx, fmt.Sprintf("pgrid-%d-%d", w, p), w, p, o.partSamples, o.partSpread, o.activeInterval)
			if err != nil {
				return res, err
			}
			res.grid = append(res.grid, cell)
		}
	}
	if e.lat == nil {
		as := newAzuriteSide(e)
		if err := as.setupRaw(ctx); err != nil {
			return res, err
		}
		for _, w := range o.partAzWriters {
			cell, err := as.measureCell(ctx, fmt.Sprintf("paz-%d", w), w, engine.DefaultPartitions, o.partSamples, o.partSpread, o.activeInterval)
			if err != nil {
				return res, err
			}
			res.az = append(res.az, cell)
		}
		f, err := as.measureForward(ctx, "pfwd-az", o.partFwdSize, o.partFwdSamples)
		if err != nil {
			return res, err
		}
		res.fwd = append(res.fwd, f)
	}
	f, err := ms.measureForward(ctx, "pfwd-model", o.partFwdSize, o.partFwdSamples)
	if err != nil {
		return res, err
	}
	res.fwd = append(res.fwd, f)
	for _, w := range o.partSustainWriters {
		su, err := ms.sustain(ctx, fmt.Sprintf("psustain-%d", w), w, o.partSustainRate, o.partSustainSize, o.sustainConc, o.partSustainDur, o.partTick, o.sustainVerify)
		if su != nil {
			res.sustains = append(res.sustains, su)
		}
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// verify lists what fails the run: read errors, and rows acknowledged
// but not read back.
func (p *partResult) verify() []string {
	var out []string
	for _, c := range append(append([]*partCell(nil), p.grid...), p.az...) {
		for _, e := range c.ph.errs {
			out = append(out, fmt.Sprintf("partitions %s %d×%d: %s", c.side, c.writers, c.partitions, e))
		}
	}
	for _, f := range p.fwd {
		for _, e := range f.ph.errs {
			out = append(out, fmt.Sprintf("partitions %s forwarding: %s", f.side, e))
		}
	}
	for _, s := range p.sustains {
		if s.verified != s.checked {
			out = append(out, fmt.Sprintf("partitions sustained writes, %d writers: %d of %d acknowledged rows read back", s.writers, s.verified, s.checked))
		}
	}
	return out
}

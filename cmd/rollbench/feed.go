package main

// The feed phase: what the change feed costs a consumer, against the raw
// store in the same run.
//
//  1. Freshness: rows appended one at a time, spaced; a consumer long-polls
//     (Feed with Wait, always from its last cursor) and the time from the
//     append's start to the row's delivery is set against a raw PUT of the
//     same bytes followed by a raw GET of them. The consumer runs in the
//     owner's process (woken by the commit) and in another process (woken
//     by its probe loop, at the default FeedPollInterval and at a short one).
//  2. Throughput with payloads: a consumer reads a table of -feed-rows rows
//     from the start, payloads carried, against raw GETs of as many blobs of
//     the same size at the feed's fetch concurrency.
//  3. Throughput without payloads, against Table.Scan of the same rows.
//  4. The store requests per second of a process whose 1, 10, 100 …
//     consumers long-poll an idle table.
//  5. Catch-up after the WAL is merged (the merged generations stay for the
//     retention): 2 and 3 again, against the same reads before the merge.
//
// Every engine is one of this process with its own store client (separate
// engine.DBs stand for separate processes): one writer owning every
// partition, a reader per measurement, a merger. Every delivered row is
// checked: each acknowledged row once, offsets dense per partition, a row
// acknowledged before another's append began delivered before it, and the
// payload's bytes. The phase writes its own section of BENCHMARKS.md
// (feedHeading), which other runs keep.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/rollstore/rollstore/engine"
)

// feedOptions are the phase's flags (-feed-*).
type feedOptions struct {
	partitions int
	size       int
	samples    int
	spacing    time.Duration
	fastPoll   time.Duration
	rows       int
	genRows    int
	conc       int
	rounds     int
	consumers  intList
	idleWait   time.Duration
	idleWindow time.Duration
}

// The bounds of one feed answer the consumers ask for.
const (
	feedMaxBytes  = 16 << 20
	feedRetention = 7 * 24 * time.Hour
	// feedLongPoll is the freshness consumers' Wait: far longer than any
	// delivery, so every answer but the last comes with rows.
	feedLongPoll = 10 * time.Second
)

func (f *feedOptions) register(fs *flag.FlagSet) {
	fs.IntVar(&f.partitions, "feed-partitions", 4, "feed phase: partitions of the tables")
	fs.IntVar(&f.size, "feed-size", 53<<10, "feed phase: payload bytes of every row (inline in the WAL)")
	fs.IntVar(&f.samples, "feed-samples", 200, "feed phase: rows appended one at a time per freshness case (and raw PUT+GETs)")
	fs.DurationVar(&f.spacing, "feed-spacing", 50*time.Millisecond, "feed phase: one append (or raw PUT+GET) per this interval in the freshness cases")
	fs.DurationVar(&f.fastPoll, "feed-fast-poll", 25*time.Millisecond, "feed phase: the short FeedPollInterval of the second other-process case")
	fs.IntVar(&f.rows, "feed-rows", 2000, "feed phase: rows of the throughput table (and raw blobs)")
	fs.IntVar(&f.genRows, "feed-gen-rows", 250, "feed phase: the writer flushes (seals a generation per partition) after every this many rows of the throughput table")
	fs.IntVar(&f.conc, "feed-concurrency", 16, "feed phase: concurrent appends of the throughput table, and concurrent raw GETs (the feed's fetch concurrency)")
	fs.IntVar(&f.rounds, "feed-rounds", 3, "feed phase: rounds of whole-table reads before and after the merge (the median round's rows/s counts)")
	f.consumers = intList{1, 10, 100}
	fs.Var(&f.consumers, "feed-consumers", "feed phase: numbers of consumers long-polling an idle table")
	fs.DurationVar(&f.idleWait, "feed-idle-wait", 10*time.Second, "feed phase: the idle consumers' long-poll Wait")
	fs.DurationVar(&f.idleWindow, "feed-idle-window", 20*time.Second, "feed phase: how long the idle consumers' store calls are counted")
}

// quick scales the phase down for -quick.
func (f *feedOptions) quick(def func(string, func())) {
	def("feed-samples", func() { f.samples = 30 })
	def("feed-rows", func() { f.rows = 240 })
	def("feed-gen-rows", func() { f.genRows = 60 })
	def("feed-consumers", func() { f.consumers = intList{1, 10} })
	def("feed-idle-wait", func() { f.idleWait = time.Second })
	def("feed-idle-window", func() { f.idleWindow = 2 * time.Second })
}

func (f *feedOptions) validate() error {
	switch {
	case f.partitions < 1 || f.partitions > engine.MaxPartitions:
		return fmt.Errorf("-feed-partitions: want 1 to %d", engine.MaxPartitions)
	case f.size < 1 || f.samples < 2 || f.rows < 1 || f.genRows < 1 || f.conc < 1 || f.rounds < 1:
		return errors.New("the -feed-* sizes and counts must be positive (-feed-samples at least 2)")
	case f.spacing <= 0 || f.fastPoll <= 0 || f.idleWait <= 0 || f.idleWindow <= 0:
		return errors.New("the -feed-* durations must be positive")
	}
	return nil
}

// feedOnly: the run is the feed phase alone.
func (o *options) feedOnly() bool { return len(o.phases) == 1 && o.phases["feed"] }

// ---- Processes. ----

// feedProc is an engine standing for a process of its own, its store
// calls counted into t.
type feedProc struct {
	name  string
	db    *engine.DB
	t     *tally
	close func() error
}

func (s *pside) openProc(name string, cfg engine.Config) (*feedProc, error) {
	p := &feedProc{name: name, t: newTally()}
	b, closeStore, err := s.open(p.t)
	if err != nil {
		return nil, err
	}
	p.close = closeStore
	cfg.Logger = quietLogger(name)
	cfg.FeedRetention = feedRetention
	if p.db, err = engine.Open(b, cfg); err != nil {
		_ = closeStore()
		return nil, err
	}
	return p, nil
}

// openReader is a reader process polling the heads every poll (0: the
// default) for its waiting consumers.
func (s *pside) openReader(name string, poll time.Duration) (*feedProc, error) {
	cfg := uncachedReaderConfig()
	if poll > 0 {
		cfg.FeedPollInterval = poll
	}
	return s.openProc(name, cfg)
}

func (p *feedProc) shut(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_ = p.db.Close(cctx)
	_ = p.close()
}

// ---- What was written, what was delivered, and the checks. ----

// wrote is when a row's append began and when it was acknowledged.
type wrote struct{ start, ack time.Time }

type writeLog struct {
	mu sync.Mutex
	w  map[string]wrote
}

func (l *writeLog) put(id string, w wrote) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w == nil {
		l.w = map[string]wrote{}
	}
	l.w[id] = w
}

func (l *writeLog) all() map[string]wrote {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.w)
}

// got is a delivered row: where, when, and whether its bytes were right.
type got struct {
	id      string
	part    int
	off     uint64
	at      time.Time
	carried bool
	// bad says what was wrong with the row's payload ("" when nothing).
	bad string
}

// checkRow checks a delivered row's record and, when it carries one, its
// payload.
func checkRow(r *engine.FeedRow, size int, payloads bool) string {
	rec := &r.Record
	switch {
	case rec.PayloadSize != int64(size):
		return fmt.Sprintf("payload size %d, want %d", rec.PayloadSize, size)
	case r.Carried && !payloads:
		return "carries its payload in a read without payloads"
	case r.Carried && !bytes.Equal(rec.Payload, payload(rec.ID, size)):
		return fmt.Sprintf("carried payload of %d bytes differs from what was written", len(rec.Payload))
	}
	return ""
}

// checkDelivery checks rows delivered in this order against what was
// written: every written row exactly once, in its partition, offsets
// dense from from[p] (0 when absent), and no row delivered before one
// whose append was acknowledged before its own began. It returns the
// failures, at most a few of each kind.
func checkDelivery(what string, rows []got, written map[string]wrote, partitions int, from map[int]uint64) []string {
	var out []string
	counts := map[string]int{}
	fail := func(kind, format string, args ...any) {
		counts[kind]++
		if counts[kind] <= 3 {
			out = append(out, what+": "+fmt.Sprintf(format, args...))
		}
	}
	next := maps.Clone(from)
	if next == nil {
		next = map[int]uint64{}
	}
	seen := map[string]bool{}
	latestStart := map[int]time.Time{}
	for _, r := range rows {
		w, ok := written[r.id]
		switch {
		case !ok:
			fail("unknown", "row %s delivered, never written", r.id)
		case seen[r.id]:
			fail("twice", "row %s delivered twice", r.id)
		case engine.PartitionOf(r.id, partitions) != r.part:
			fail("partition", "row %s delivered in partition %d, it is in %d", r.id, r.part, engine.PartitionOf(r.id, partitions))
		}
		if r.off != next[r.part] {
			fail("offset", "partition %d: row %s has offset %d, want %d (offsets dense)", r.part, r.id, r.off, next[r.part])
		}
		next[r.part] = r.off + 1
		if ok && latestStart[r.part].After(w.ack) {
			fail("order", "partition %d: row %s (offset %d) delivered after a row whose append began after it was acknowledged", r.part, r.id, r.off)
		}
		if ok && w.start.After(latestStart[r.part]) {
			latestStart[r.part] = w.start
		}
		if r.bad != "" {
			fail("bytes", "row %s: %s", r.id, r.bad)
		}
		seen[r.id] = true
	}
	for id := range written {
		if !seen[id] {
			fail("missing", "acknowledged row %s never delivered", id)
		}
	}
	for kind, n := range counts {
		if n > 3 {
			out = append(out, fmt.Sprintf("%s: %d more rows failed the %s check", what, n-3, kind))
		}
	}
	return out
}

// cursorTrip passes a cursor through its text form, as a consumer over
// HTTP keeps it.
func cursorTrip(c engine.Cursor) (*engine.Cursor, error) {
	d, err := engine.DecodeCursor(engine.EncodeCursor(c))
	if err != nil {
		return nil, fmt.Errorf("cursor does not survive its text form: %w", err)
	}
	return &d, nil
}

// ---- 1. Freshness. ----

// freshCase is one consumer's freshness: per row, from its append's
// start (e2e) and from its acknowledgement (lag) to its delivery.
type freshCase struct {
	label string
	owner bool          // the consumer runs in the owner's process
	poll  time.Duration // the consumer's process's FeedPollInterval
	e2e   series
	lag   series
	ack   series // the appends themselves
	own   *tally // the consumer's own calls (its Feed calls' contexts)
	// The first read from a cursor (untimed), and its process's calls.
	coldDur time.Duration
	coldOps map[string]int64
	rows    int
	pages   int
	dur     time.Duration
	// ops are the consumer's process's store calls during the case (the
	// owner's are its appends' too).
	ops map[string]int64
}

// freshness appends samples rows one at a time, one per spacing, while a
// consumer of tb long-polls from the table's newest position.
func (fr *feedRun) freshness(ctx context.Context, label string, tb *engine.Table, proc *feedProc, poll time.Duration) (*freshCase, error) {
	f := fr.o
	fc := &freshCase{label: label, owner: proc == fr.writer, poll: poll}
	first, err := tb.Feed(ctx, engine.FeedOptions{Latest: true})
	if err != nil {
		return nil, fmt.Errorf("%s: the first read: %w", label, err)
	}
	if len(first.Rows) != 0 {
		return nil, fmt.Errorf("%s: the first read from the newest position delivered %d rows", label, len(first.Rows))
	}
	from := map[int]uint64{}
	for p, pos := range first.Next.Pos {
		from[p] = pos.Offset
	}
	// A first read from a cursor, untimed: in a fresh process it loads the
	// table's resident snapshot, a one-time cost counted apart.
	cold0, t0 := proc.t.snap(), time.Now()
	page, err := tb.Feed(ctx, engine.FeedOptions{Cursor: &first.Next})
	if err != nil {
		return nil, fmt.Errorf("%s: the first read from a cursor: %w", label, err)
	}
	if len(page.Rows) != 0 {
		return nil, fmt.Errorf("%s: the first read from a cursor delivered %d rows, none appended since", label, len(page.Rows))
	}
	fc.coldDur, fc.coldOps = time.Since(t0), proc.t.snap().sub(cold0).ops
	fc.own = newTally()
	cctx, cancel := context.WithCancel(withTally(ctx, fc.own))
	defer cancel()
	var rows []got
	var cerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		cur, err := cursorTrip(first.Next)
		if err != nil {
			cerr = err
			return
		}
		for len(rows) < f.samples && cctx.Err() == nil {
			page, err := tb.Feed(cctx, engine.FeedOptions{Cursor: cur, Wait: feedLongPoll, MaxBytes: feedMaxBytes, PayloadBytes: feedMaxBytes})
			at := time.Now()
			if err != nil {
				if cctx.Err() == nil {
					cerr = err
				}
				return
			}
			if len(page.Rows) > 0 {
				fc.pages++
			}
			for i := range page.Rows {
				r := &page.Rows[i]
				g := got{id: r.Record.ID, part: r.Partition, off: r.Offset, at: at, carried: r.Carried, bad: checkRow(r, f.size, true)}
				if !r.Carried && g.bad == "" {
					g.bad = "payload not carried, though the page's budget holds every row of this test"
				}
				rows = append(rows, g)
			}
			if cur, err = cursorTrip(page.Next); err != nil {
				cerr = err
				return
			}
		}
	}()
	before := proc.t.snap()
	var log writeLog
	start := time.Now()
	var aerr error
	for i := range f.samples {
		if d := time.Until(start.Add(f.spacing * time.Duration(i))); d > 0 {
			time.Sleep(d)
		}
		id := fmt.Sprintf("%s-%04d", label, i)
		t0 := time.Now()
		_, err := fr.wt.Append(ctx, record(id, i), bytes.NewReader(payload(id, f.size)), int64(f.size))
		if err != nil {
			aerr = fmt.Errorf("%s: append %s: %w", label, id, err)
			break
		}
		log.put(id, wrote{start: t0, ack: time.Now()})
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cancel()
		<-done
	}
	cancel()
	fc.dur = time.Since(start)
	fc.ops = proc.t.snap().sub(before).ops
	if aerr != nil {
		return fc, aerr
	}
	if cerr != nil {
		return fc, fmt.Errorf("%s: consumer: %w", label, cerr)
	}
	written := log.all()
	fr.fail(checkDelivery("freshness "+label, rows, written, f.partitions, from)...)
	for _, r := range rows {
		if w, ok := written[r.id]; ok {
			fc.e2e.add(0, r.at.Sub(w.start))
			fc.lag.add(0, r.at.Sub(w.ack))
			fc.ack.add(0, w.ack.Sub(w.start))
		}
	}
	fc.rows = len(rows)
	e, raw := fc.e2e.summary(), fr.res.baseline.summary()
	logf("feed freshness %-28s %d rows in %d pages: append→delivered p50 %.1f ms (%s) p99 %.1f ms (%s); ack→delivered p50 %.1f ms; %.1f store calls/s",
		label, fc.rows, fc.pages, ms(e.p50), dratio(e.p50, raw.p50), ms(e.p99), dratio(e.p99, raw.p99), ms(fc.lag.summary().p50),
		float64(total(fc.ops))/fc.dur.Seconds())
	return fc, nil
}

// relay does in-process what a service does over HTTP for the feed
// readers waiting in it: it hands the partitions they wait on to the
// owner's engine (AwaitFeed there, which learns of its commits at once)
// and, when the owner answers that rows were acknowledged, probes those
// partitions (ProbeFeed), which wakes the readers before their process's
// next probe.
func (fr *feedRun) relay(ctx context.Context, tb *engine.Table) {
	for ctx.Err() == nil {
		waiting := tb.FeedWatch()
		if len(waiting) == 0 {
			sleepCtx(ctx, time.Millisecond)
			continue
		}
		known, err := fr.wt.AwaitFeed(ctx, waiting, feedLongPoll)
		if err != nil {
			if ctx.Err() == nil {
				fr.side.warn(fmt.Sprintf("feed relay: AwaitFeed: %v", err))
				sleepCtx(ctx, 100*time.Millisecond)
			}
			continue
		}
		var moved []int
		for p, n := range known {
			if n > waiting[p] {
				moved = append(moved, p)
			}
		}
		if len(moved) > 0 {
			if err := tb.ProbeFeed(ctx, moved); err != nil && ctx.Err() == nil {
				fr.side.warn(fmt.Sprintf("feed relay: ProbeFeed: %v", err))
			}
		}
	}
}

// rawPutGet is the freshness baseline: n raw PUTs of the payload's bytes,
// each followed by a raw GET of them, one per spacing; each sample is the
// time of both.
func (fr *feedRun) rawPutGet(ctx context.Context, tag string, n int) error {
	s, f := fr.side, fr.o
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(f.spacing * time.Duration(i))); d > 0 {
			time.Sleep(d)
		}
		key := fmt.Sprintf("feed/fresh-%s-%04d", tag, i)
		data := payload(key, f.size)
		t0 := time.Now()
		if err := s.raw.upload(ctx, key, data); err != nil {
			return fmt.Errorf("raw PUT %s: %w", key, err)
		}
		rc, err := s.raw.open(ctx, key)
		if err != nil {
			return fmt.Errorf("raw GET %s: %w", key, err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		d := time.Since(t0)
		if err != nil || !bytes.Equal(b, data) {
			return fmt.Errorf("raw GET %s: %d bytes (%v), want the %d written", key, len(b), err, len(data))
		}
		fr.res.baseline.add(0, d)
	}
	return nil
}

// ---- 2, 3 and 5. Reading a whole table. ----

// Kinds of whole-table reads.
const (
	kFeedPayload = "feed, payloads"
	kFeedMeta    = "feed, metadata only"
	kScan        = "Table.Scan, no payloads"
	kRawGets     = "raw GETs"
)

var thrKinds = []string{kRawGets, kFeedPayload, kFeedMeta, kScan}

// thrRead is one kind of whole-table read, its rounds summed.
type thrRead struct {
	rows, reads int
	dur         time.Duration
	bytes       int64
	pages       int
	uncarried   int // rows a page delivered without their payload (then fetched by id)
	ops         map[string]int64
	storeBytes  int64     // response bytes the reader's store calls read (Azurite only)
	rates       []float64 // each round's rows/s
}

// rowsPerSec is the median of the rounds' rows/s: Azurite pauses now and
// then for a second or more, and one pause should not decide a ratio.
func (t *thrRead) rowsPerSec() float64 {
	switch {
	case t == nil || t.dur <= 0:
		return 0
	case len(t.rates) > 0:
		return median(t.rates)
	}
	return float64(t.rows) / t.dur.Seconds()
}

// thrSet is the reads of the table at one moment (before or after the
// merge).
type thrSet struct {
	when  string
	reads map[string]*thrRead
}

func (s *thrSet) add(kind string, r *thrRead) {
	t := s.reads[kind]
	if t == nil {
		t = &thrRead{ops: map[string]int64{}}
		s.reads[kind] = t
	}
	t.rows += r.rows
	t.reads++
	t.dur += r.dur
	t.bytes += r.bytes
	t.pages += r.pages
	t.uncarried += r.uncarried
	t.storeBytes += r.storeBytes
	t.rates = append(t.rates, r.rowsPerSec())
	for k, v := range r.ops {
		t.ops[k] += v
	}
}

// readFeedAll reads the whole feed of table from the start in a fresh
// reader process, as a catching-up consumer: pages of up to
// feedMaxBytes, with payloads carried (payloads) or not; a row a page
// delivers without its payload is fetched by id, conc at a time. Only the
// reads are timed, not the checks.
func (fr *feedRun) readFeedAll(ctx context.Context, what string, payloads bool) (*thrRead, []got, error) {
	f := fr.o
	proc, err := fr.side.openReader("feed-catchup", 0)
	if err != nil {
		return nil, nil, err
	}
	defer proc.shut(ctx)
	tb, err := proc.db.Table(ctx, fr.thrTable)
	if err != nil {
		return nil, nil, err
	}
	res := &thrRead{}
	var rows []got
	var pb int64
	if payloads {
		pb = feedMaxBytes
	}
	before := proc.t.snap()
	var cur *engine.Cursor
	for {
		start := time.Now()
		page, err := tb.Feed(ctx, engine.FeedOptions{Cursor: cur, MaxBytes: feedMaxBytes, PayloadBytes: pb})
		if err != nil {
			return res, rows, fmt.Errorf("%s: feed read after %d rows: %w", what, len(rows), err)
		}
		var fetch []int
		for i := range page.Rows {
			if payloads && !page.Rows[i].Carried {
				fetch = append(fetch, i)
			}
		}
		fetched := make([][]byte, len(fetch))
		if _, err := runPool(ctx, len(fetch), f.conc, func(ctx context.Context, i int) error {
			p, err := tb.OpenPayload(ctx, page.Rows[fetch[i]].Record.ID, 0, -1, engine.ReadOptions{})
			if err != nil {
				return err
			}
			defer p.Close()
			fetched[i], err = io.ReadAll(p)
			return err
		}); err != nil {
			return res, rows, fmt.Errorf("%s: fetching a payload not carried: %w", what, err)
		}
		res.dur += time.Since(start)
		if len(page.Rows) == 0 {
			break
		}
		res.pages++
		res.uncarried += len(fetch)
		for i := range page.Rows {
			r := &page.Rows[i]
			g := got{id: r.Record.ID, part: r.Partition, off: r.Offset, carried: r.Carried, bad: checkRow(r, f.size, payloads)}
			if r.Carried {
				res.bytes += int64(len(r.Record.Payload))
			}
			rows = append(rows, g)
		}
		for i, j := range fetch {
			if !bytes.Equal(fetched[i], payload(page.Rows[j].Record.ID, f.size)) && rows[len(rows)-len(page.Rows)+j].bad == "" {
				rows[len(rows)-len(page.Rows)+j].bad = fmt.Sprintf("payload fetched by id: %d bytes, not what was written", len(fetched[i]))
			}
			res.bytes += int64(len(fetched[i]))
		}
		if cur, err = cursorTrip(page.Next); err != nil {
			return res, rows, err
		}
	}
	res.rows = len(rows)
	d := proc.t.snap().sub(before)
	res.ops, res.storeBytes = d.ops, d.bytes
	return res, rows, nil
}

// scanAll scans the table without payloads in a fresh reader process,
// decoding the Arrow stream as a client does.
func (fr *feedRun) scanAll(ctx context.Context) (*thrRead, []string, error) {
	proc, err := fr.side.openReader("feed-scan", 0)
	if err != nil {
		return nil, nil, err
	}
	defer proc.shut(ctx)
	tb, err := proc.db.Table(ctx, fr.thrTable)
	if err != nil {
		return nil, nil, err
	}
	before := proc.t.snap()
	pr, pw := io.Pipe()
	var serr error
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		serr = tb.Scan(ctx, pw, engine.ScanOptions{})
		pw.CloseWithError(serr)
	}()
	ids, rerr := scanIDs(pr, fr.o.size)
	pr.CloseWithError(errors.New("the scan's reader stopped"))
	<-done
	d := time.Since(start)
	if err := errors.Join(serr, rerr); err != nil {
		return nil, nil, fmt.Errorf("scan: %w", err)
	}
	sn := proc.t.snap().sub(before)
	return &thrRead{rows: len(ids), dur: d, ops: sn.ops, storeBytes: sn.bytes}, ids, nil
}

// scanIDs decodes a scan's Arrow stream as a client does, checking every
// row's payload size, and returns the ids.
func scanIDs(r io.Reader, size int) ([]string, error) {
	rd, err := ipc.NewReader(r)
	if err != nil {
		return nil, err
	}
	defer rd.Release()
	sc := rd.Schema()
	idCol, sizeCol := sc.FieldIndices("id"), sc.FieldIndices("payload_size")
	if len(idCol) != 1 || len(sizeCol) != 1 {
		return nil, fmt.Errorf("the stream's schema lacks id or payload_size: %s", sc)
	}
	var ids []string
	for rd.Next() {
		b := rd.RecordBatch()
		idArr, ok1 := b.Column(idCol[0]).(*array.String)
		sizes, ok2 := b.Column(sizeCol[0]).(*array.Int64)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("columns id and payload_size are %s and %s", b.Column(idCol[0]).DataType(), b.Column(sizeCol[0]).DataType())
		}
		for i := range int(b.NumRows()) {
			if sizes.Value(i) != int64(size) {
				return nil, fmt.Errorf("row %s: payload size %d, want %d", idArr.Value(i), sizes.Value(i), size)
			}
			ids = append(ids, idArr.Value(i))
		}
	}
	return ids, rd.Err()
}

// rawGetAll reads every raw blob, conc at a time; the bytes are checked
// after the clock stops.
func (fr *feedRun) rawGetAll(ctx context.Context) (*thrRead, error) {
	names := fr.rawNames
	bufs := make([][]byte, len(names))
	d, err := runPool(ctx, len(names), fr.o.conc, func(ctx context.Context, i int) error {
		rc, err := fr.side.raw.open(ctx, names[i])
		if err != nil {
			return fmt.Errorf("raw GET %s: %w", names[i], err)
		}
		defer rc.Close()
		bufs[i], err = io.ReadAll(rc)
		return err
	})
	if err != nil {
		return nil, err
	}
	res := &thrRead{rows: len(names), dur: d}
	for i, b := range bufs {
		if !bytes.Equal(b, payload(names[i], fr.o.size)) {
			return nil, fmt.Errorf("raw GET %s: %d bytes, not what was written", names[i], len(b))
		}
		res.bytes += int64(len(b))
	}
	return res, nil
}

// readRounds reads the table every way, in rounds in alternating orders
// so a drift of the machine's load falls on all kinds alike, after an
// untimed pass of raw GETs (the first reads after heavy writes or a merge
// meet Azurite's own pauses).
func (fr *feedRun) readRounds(ctx context.Context, when string) (*thrSet, error) {
	set := &thrSet{when: when, reads: map[string]*thrRead{}}
	written := fr.thrLog.all()
	if _, err := fr.rawGetAll(ctx); err != nil {
		return set, err
	}
	order := slices.Clone(thrKinds)
	for round := range fr.o.rounds {
		for _, k := range order {
			what := fmt.Sprintf("%s %s, round %d", when, k, round+1)
			var r *thrRead
			var err error
			switch k {
			case kRawGets:
				r, err = fr.rawGetAll(ctx)
			case kFeedPayload, kFeedMeta:
				var rows []got
				r, rows, err = fr.readFeedAll(ctx, what, k == kFeedPayload)
				if err == nil {
					fr.fail(checkDelivery(what, rows, written, fr.o.partitions, nil)...)
				}
				if errors.Is(err, engine.ErrCursorExpired) {
					fr.res.expired++
				}
			case kScan:
				var ids []string
				r, ids, err = fr.scanAll(ctx)
				if err == nil {
					fr.fail(checkScan(what, ids, written)...)
				}
			}
			if err != nil {
				return set, fmt.Errorf("%s: %w", what, err)
			}
			set.add(k, r)
			logf("feed %-14s %-22s round %d: %d rows in %v, %.0f rows/s", when, k, round+1, r.rows, r.dur.Round(time.Millisecond), r.rowsPerSec())
		}
		slices.Reverse(order)
	}
	return set, nil
}

// checkScan checks a scan holds every written row once.
func checkScan(what string, ids []string, written map[string]wrote) []string {
	seen := make(map[string]bool, len(ids))
	var out []string
	for _, id := range ids {
		if _, ok := written[id]; !ok || seen[id] {
			out = append(out, fmt.Sprintf("%s: row %s unexpected or repeated", what, id))
		}
		seen[id] = true
	}
	if len(seen) != len(written) {
		out = append(out, fmt.Sprintf("%s: %d distinct rows, %d written", what, len(seen), len(written)))
	}
	return out[:min(len(out), 5)]
}

// writeThroughput appends the throughput table's rows, conc at a time,
// the writer flushing after every genRows rows, and uploads as many raw
// blobs of the same size.
func (fr *feedRun) writeThroughput(ctx context.Context) error {
	f := fr.o
	for lo := 0; lo < f.rows; lo += f.genRows {
		n := min(f.genRows, f.rows-lo)
		if _, err := runPool(ctx, n, f.conc, func(ctx context.Context, i int) error {
			id := fmt.Sprintf("thr-%06d", lo+i)
			t0 := time.Now()
			_, err := fr.tt.Append(ctx, record(id, lo+i), bytes.NewReader(payload(id, f.size)), int64(f.size))
			if err != nil {
				return fmt.Errorf("append %s: %w", id, err)
			}
			fr.thrLog.put(id, wrote{start: t0, ack: time.Now()})
			return nil
		}); err != nil {
			return err
		}
		if err := fr.tt.Flush(ctx); err != nil {
			return fmt.Errorf("flush: %w", err)
		}
	}
	fr.rawNames = make([]string, f.rows)
	for i := range fr.rawNames {
		fr.rawNames[i] = fmt.Sprintf("feed/raw-%06d", i)
	}
	_, err := runPool(ctx, f.rows, f.conc, func(ctx context.Context, i int) error {
		return fr.side.raw.upload(ctx, fr.rawNames[i], payload(fr.rawNames[i], f.size))
	})
	return err
}

// feedMerge is the merge of the throughput table.
type feedMerge struct {
	passes    int
	rows      int64
	gens      int
	reclaimed int
	pending   int // generations still pending after it
	dur       time.Duration
}

// mergeAll merges every sealed generation of the throughput table in a
// merger process of its own, with no reclaim grace: only the feed's
// retention keeps the merged generations.
func (fr *feedRun) mergeAll(ctx context.Context) (*feedMerge, error) {
	cfg := engine.DefaultConfig()
	cfg.ReclaimGrace = 0
	proc, err := fr.side.openProc("feed-merger", cfg)
	if err != nil {
		return nil, err
	}
	defer proc.shut(ctx)
	mt, err := proc.db.Table(ctx, fr.thrTable)
	if err != nil {
		return nil, err
	}
	m := &feedMerge{}
	start := time.Now()
	for m.passes < 1000 {
		r, err := mt.Merge(ctx, engine.MergeOptions{})
		if err != nil {
			return m, fmt.Errorf("merge pass %d: %w", m.passes+1, err)
		}
		m.passes++
		m.rows += r.Rows
		m.gens += len(r.Merged)
		m.reclaimed += len(r.Reclaimed)
		if r.Version == 0 && !r.Leftover {
			break
		}
	}
	m.dur = time.Since(start)
	st, err := mt.Status(ctx)
	if err != nil {
		return m, err
	}
	m.pending = len(st.Pending)
	logf("feed merge: %d passes, %d generations (%d rows) merged in %v, %d reclaimed, %d pending",
		m.passes, m.gens, m.rows, m.dur.Round(time.Millisecond), m.reclaimed, m.pending)
	return m, nil
}

// ---- 4. Idle long-polls. ----

// feedIdle is the store calls of one process whose consumers long-poll an
// idle table.
type feedIdle struct {
	consumers int
	poll      time.Duration
	window    time.Duration
	ops       map[string]int64
	answers   int64 // Feed answers (empty at their deadline) in the window
	probes    int64 // engine Stats.FeedProbes in the window
	delivered int64
}

func (i *feedIdle) perSec() float64 { return float64(total(i.ops)) / i.window.Seconds() }

// idle starts n consumers of the idle table in a fresh reader process,
// their first reads spread over one Wait, and counts the process's store
// calls over the window once all wait.
func (fr *feedRun) idle(ctx context.Context, n int, poll time.Duration) (*feedIdle, error) {
	f := fr.o
	proc, err := fr.side.openReader(fmt.Sprintf("feed-idle-%d", n), poll)
	if err != nil {
		return nil, err
	}
	defer proc.shut(ctx)
	tb, err := proc.db.Table(ctx, fr.freshTable)
	if err != nil {
		return nil, err
	}
	res := &feedIdle{consumers: n, poll: proc.db.Config().FeedPollInterval}
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var answers, delivered atomic.Int64
	var mu sync.Mutex
	var cerr error
	for k := range n {
		wg.Go(func() {
			select {
			case <-cctx.Done():
				return
			case <-time.After(f.idleWait * time.Duration(k) / time.Duration(n)):
			}
			page, err := tb.Feed(cctx, engine.FeedOptions{Latest: true})
			for err == nil {
				answers.Add(1)
				delivered.Add(int64(len(page.Rows)))
				var cur *engine.Cursor
				if cur, err = cursorTrip(page.Next); err != nil {
					break
				}
				page, err = tb.Feed(cctx, engine.FeedOptions{Cursor: cur, Wait: f.idleWait})
			}
			if cctx.Err() == nil {
				mu.Lock()
				cerr = err
				mu.Unlock()
			}
		})
	}
	sleepCtx(ctx, f.idleWait+f.idleWait/4)
	before, a0, p0 := proc.t.snap(), answers.Load(), proc.db.Stats().FeedProbes.Load()
	start := time.Now()
	sleepCtx(ctx, f.idleWindow)
	res.window = time.Since(start)
	res.ops = proc.t.snap().sub(before).ops
	res.answers, res.probes = answers.Load()-a0, proc.db.Stats().FeedProbes.Load()-p0
	cancel()
	wg.Wait()
	res.delivered = delivered.Load()
	if cerr != nil {
		return res, fmt.Errorf("%d consumers: %w", n, cerr)
	}
	if res.delivered > 0 {
		fr.fail(fmt.Sprintf("idle table, %d consumers: %d rows delivered, none appended", n, res.delivered))
	}
	logf("feed idle: %3d consumers, poll %v: %.1f store calls/s (%s per s), %d answers in %v",
		n, res.poll, res.perSec(), perUnit(res.ops, int(res.window.Round(time.Second)/time.Second)), res.answers, res.window.Round(time.Millisecond))
	return res, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// ---- The phase. ----

type feedResult struct {
	side     string
	o        feedOptions
	baseline series // raw PUT + raw GET
	fresh    []*freshCase
	sets     []*thrSet // before the merge, after it
	merge    *feedMerge
	idles    []*feedIdle
	expired  int
	problems []string
	load0    string
	load1    string
	dur      time.Duration
}

// feedRun is the phase's state while it runs.
type feedRun struct {
	side   *pside
	o      feedOptions
	res    *feedResult
	writer *feedProc
	// The freshness (then idle) table and the throughput table, as the
	// writer sees them.
	freshTable, thrTable string
	wt, tt               *engine.Table
	thrLog               writeLog
	rawNames             []string
	mu                   sync.Mutex
}

func (fr *feedRun) fail(problems ...string) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	for _, p := range problems {
		logf("PROBLEM: %s", p)
	}
	fr.res.problems = append(fr.res.problems, problems...)
}

// createTable creates a partitioned table and has the writer take every
// partition before anything is measured.
func (fr *feedRun) createTable(ctx context.Context, name string) (*engine.Table, error) {
	if err := fr.writer.db.CreateTableWith(ctx, name, engine.TableOptions{Partitions: fr.o.partitions}); err != nil {
		return nil, err
	}
	tb, err := fr.writer.db.Table(ctx, name)
	if err != nil {
		return nil, err
	}
	for p := range fr.o.partitions {
		id := fmt.Sprintf("%s-take-%d", name, p)
		for i := 0; engine.PartitionOf(id, fr.o.partitions) != p; i++ {
			id = fmt.Sprintf("%s-take-%d-%d", name, p, i)
		}
		o, err := tb.Owner(ctx, id)
		if err != nil {
			return nil, err
		}
		if !o.Self {
			return nil, fmt.Errorf("%s: partition %d is owned by %q, not the lone writer", name, p, o.Writer)
		}
	}
	return tb, nil
}

// runFeed runs the phase on side s.
func runFeed(ctx context.Context, s *pside, o *options) (*feedResult, error) {
	f := o.feed
	res := &feedResult{side: s.name, o: f, load0: loadavg()}
	start := time.Now()
	defer func() { res.dur, res.load1 = time.Since(start), loadavg() }()
	fr := &feedRun{side: s, o: f, res: res, freshTable: "feed-fresh", thrTable: "feed-throughput"}
	wcfg := engine.DefaultConfig()
	wcfg.Shard = "feed-writer"
	var err error
	if fr.writer, err = s.openProc("feed-writer", wcfg); err != nil {
		return res, err
	}
	defer fr.writer.shut(ctx)
	if fr.wt, err = fr.createTable(ctx, fr.freshTable); err != nil {
		return res, err
	}
	if fr.tt, err = fr.createTable(ctx, fr.thrTable); err != nil {
		return res, err
	}
	// A first row per partition, untimed: the partitions' heads exist and
	// the connections are warm.
	for p := range f.partitions {
		id := fmt.Sprintf("warm-%d", p)
		for i := 0; engine.PartitionOf(id, f.partitions) != p; i++ {
			id = fmt.Sprintf("warm-%d-%d", p, i)
		}
		if _, err := fr.wt.Append(ctx, record(id, p), bytes.NewReader(payload(id, f.size)), int64(f.size)); err != nil {
			return res, err
		}
	}

	// 1. Freshness: half the baseline before the cases, half after, after
	// a few untimed ones (the raw side's connections warm too).
	if err := fr.rawPutGet(ctx, "warm", 5); err != nil {
		return res, err
	}
	res.baseline = series{}
	if err := fr.rawPutGet(ctx, "a", f.samples/2); err != nil {
		return res, err
	}
	other := func(poll time.Duration, relay bool) (*freshCase, error) {
		proc, err := s.openReader(fmt.Sprintf("feed-reader-%v", poll), poll)
		if err != nil {
			return nil, err
		}
		defer proc.shut(ctx)
		tb, err := proc.db.Table(ctx, fr.freshTable)
		if err != nil {
			return nil, err
		}
		label := fmt.Sprintf("another process, poll %v", poll)
		if relay {
			label = fmt.Sprintf("another process, relayed to the owner, poll %v", poll)
			rctx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Go(func() { fr.relay(rctx, tb) })
			defer func() { stop(); wg.Wait() }()
		}
		return fr.freshness(ctx, label, tb, proc, poll)
	}
	defPoll := engine.DefaultConfig().FeedPollInterval
	cases := []func() (*freshCase, error){
		func() (*freshCase, error) {
			return fr.freshness(ctx, "the owner's process", fr.wt, fr.writer, fr.writer.db.Config().FeedPollInterval)
		},
		func() (*freshCase, error) { return other(defPoll, false) },
		func() (*freshCase, error) { return other(f.fastPoll, false) },
		func() (*freshCase, error) { return other(defPoll, true) },
	}
	for _, c := range cases {
		fc, err := c()
		if fc != nil {
			res.fresh = append(res.fresh, fc)
		}
		if err != nil {
			return res, err
		}
	}
	if err := fr.rawPutGet(ctx, "b", f.samples-f.samples/2); err != nil {
		return res, err
	}
	raw := res.baseline.summary()
	logf("feed freshness baseline: raw PUT + GET of %d B p50 %.1f ms p99 %.1f ms", f.size, ms(raw.p50), ms(raw.p99))

	// 4. Idle long-polls on the freshness table, idle from now on.
	for _, n := range f.consumers {
		fi, err := fr.idle(ctx, n, 0)
		if fi != nil {
			res.idles = append(res.idles, fi)
		}
		if err != nil {
			return res, err
		}
	}
	fi, err := fr.idle(ctx, 1, f.fastPoll)
	if fi != nil {
		res.idles = append(res.idles, fi)
	}
	if err != nil {
		return res, err
	}

	// 2 and 3, then 5.
	logf("feed: writing %d rows of %d B, %d at a time, a flush every %d", f.rows, f.size, f.conc, f.genRows)
	if err := fr.writeThroughput(ctx); err != nil {
		return res, err
	}
	set, err := fr.readRounds(ctx, "before merge")
	res.sets = append(res.sets, set)
	if err != nil {
		return res, err
	}
	if res.merge, err = fr.mergeAll(ctx); err != nil {
		return res, err
	}
	if res.merge.pending > 0 {
		fr.fail(fmt.Sprintf("merge: %d generations still pending after merging until nothing was left", res.merge.pending))
	}
	set, err = fr.readRounds(ctx, "after merge")
	res.sets = append(res.sets, set)
	return res, err
}

// verify lists what fails the run.
func (r *feedResult) verify() []string {
	out := slices.Clone(r.problems)
	if r.expired > 0 {
		out = append(out, fmt.Sprintf("feed: %d reads answered cursor expired within the retention", r.expired))
	}
	return out
}

package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollstore/rollstore/engine"
)

// The scaling tables: lookup cost against the backlog of pending WAL
// segments (one writer shard, 10 … 5,000 segments of one row each) and
// against the number of writer shards (1 … 16, the same total backlog).
// Writers are child processes with distinct shards and no merger; the
// reader is this process. Each level is measured twice:
//
//   - writers idle: every writer has been idle for longer than its
//     IdleAfter and has left the registry's active set, so a refresh
//     probes only the registry;
//   - writers active: every writer appends one row per -active-interval
//     during the measurement, so each refresh also probes every active
//     shard's head (one HEAD each, in parallel; a head carries the layout
//     of the segment it counts last) and reads the layouts of any other
//     new segments. The rows they acknowledge are read at once by
//     this process ("just acknowledged elsewhere").

// A scaleSpec is one scaling table: what varies from level to level, and
// the levels. Each level is a table state (so many writers, so many
// pending segments) that the reader is measured against twice, with the
// writers idle and then active. Levels naming the same table build on each
// other's backlog; a level naming a new table starts it afresh (a base of
// -scale-base-rows rows, then its backlog).
//
// A new dimension (the number of partitions a table hashes its ids into,
// say) is a new entry in dims, the level's value in coords, and what the
// table needs to get it at its creation (newScaleTable).
type scaleSpec struct {
	name string // "backlog", "shards": the phase's and the log's name
	num  int    // the report's section number
	// dims name what a level sets, one report column each, and coords
	// (of each level) give its values, in the same order.
	dims []string
	// unit is what the levels count, in running text ("pending
	// segments"), short its short form in the goal table ("shards");
	// label the table's name in a sentence ("Backlog").
	unit, short, label string
	// what the goal table says the flatness is against.
	what       string
	writerName func(i int) string
	levels     []scaleLevel
}

// A scaleLevel is one level of a scaling table.
type scaleLevel struct {
	coords []int
	// writers append to the level's table, each its own shard; segments
	// is how many one-row segments the table holds at the level, split
	// evenly over them.
	writers, segments int
	table             string
}

// label names the level in tables and logs: its coordinates, "16" or
// "16 × 64".
func (l scaleLevel) label() string {
	parts := make([]string, len(l.coords))
	for i, c := range l.coords {
		parts[i] = fmt.Sprint(c)
	}
	return strings.Join(parts, " × ")
}

// scaleSpecs are the scaling tables of a run, in the report's order.
func scaleSpecs(o *options) []*scaleSpec {
	backlog := &scaleSpec{name: "backlog", num: 7, dims: []string{"pending segments"}, unit: "pending segments",
		short: "pending segments", label: "Backlog",
		what: "the backlog", writerName: func(i int) string { return fmt.Sprintf("bl-%d", i) }}
	for _, n := range o.backlog {
		backlog.levels = append(backlog.levels, scaleLevel{coords: []int{n}, writers: 1, segments: n, table: "backlog"})
	}
	shards := &scaleSpec{name: "shards", num: 8, dims: []string{"writer shards"}, unit: "writer shards",
		short: "shards", label: "Shards",
		what: "the number of writer shards", writerName: func(i int) string { return fmt.Sprintf("sh-%02d", i) }}
	for _, n := range o.shardCounts {
		shards.levels = append(shards.levels, scaleLevel{coords: []int{n}, writers: n, segments: o.shardSegments / n * n,
			table: fmt.Sprintf("shards-%d", n)})
	}
	return []*scaleSpec{backlog, shards}
}

type scaleRow struct {
	label  string
	coords []int
	shards int // writers
	active bool
	// Pending WAL of the table before and after the measurement.
	segs, gens           int
	segsAfter, gensAfter int
	phase                *readPhase
	// The first refresh after the build (idle rows): what catching up
	// with the new segments cost the reader, once.
	catchup    time.Duration
	catchupOps map[string]int64
	// The build that reached this level (idle rows).
	built      int
	buildDur   time.Duration
	buildOps   map[string]int64
	idleWaited time.Duration
	idleNote   string
	// Active rows: the writers' trickled appends, and the objstore calls
	// the writers made meanwhile (their appends' and their background
	// work's).
	trickled    int
	trickleLat  []time.Duration
	trickleOps  map[string]int64
	freshQueued atomic.Int64
	freshLost   atomic.Int64
}

type scaling struct {
	spec *scaleSpec
	name string
	rows []*scaleRow
	// baseRows rows were merged into each table's base before the backlog.
	baseRows int
}

func childID(prefix string, i int) string { return fmt.Sprintf("%s%06d", prefix, i) }

func childIDs(prefix string, from, to int) []string {
	out := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, childID(prefix, i))
	}
	return out
}

func writerArgs(o *options, shard string) []string {
	return []string{"-role", "writer", "-shard", shard, "-idle-after", o.idleAfter.String(), "-segment-max-rows", "1"}
}

// seedBase gives table a base version: w appends n rows, seals them, and
// this process's writer DB (which writes nothing to the table) merges them
// once. No merge runs after this.
func (r *reads) seedBase(ctx context.Context, w *proc, table string, n int) ([]string, error) {
	prefix := table + "-base-"
	m, err := w.do(ctx, childReq{Op: "append", Table: table, Prefix: prefix, From: 0, To: n, Size: r.size, Conc: 8})
	r.buildErrors(table, "base", w.name, m)
	if err != nil {
		return nil, err
	}
	if _, err := w.do(ctx, childReq{Op: "flush", Table: table}); err != nil {
		return nil, err
	}
	wt, err := r.wdb.Table(ctx, table)
	if err != nil {
		return nil, err
	}
	mr, err := wt.Merge(ctx, engine.MergeOptions{})
	if err != nil {
		return nil, fmt.Errorf("merging the base of %s: %w", table, err)
	}
	if mr.Rows != int64(n) {
		return nil, fmt.Errorf("merging the base of %s: %d rows merged, want %d", table, mr.Rows, n)
	}
	return childIDs(prefix, 0, n), nil
}

// buildErrors reports the appends of a build that failed (and were
// retried): not a read's error, so a warning.
func (r *reads) buildErrors(table, level, writer string, m childMsg) {
	if m.Errors > 0 {
		r.e.warn(fmt.Sprintf("%s %s: writer %s: %d appends failed while building the backlog (each retried): %s",
			table, level, writer, m.Errors, strings.Join(m.ErrSample, "; ")))
	}
}

func pendingOf(ctx context.Context, tb *engine.Table) (segs, gens int, err error) {
	st, err := tb.Status(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, g := range st.Pending {
		segs += g.Segments
	}
	return segs, len(st.Pending), nil
}

// catchUp refreshes the reader once after a build, timed and counted.
func catchUp(ctx context.Context, tb *engine.Table) (time.Duration, map[string]int64, error) {
	t := newTally()
	start := time.Now()
	err := tb.Refresh(withTally(ctx, t))
	return time.Since(start), t.snap().ops, err
}

// waitIdle waits until a refresh of tb probes no shard head: every writer
// has left the active set. It returns how long that took past the
// IdleAfter already slept, and a note if it never happened.
func (r *reads) waitIdle(ctx context.Context, tb *engine.Table, limit time.Duration) (time.Duration, string) {
	start := time.Now()
	for {
		// A whole refresh probes the registry and the active shards (a
		// point read of a partitioned table probes its id's partition
		// whatever the writers do).
		t := newTally()
		_ = tb.Refresh(withTally(ctx, t))
		heads := t.snap().ops["Head head"]
		if heads == 0 {
			return time.Since(start), ""
		}
		if time.Since(start) > limit || ctx.Err() != nil {
			return time.Since(start), fmt.Sprintf("a refresh still probed %d shard heads %v after the writers' last append plus IdleAfter", heads, limit)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// measureScale samples absent, WAL hit, base hit and raw interleaved, and,
// when fresh is set, every id a writer acknowledges as soon as it arrives.
// With spread > 0 the samples are paced over at least that long: writers
// trickling meanwhile acknowledge enough rows to read, and Azurite's own
// periodic pauses (it saves its metadata every 5 s) fall on every kind
// alike instead of on whichever kind a short row happened to be sampling.
func (r *reads) measureScale(ctx context.Context, name string, t *target, samples int, fresh <-chan string, spread time.Duration) *readPhase {
	kinds := []string{kAbsent, kWAL, kWarm, kRaw, kRawHead}
	base := kinds
	if fresh != nil {
		kinds = append(kinds[:len(kinds):len(kinds)], kFresh)
	}
	p := newReadPhase(name, kinds)
	start := time.Now()
	for i := range samples {
		if spread > 0 {
			if d := time.Until(start.Add(spread * time.Duration(i) / time.Duration(samples))); d > 0 {
				time.Sleep(d)
			}
		}
		for j := range base {
			r.sampleOn(ctx, p, base[(i+j)%len(base)], t, "")
			if fresh != nil {
				select {
				case id := <-fresh:
					r.sampleOn(ctx, p, kFresh, t, id)
				default:
				}
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	p.dur = time.Since(start)
	return p
}

// measureLevel measures one level twice (writers idle, then active) and
// appends both rows to sc.
func (r *reads) measureLevel(ctx context.Context, sc *scaling, lvl scaleLevel, ws []*proc, t *target, built int, buildDur time.Duration, buildOps map[string]int64, prefix string) error {
	o := r.e.opts
	label := lvl.label()
	idle := &scaleRow{label: label, coords: lvl.coords, shards: len(ws), built: built, buildDur: buildDur, buildOps: buildOps}
	// Let every writer leave the active set, then catch the reader up.
	var err error
	if idle.catchup, idle.catchupOps, err = catchUp(ctx, t.tb); err != nil {
		return fmt.Errorf("%s %s: catch-up refresh: %w", sc.name, label, err)
	}
	time.Sleep(o.idleAfter)
	idle.idleWaited, idle.idleNote = r.waitIdle(ctx, t.tb, 3*o.idleAfter+5*time.Second)
	if idle.segs, idle.gens, err = pendingOf(ctx, t.tb); err != nil {
		return err
	}
	idle.phase = r.measureScale(ctx, fmt.Sprintf("%s %s, writers idle", sc.name, label), t, o.scaleSamples, nil, o.activeFor)
	idle.segsAfter, idle.gensAfter = idle.segs, idle.gens
	sc.rows = append(sc.rows, idle)
	r.logScale(sc.name, idle)

	// Writers active: each trickles one row per interval.
	act := &scaleRow{label: label, coords: lvl.coords, shards: len(ws), active: true, segs: idle.segs, gens: idle.gens, trickleOps: map[string]int64{}}
	fresh := make(chan string, 1<<14)
	var first sync.Once
	firstAck := make(chan struct{})
	for _, w := range ws {
		w.setOnEvent(func(m childMsg) {
			if m.Event != "acked" {
				return
			}
			first.Do(func() { close(firstAck) })
			select {
			case fresh <- m.ID:
				act.freshQueued.Add(1)
			default:
				act.freshLost.Add(1)
			}
		})
	}
	for _, w := range ws {
		if _, err := w.do(ctx, childReq{Op: "trickle", Table: t.table, Prefix: prefix + w.name + "-", Size: r.size, Interval: o.activeInterval}); err != nil {
			return err
		}
	}
	select {
	case <-firstAck:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s %s: no trickled append was acknowledged within 30s", sc.name, label)
	}
	act.phase = r.measureScale(ctx, fmt.Sprintf("%s %s, writers active", sc.name, label), t, o.scaleSamples, fresh, o.activeFor)
	var stopErr error
	for _, w := range ws {
		m, err := w.do(ctx, childReq{Op: "stop"})
		if err != nil {
			stopErr = err
			continue
		}
		act.trickled += m.N
		act.trickleLat = append(act.trickleLat, m.Lat...)
		for k, v := range m.Ops {
			act.trickleOps[k] += v
		}
		if m.Errors > 0 || m.Backpressure > 0 {
			r.e.warn(fmt.Sprintf("%s %s: trickling writer %s: %d errors, %d back-pressure refusals: %v", sc.name, label, w.name, m.Errors, m.Backpressure, m.ErrSample))
		}
		w.setOnEvent(nil)
	}
	if stopErr != nil {
		return stopErr
	}
	// The acknowledgements still queued are read too: each read still
	// begins after its acknowledgement.
	for drained := false; !drained; {
		select {
		case id := <-fresh:
			r.sampleOn(ctx, act.phase, kFresh, t, id)
		default:
			drained = true
		}
	}
	if act.segsAfter, act.gensAfter, err = pendingOf(ctx, t.tb); err != nil {
		return err
	}
	sc.rows = append(sc.rows, act)
	r.logScale(sc.name, act)
	return nil
}

func (r *reads) logScale(name string, row *scaleRow) {
	p := row.phase
	raw := p.series[kRaw].summary()
	ab, wal := p.series[kAbsent].summary(), p.series[kWAL].summary()
	state := "idle"
	if row.active {
		state = "active"
	}
	logf("%s %-9s %-6s pending %5d segs/%3d gens: absent p50 %.2f ms (%s) p99 %s; WAL hit p50 %.2f ms (%s); raw p50 %.2f ms",
		name, row.label, state, row.segs, row.gens, ms(ab.p50), dratio(ab.p50, raw.p50), dratio(ab.p99, raw.p99), ms(wal.p50), dratio(wal.p50, raw.p50), ms(raw.p50))
}

// runScaling measures every level of spec: it starts the most writers
// any level needs (child processes on Azurite, see startChild), then, level
// by level, creates the level's table if it is new (with a base version of
// -scale-base-rows rows), has the level's writers append one-row segments
// until the table holds the level's backlog, and measures the level.
func runScaling(ctx context.Context, r *reads, spec *scaleSpec) (*scaling, error) {
	o := r.e.opts
	sc := &scaling{spec: spec, name: spec.name, baseRows: o.scaleBaseRows}
	most := 0
	for _, l := range spec.levels {
		most = max(most, l.writers)
	}
	ws := make([]*proc, most)
	var startErr error
	for i := range ws {
		name := spec.writerName(i)
		if ws[i], startErr = startChild(r.e, name, writerArgs(o, name)...); startErr != nil {
			break
		}
	}
	defer func() {
		var live []*proc
		for _, w := range ws {
			if w != nil {
				live = append(live, w)
			}
		}
		_ = stopAll(live)
	}()
	if startErr != nil {
		return nil, startErr
	}
	// What each table holds so far: its target, and the rows each writer
	// appended to it.
	type tableState struct {
		t    *target
		rows []int
	}
	tables := map[string]*tableState{}
	for li, lvl := range spec.levels {
		ts := tables[lvl.table]
		if ts == nil {
			t, err := r.newScaleTable(ctx, ws[0], lvl)
			if err != nil {
				return sc, err
			}
			ts = &tableState{t: t}
			tables[lvl.table] = ts
		}
		for len(ts.rows) < lvl.writers {
			ts.rows = append(ts.rows, 0)
		}
		per := lvl.segments / lvl.writers
		prefix := func(w *proc) string { return lvl.table + "-" + w.name + "-" }
		var mu sync.Mutex
		ops := map[string]int64{}
		tallyOps := func(m childMsg) {
			mu.Lock()
			defer mu.Unlock()
			for k, v := range m.Ops {
				ops[k] += v
			}
		}
		appendRows := func(ctx context.Context, i, to int) error {
			m, err := ws[i].do(ctx, childReq{Op: "append", Table: lvl.table, Prefix: prefix(ws[i]), From: ts.rows[i], To: to, Size: r.size, Conc: 1})
			r.buildErrors(spec.name, lvl.label(), ws[i].name, m)
			tallyOps(m)
			if err == nil {
				ts.rows[i] = to
			}
			return err
		}
		built := 0
		for i := range lvl.writers {
			built += max(0, per-ts.rows[i])
		}
		start := time.Now()
		// New writers take their shards one after another (each one's
		// first append registers it in the table's registry), then all
		// append the rest in parallel. Writers registering (or going idle
		// and coming back) at once contend on the registry's
		// compare-and-swap: a writer that loses 51 swaps in a row stops,
		// failing its append (see the engine's updateRegistry). The
		// children retry such appends and report them; the report lists
		// them as warnings.
		for i := range lvl.writers {
			if ts.rows[i] == 0 && per > 0 {
				if err := appendRows(ctx, i, 1); err != nil {
					return sc, err
				}
			}
		}
		if _, err := runPool(ctx, lvl.writers, lvl.writers, func(ctx context.Context, i int) error {
			if ts.rows[i] >= per {
				return nil
			}
			return appendRows(ctx, i, per)
		}); err != nil {
			return sc, err
		}
		buildDur := time.Since(start)
		logf("%s %s: %d more segments of one row from %d writer(s) in %v (%.1f rows/s)", spec.name, lvl.label(), built, lvl.writers,
			buildDur.Round(time.Millisecond), float64(built)/buildDur.Seconds())
		ts.t.wal = nil
		for i := range lvl.writers {
			ts.t.wal = append(ts.t.wal, childIDs(prefix(ws[i]), 0, ts.rows[i])...)
		}
		if err := r.measureLevel(ctx, sc, lvl, ws[:lvl.writers], ts.t, built, buildDur, ops, fmt.Sprintf("%s-t%d-", lvl.table, li)); err != nil {
			return sc, err
		}
	}
	return sc, nil
}

// newScaleTable creates lvl's table and gives it a base version, with w
// appending the base's rows; the table's options for a level (none yet)
// go here.
func (r *reads) newScaleTable(ctx context.Context, w *proc, lvl scaleLevel) (*target, error) {
	if err := r.wdb.CreateTable(ctx, lvl.table); err != nil {
		return nil, err
	}
	base, err := r.seedBase(ctx, w, lvl.table, r.e.opts.scaleBaseRows)
	if err != nil {
		return nil, err
	}
	return r.target(ctx, lvl.table, base, nil)
}

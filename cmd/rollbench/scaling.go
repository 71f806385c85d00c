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

type scaleRow struct {
	label  string
	shards int
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
	// Active rows: the writers' trickled appends.
	trickled    int
	trickleLat  []time.Duration
	freshQueued atomic.Int64
	freshLost   atomic.Int64
}

type scaling struct {
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
		t := newTally()
		_, _ = r.absentRead(withTally(ctx, t), tb, fmt.Sprintf("idle-check-%016x", r.rng.Uint64()))
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
	kinds := []string{kAbsent, kWAL, kWarm, kRaw}
	if fresh != nil {
		kinds = append(kinds, kFresh)
	}
	p := newReadPhase(name, kinds)
	base := kinds[:4]
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
func (r *reads) measureLevel(ctx context.Context, sc *scaling, label string, ws []*proc, t *target, built int, buildDur time.Duration, buildOps map[string]int64, prefix string) error {
	o := r.e.opts
	idle := &scaleRow{label: label, shards: len(ws), built: built, buildDur: buildDur, buildOps: buildOps}
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
	act := &scaleRow{label: label, shards: len(ws), active: true, segs: idle.segs, gens: idle.gens}
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

// backlogScaling: one writer process, no merger, 1 row per segment;
// pending segments grow through o.backlog.
func backlogScaling(ctx context.Context, r *reads) (*scaling, error) {
	o := r.e.opts
	const table = "backlog"
	sc := &scaling{name: "backlog", baseRows: o.scaleBaseRows}
	if err := r.wdb.CreateTable(ctx, table); err != nil {
		return nil, err
	}
	w, err := startChild(r.e, "bl-0", writerArgs(o, "bl-0")...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.stop() }()
	base, err := r.seedBase(ctx, w, table, o.scaleBaseRows)
	if err != nil {
		return nil, err
	}
	t, err := r.target(ctx, table, base, nil)
	if err != nil {
		return nil, err
	}
	const prefix = "bl-"
	cur := 0
	for _, level := range o.backlog {
		m, err := w.do(ctx, childReq{Op: "append", Table: table, Prefix: prefix, From: cur, To: level, Size: r.size, Conc: 1})
		r.buildErrors(sc.name, fmt.Sprint(level), w.name, m)
		if err != nil {
			return sc, err
		}
		logf("backlog: %d more segments of one row in %v (%.1f rows/s)", level-cur, m.Dur.Round(time.Millisecond), float64(level-cur)/m.Dur.Seconds())
		built := level - cur
		cur = level
		t.wal = childIDs(prefix, 0, cur)
		if err := r.measureLevel(ctx, sc, fmt.Sprint(level), []*proc{w}, t, built, m.Dur, m.Ops, fmt.Sprintf("bt%d-", level)); err != nil {
			return sc, err
		}
	}
	return sc, nil
}

// shardScaling: n writer processes, each its own shard, the same total
// backlog split evenly, for each n in o.shardCounts.
func shardScaling(ctx context.Context, r *reads) (*scaling, error) {
	o := r.e.opts
	sc := &scaling{name: "shards", baseRows: o.scaleBaseRows}
	most := 0
	for _, n := range o.shardCounts {
		most = max(most, n)
	}
	ws := make([]*proc, most)
	var startErr error
	for i := range ws {
		name := fmt.Sprintf("sh-%02d", i)
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
	for _, n := range o.shardCounts {
		table := fmt.Sprintf("shards-%d", n)
		if err := r.wdb.CreateTable(ctx, table); err != nil {
			return sc, err
		}
		base, err := r.seedBase(ctx, ws[0], table, o.scaleBaseRows)
		if err != nil {
			return sc, err
		}
		t, err := r.target(ctx, table, base, nil)
		if err != nil {
			return sc, err
		}
		per := o.shardSegments / n
		var mu sync.Mutex
		ops := map[string]int64{}
		start := time.Now()
		// The writers take their shards one after another (each one's first
		// append registers it in the table's registry), then append the
		// rest in parallel. Writers registering (or going idle and coming
		// back) at once contend on the registry's compare-and-swap: a writer
		// that loses 51 swaps in a row stops, failing its append (see the
		// engine's updateRegistry). The children retry such appends and
		// report them; the report lists them as warnings.
		for i := range n {
			m, err := ws[i].do(ctx, childReq{Op: "append", Table: table, Prefix: table + "-" + ws[i].name + "-", From: 0, To: 1, Size: r.size, Conc: 1})
			r.buildErrors(sc.name, fmt.Sprint(n), ws[i].name, m)
			if err != nil {
				return sc, err
			}
			for k, v := range m.Ops {
				ops[k] += v
			}
		}
		if _, err := runPool(ctx, n, n, func(ctx context.Context, i int) error {
			m, err := ws[i].do(ctx, childReq{Op: "append", Table: table, Prefix: table + "-" + ws[i].name + "-", From: 1, To: per, Size: r.size, Conc: 1})
			r.buildErrors(sc.name, fmt.Sprint(n), ws[i].name, m)
			mu.Lock()
			for k, v := range m.Ops {
				ops[k] += v
			}
			mu.Unlock()
			return err
		}); err != nil {
			return sc, err
		}
		buildDur := time.Since(start)
		logf("shards: %d shards × %d segments of one row in %v", n, per, buildDur.Round(time.Millisecond))
		t.wal = nil
		for i := range n {
			t.wal = append(t.wal, childIDs(table+"-"+ws[i].name+"-", 0, per)...)
		}
		if err := r.measureLevel(ctx, sc, fmt.Sprintf("%d", n), ws[:n], t, n*per, buildDur, ops, fmt.Sprintf("t%d-", n)); err != nil {
			return sc, err
		}
	}
	return sc, nil
}

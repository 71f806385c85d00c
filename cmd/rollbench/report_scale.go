package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// cell is "p (ratio)" for kind k's quantile q in ph: "1.52 (1.10×)".
func cell(ph *readPhase, k string, q float64) string {
	s := ph.series[k]
	if s == nil || len(s.total) == 0 {
		return "—"
	}
	return fmt.Sprintf("%s (%s)", fms(qOf(s, q)), fx(ratioOf(ph, k, q)))
}

func perLookup(ph *readPhase, k string) string {
	n := len(ph.series[k].total)
	if ph.series[k] == nil || n == 0 {
		return "—"
	}
	t := ph.tallies[k].snap()
	if len(t.ops) == 0 {
		return "none"
	}
	return perUnit(t.ops, n)
}

// scalingSection writes sc's section: a heading of level h ("##")
// numbered num ("7."), then its tables.
func (r *report) scalingSection(b *strings.Builder, h, num string, sc *scaling) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	o := r.o
	spec := sc.spec
	lat := r.e != nil && r.e.lat != nil
	// Writers are child processes on Azurite, goroutines of this process
	// on the latency model (a memory bucket is not shared between
	// processes).
	one, many, across := "One writer process (`rollbench child`, ", "writer processes (`rollbench child`, ", "processes"
	if lat {
		one = "One writer (`rollbench child`'s, run in this process with an `engine.DB` of its own; "
		many = "writers (`rollbench child`'s, run in this process, each with an `engine.DB` of its own; "
		across = "engines"
	}
	largest := spec.levels[len(spec.levels)-1]
	switch spec.name {
	case "backlog":
		p("\n%s %s Lookups against the backlog: %s pending segments\n\n", h, num, joinInts(o.backlog))
		p("%sshard `bl-0`, `IdleAfter` %v, `SegmentMaxRows` 1) appends %d-byte rows one\n", one, o.idleAfter, o.readSize)
		p("at a time, so every row is a segment of its own; generations seal at the engine's defaults (256 segments, 30 s). No\n")
		p("merger runs: before the backlog, %d rows were merged into base version 1 once, and nothing after. Between the rows\n", sc.baseRows)
		p("of the table the writer appends the segments that take the backlog to the next level.\n\n")
	case "shards":
		p("\n%s %s Lookups against the number of writer shards: %s\n\n", h, num, joinInts(o.shardCounts))
		p("N %sshards `sh-00` …, `IdleAfter` %v, `SegmentMaxRows` 1) append %d-byte rows\n", many, o.idleAfter, o.readSize)
		p("one at a time into a table of their own (`shards-N`), %d segments of one row in total, split evenly (%d per shard at\n", largest.segments, largest.segments/max(1, largest.writers))
		p("%d shards). No merger: %d rows were merged into each table's base version 1 before its backlog.\n\n", largest.writers, sc.baseRows)
	default:
		labels := make([]string, len(spec.levels))
		for i, l := range spec.levels {
			labels[i] = l.label()
		}
		p("\n%s %s Lookups against %s: %s\n\n", h, num, spec.what, strings.Join(labels, " / "))
		p("The %s`IdleAfter` %v, `SegmentMaxRows` 1) append %d-byte rows one at a time, each row a\n", many, o.idleAfter, o.readSize)
		p("segment of its own, %d pending segments at the largest level, split evenly over its writers. No merger: %d rows were\n", largest.segments, sc.baseRows)
		p("merged into each table's base version 1 before its backlog.\n\n")
	}
	if lat {
		p("The reader is this process (`engine.DB` without payload cache, so each hit fetches its payload). Each level is\n")
		p("measured twice, %d samples per read kind, kinds interleaved and paced over %v:\n\n", o.scaleSamples, o.activeFor)
	} else {
		p("The reader is this process (`engine.DB` without payload cache, so each hit fetches its payload; the cache has its own\n")
		p("goal in section 3). Each level is measured twice, %d samples per read kind, kinds interleaved and paced over %v:\n\n", o.scaleSamples, o.activeFor)
	}
	p("- **writers idle**: after the writers' last append, IdleAfter plus until a refresh probes no shard head (the writers\n")
	p("  left the registry's active set); a refresh then reads only the registry (one HEAD).\n")
	p("- **writers active**: every writer appends one row per %v during the measurement. Active shards are probed at every\n", o.activeInterval)
	if lat {
		p("  refresh, one HEAD of each shard's head object, in parallel, and the model serves them in parallel (each waits its\n")
		p("  own draw), so a refresh waits for the slowest of its HEADs; a head\n")
	} else {
		p("  refresh, one HEAD of each shard's head object, in parallel — but Azurite is one thread and serialises them; a head\n")
	}
	p("  carries the layout of the segment it counts last, so only a reader more than one segment behind also GETs a range\n")
	p("  of a segment's header. Each row a writer acknowledges is read by this process as soon as the\n")
	p("  acknowledgement arrives (*just acknowledged elsewhere*): read-after-write across %s.\n\n", across)
	p("Milliseconds, p50 or p99 with the ratio to the raw GET's same quantile in the same row in brackets; the raw HEAD is\n")
	p("one HEAD of a raw blob, what an absent lookup's every request is.\n\n")
	dims := strings.Join(spec.dims, " | ")
	dimSep := strings.Repeat("---:|", len(spec.dims))
	coords := func(row *scaleRow) string {
		parts := make([]string, len(row.coords))
		for i, c := range row.coords {
			parts[i] = fmt.Sprint(c)
		}
		return strings.Join(parts, " | ")
	}
	p("| %s | writers | pending segments (generations) | raw GET p50 | raw GET p99 | raw HEAD p50 | absent p50 | absent p99 | WAL hit p50 | base hit p50 | just acknowledged p50 (n) |\n", dims)
	p("|%s---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", dimSep)
	for _, row := range sc.rows {
		ph := row.phase
		state := "idle"
		pend := fmt.Sprintf("%d (%d)", row.segs, row.gens)
		if row.active {
			state = "active"
			pend = fmt.Sprintf("%d (%d) → %d (%d)", row.segs, row.gens, row.segsAfter, row.gensAfter)
		}
		fresh := "—"
		if s := ph.series[kFresh]; s != nil && len(s.total) > 0 {
			fresh = fmt.Sprintf("%s (%d)", cell(ph, kFresh, 0.5), len(s.total))
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", coords(row), state, pend,
			fms(qOf(ph.series[kRaw], 0.5)), fms(qOf(ph.series[kRaw], 0.99)), fms(qOf(ph.series[kRawHead], 0.5)),
			cell(ph, kAbsent, 0.5), cell(ph, kAbsent, 0.99), cell(ph, kWAL, 0.5), cell(ph, kWarm, 0.5), fresh)
	}

	if fig := r.addFigure(r.storeTag()+"-lookups-"+spec.name, "p50 lookup latency against "+spec.what+", with the raw GET and HEAD",
		scalingPlot(sc, r.storeTag())); fig != "" {
		p("\n%s", fig)
	}
	p("\nRequests per lookup (objstore calls the reader made, by what the key is) and refreshes per lookup:\n\n")
	p("| %s | writers | absent id | WAL hit | base hit | just acknowledged | refreshes per absent lookup |\n", dims)
	p("|%s---|---|---|---|---|---:|\n", dimSep)
	for _, row := range sc.rows {
		ph := row.phase
		state := "idle"
		fresh := "—"
		if row.active {
			state = "active"
			fresh = perLookup(ph, kFresh)
		}
		refr := "—"
		if n := len(ph.series[kAbsent].total); n > 0 {
			refr = trimFloat(float64(ph.stats[kAbsent].get("refreshes")) / float64(n))
		}
		p("| %s | %s | %s | %s | %s | %s | %s |\n", coords(row), state, perLookup(ph, kAbsent), perLookup(ph, kWAL), perLookup(ph, kWarm), fresh, refr)
	}

	p("\nWhat it took to get there: the appends that built each level (one at a time per writer; the writers' own\n")
	p("objstore calls per append), and the reader's first refresh after them (once per level, not in the latencies above).\n\n")
	p("| %s | rows appended | wall time | rows/s | writer calls per append | reader's catch-up refresh | its calls |\n", dims)
	p("|%s---:|---:|---:|---|---:|---|\n", dimSep)
	for _, row := range sc.rows {
		if row.active {
			continue
		}
		p("| %s | %d | %s | %.0f | %s | %s ms | %s |\n", coords(row), row.built, row.buildDur.Round(time.Millisecond),
			float64(row.built)/row.buildDur.Seconds(), perUnit(row.buildOps, row.built), fms(row.catchup), perUnit(row.catchupOps, 1))
	}
	var notes []string
	for _, row := range sc.rows {
		if row.idleNote != "" {
			notes = append(notes, fmt.Sprintf("%s: %s", row.label, row.idleNote))
		}
		if row.active {
			s := series{total: row.trickleLat}
			sm := s.summary()
			notes = append(notes, fmt.Sprintf("%s, writers active: %d rows trickled, append p50 %s ms, p99 %s ms; %d acknowledgements queued for reading, %d dropped (queue full); "+
				"the writers' objstore calls per trickled append (their background work included): %s",
				row.label, row.trickled, fms(sm.p50), fms(sm.p99), row.freshQueued.Load(), row.freshLost.Load(), perUnit(row.trickleOps, row.trickled)))
		}
	}
	if len(notes) > 0 {
		p("\n")
		for _, n := range notes {
			p("- %s\n", n)
		}
	}

	for _, active := range []bool{false, true} {
		rows := scaleRows(sc, active)
		if len(rows) < 2 {
			continue
		}
		state := "writers idle"
		if active {
			state = "writers active"
		}
		p("\nFlatness, %s: each ratio, and its deviation from the first level's (goal: within ±30%%).\n\n", state)
		p("| ratio to raw |")
		for _, row := range rows {
			p(" %s |", row.label)
		}
		p(" worst deviation | within ±30%%? |\n|---|")
		p("%s", strings.Repeat("---:|", len(rows)+2))
		p("\n")
		for _, m := range flatMetrics {
			devs, worst := flatness(rows, m.kind, m.q)
			p("| %s |", m.name)
			for i, row := range rows {
				d := ""
				if i > 0 && !math.IsNaN(devs[i]) {
					d = fmt.Sprintf(" (%+.0f%%)", 100*devs[i])
				}
				p(" %s%s |", fx(ratioOf(row.phase, m.kind, m.q)), d)
			}
			yes := "yes"
			if worst > 0.30 {
				yes = "**no**"
			}
			p(" ±%.0f%% | %s |\n", 100*worst, yes)
		}
	}
}

func joinInts(v []int) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%d", x)
	}
	return strings.Join(parts, " / ")
}

func (r *report) sustainSection(b *strings.Builder) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	o := r.o
	s := r.sustain
	p("\n## 9. Merges under sustained writes\n\n")
	p("%d writer processes (`rollbench child`, shards `sw-0` …, `engine.DefaultConfig()`) each offer %.0f rows/s of %d bytes\n", s.shards, s.rate, o.readSize)
	p("(%d concurrent appends each, paced by a ticker; a refused append waits 200 ms) for %v. A merger process (`rollbench\n", s.conc, s.dur.Round(time.Second))
	p("child -role merger`, `engine.DefaultConfig()`: passes of up to 256 MiB, reclaim grace 5 s) runs `Merge` in a loop, the\n")
	p("next pass at once after one that merged something, a second later after one that did not. Every %v this process\n", o.sustainTick)
	p("reads the table's status (pending generations: sealed ones waiting for a merge, plus each shard's open one) and\n")
	p("reads the newest acknowledged row, three earlier ones and as many raw blobs. Before the writes, each writer sealed\n")
	p("%d rows, so the first pass had a backlog to merge on a quiet store.\n\n", s.prebuilt/max(1, s.shards))

	// Pending generations over time, in windows.
	win := 30 * time.Second
	if s.dur < 3*time.Minute {
		win = max(o.sustainTick, s.dur/8)
	}
	win = win.Round(time.Second)
	p("Pending generations over time (windows of %v; maxima within the window, counts at its end):\n\n", win)
	p("| time | pending generations (max) | sealed, waiting (max) | most in one shard | pending rows | base version | rows acknowledged | merge passes | back-pressure |\n")
	p("|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	var cur []pendingSample
	flush := func(end time.Duration) {
		if len(cur) == 0 {
			return
		}
		var gens, sealed, shard int
		bp := "none"
		for _, x := range cur {
			gens, sealed, shard = max(gens, x.gens), max(sealed, x.sealed), max(shard, x.maxShard)
			if x.backpressure != "" {
				bp = x.backpressure
			}
		}
		last := cur[len(cur)-1]
		p("| %v | %d | %d | %d | %d | %d | %d | %d | %s |\n", end.Round(time.Second), gens, sealed, shard, last.rows, last.version, last.acked, last.passes, bp)
		cur = cur[:0]
	}
	next := win
	for _, x := range s.samples {
		for x.at > next {
			flush(next)
			next += win
		}
		cur = append(cur, x)
	}
	flush(s.dur)
	if fig := r.addFigure("azurite-merge-pending", "pending generations over time under sustained writes", sustainPlot(s)); fig != "" {
		p("\n%s", fig)
	}
	h1, h2, peak, peakShard := s.halves()
	p("\nFirst half: at most %d pending generations; second half: at most %d; peak %d (%d in one shard; appends are refused\n", h1, h2, peak, peakShard)
	p("beyond 32 in a shard or 256 in all). Final status: base version %d, %d pending generations, %d pending rows.\n\n",
		s.final.Version, len(s.final.Pending), s.final.PendingRows)

	// Writers and merger.
	var lat []time.Duration
	acked, bp, errs := 0, 0, 0
	for _, w := range s.writers {
		lat = append(lat, w.Lat...)
		acked += w.N
		bp += w.Backpressure
		errs += w.Errors
	}
	ls := (&series{total: lat}).summary()
	p("- **Writers:** %d rows acknowledged in %v: %.1f rows/s achieved of %.0f offered; append p50 %s ms, p99 %s ms, max %s ms;\n",
		acked, s.dur.Round(time.Second), float64(acked)/s.dur.Seconds(), s.rate*float64(s.shards), fms(ls.p50), fms(ls.p99), fms(ls.max))
	p("  %d refused for back-pressure, %d other errors.", bp, errs)
	var segs, seals int64
	for _, w := range s.writers {
		segs += w.Stats["segments"]
		seals += w.Stats["seals"]
	}
	if segs > 0 {
		p(" Writers' engines: %d segments (%.1f rows each), %d generations sealed.", segs, float64(s.acked)/float64(segs), seals)
	}
	p("\n")
	var durs []time.Duration
	merged, versions, conflicts := 0, 0, 0
	var moved int64
	for _, pr := range s.passes {
		if pr.Result.Version > 0 {
			durs = append(durs, pr.Result.Duration)
			versions++
			merged += len(pr.Result.Merged)
			moved += pr.InBytes + pr.OutBytes
		}
		conflicts += pr.Result.Conflicts
	}
	ds := (&series{total: durs}).summary()
	p("- **Merger:** %d passes, %d committed a base version (%d generations merged; %.0f MB read and written by them);\n", len(s.passes), versions, merged, float64(moved)/1e6)
	p("  committing passes took p50 %s, max %s; %d commit conflicts; generations reclaimed %d.\n",
		ds.p50.Round(time.Millisecond), ds.max.Round(time.Millisecond), conflicts, s.merger.Stats["generations reclaimed"])
	p("- **Acknowledged rows read back at the end:** %d of %d sampled (of %d acknowledged) byte-equal.\n", s.verified, min(s.acked, o.sustainVerify), s.acked)
	if len(s.probes) > 0 {
		var d []time.Duration
		for _, pr := range s.probes {
			d = append(d, pr.dur)
		}
		ps := (&series{total: d}).summary()
		st := s.stalls(time.Second)
		var total time.Duration
		var parts []string
		for _, x := range st {
			total += x[1] - x[0]
			if len(parts) < 12 {
				parts = append(parts, fmt.Sprintf("%v–%v", x[0].Round(time.Second), x[1].Round(time.Second)))
			}
		}
		p("- **Azurite itself** (a raw GET of a %d-byte blob every %v on a goroutine of its own, whatever the rest waits for):\n", o.readSize, o.probeEvery)
		p("  %d probes, p50 %s ms, p99 %s ms, max %s ms, %d failed; %d periods with a probe slower than 1 s (%v in all)", len(s.probes),
			fms(ps.p50), fms(ps.p99), fms(ps.max), s.probeErr, len(st), total.Round(time.Second))
		if len(parts) > 0 {
			p(": %s", strings.Join(parts, ", "))
			if len(st) > len(parts) {
				p(", …")
			}
		}
		p(".\n")
	}

	p("\nMerge pass bandwidth: each replayed pass against the raw SDK moving the same bytes right after it, while the merger\n")
	p("waits (the writers go on): GET of every object the pass read (WAL segments, and base files it compacted), 16 at a time\n")
	p("as the merge reads them, then one PUT of a blob of the size the pass wrote (UploadStream, 4 MiB × 4, above 4 MiB).\n")
	p("The pass's time is `MergeResult.Duration`: planning (registry, heads, seal records), reading, decoding, sorting,\n")
	p("encoding, writing, the commit, reclaiming earlier generations and collecting old versions.\n\n")
	p("*Slowest probe* is the slowest raw GET of the prober that overlapped the pass: a pass slowed by Azurite itself\n")
	p("shows a slow probe; one slowed by rollstore's own processes does not.\n\n")
	p("| pass | when | generations | objects read | MB read | MB written | pass time | merge MB/s | raw GET | raw PUT | raw MB/s | **merge / raw** | slowest probe |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	t0 := s.start
	for i, rp := range s.replays {
		name := fmt.Sprintf("%d", i)
		if rp.quiet {
			name = "quiet (first)"
		}
		pr := rp.pass
		if rp.err != "" {
			p("| %s | %v | %d | %d | %.1f | %.1f | %s | — | — | — | — | replay failed: %s | — |\n", name, pr.Started.Sub(t0).Round(time.Second),
				len(pr.Result.Merged), len(pr.Inputs), float64(pr.InBytes)/1e6, float64(pr.OutBytes)/1e6, pr.Result.Duration.Round(time.Millisecond), rp.err)
			continue
		}
		probe := "—"
		if !rp.quiet {
			from := pr.Started.Sub(t0)
			probe = fms(s.probeMax(from, from+pr.Result.Duration)) + " ms"
		}
		p("| %s | %v | %d | %d | %.1f | %.1f | %s | %.1f | %s | %s | %.1f | **%.0f%%** | %s |\n", name, pr.Started.Sub(t0).Round(time.Second),
			len(pr.Result.Merged), len(pr.Inputs), float64(pr.InBytes)/1e6, float64(pr.OutBytes)/1e6, pr.Result.Duration.Round(time.Millisecond),
			rp.mbps(pr.Result.Duration), rp.rawGet.Round(time.Millisecond), rp.rawPut.Round(time.Millisecond), rp.mbps(rp.rawGet+rp.rawPut), 100*rp.ratio(), probe)
	}
	if s.reads != nil {
		p("\nLookups during the run (this process, payload cache off; every read begins after its row's acknowledgement):\n\n")
		r.readTable(b, s.reads)
		p("\n| read kind | objstore calls per read | engine: base hits / WAL hits / late base hits / retries / refreshes |\n|---|---|---|\n")
		for _, k := range s.reads.kinds {
			if k == kRaw {
				continue
			}
			st := s.reads.stats[k]
			p("| %s | %s | %d / %d / %d / %d / %d |\n", kindNames[k], perLookup(s.reads, k), st.get("base hits"), st.get("WAL hits"),
				st.get("late base hits"), st.get("retries"), st.get("refreshes"))
		}
	}
}

package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/rollstore/rollstore/engine"
)

// The feed phase's section of BENCHMARKS.md: its goal table, the tables it
// is computed from, and what the counts say about the goals missed. Its
// subsections are "###", so the section ends at the next "## " heading; a
// run of the phase replaces it, the other runs keep it.

const feedHeading = "## Feed"

// feedPhase runs the phase into rep; a run of the phase alone also
// completes rep (problems, warnings, duration).
func (rep *report) feedPhase(ctx context.Context, e *env) (*report, error) {
	var s *pside
	if e.lat != nil {
		var err error
		if s, err = newModelSide(rep.o, e.warn); err != nil {
			return nil, err
		}
	} else {
		s = newAzuriteSide(e)
	}
	res, err := runFeed(ctx, s, rep.o)
	rep.feed = res
	if err != nil {
		e.problem("feed: " + err.Error())
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if rep.o.feedOnly() {
		rep.problems = append(rep.problems, e.problems...)
		rep.warnings = append(rep.warnings, e.warnings...)
		if res != nil {
			rep.problems = append(rep.problems, res.verify()...)
		}
		rep.dur = time.Since(rep.started)
		rep.load1 = loadavg()
	}
	return rep, nil
}

// outputFeed prints the section and, when the run writes -out, replaces
// it there.
func (rep *report) outputFeed() error {
	md := rep.feedMarkdown()
	fmt.Print(md)
	if o := rep.o; o.out != "" {
		old, err := os.ReadFile(o.out)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		if err := os.WriteFile(o.out, []byte(spliceSection(string(old), feedHeading, md)), 0o644); err != nil {
			return err
		}
		logf("wrote the feed section of %s", o.out)
		if err := rep.writeFigures(); err != nil {
			return err
		}
	}
	if len(rep.problems) > 0 {
		for _, p := range rep.problems {
			fmt.Fprintln(os.Stderr, "rollbench: problem:", p)
		}
		return fmt.Errorf("%d problems (see the FAILED list of the report)", len(rep.problems))
	}
	return nil
}

func (r *feedResult) set(when string) *thrSet {
	for _, s := range r.sets {
		if s.when == when {
			return s
		}
	}
	return nil
}

// thrRatio is kind a's rows/s over kind b's, in sets sa and sb; 0 when
// either was not measured.
func thrRatio(sa *thrSet, a string, sb *thrSet, b string) float64 {
	if sa == nil || sb == nil || sa.reads[a] == nil || sb.reads[b] == nil || sb.reads[b].rowsPerSec() == 0 {
		return 0
	}
	return sa.reads[a].rowsPerSec() / sb.reads[b].rowsPerSec()
}

func thrGoal(name string, v, bound float64, detail string) goalRow {
	if v == 0 {
		return goalRow{name, fmt.Sprintf("≥ %.1f×", bound), "not measured", -1}
	}
	return goalRow{name, fmt.Sprintf("≥ %.1f×", bound), fmt.Sprintf("%.2f× (%s)", v, detail), verdict(v >= bound)}
}

func rowsPerSecText(t *thrRead) string {
	if t == nil {
		return "—"
	}
	return fmt.Sprintf("%.0f rows/s", t.rowsPerSec())
}

// feedGoals is the goal table of the section.
func (rep *report) feedGoals() []goalRow {
	r := rep.feed
	var rows []goalRow
	raw := r.baseline.summary()
	for _, fc := range r.fresh {
		e := fc.e2e.summary()
		name := "freshness, consumer in " + fc.label + ": append start → row delivered / raw PUT + GET"
		if e.n == 0 || raw.n == 0 {
			rows = append(rows, goalRow{name, "≤ 2× p50, ≤ 3× p99", "not measured", -1})
			continue
		}
		v50, v99 := float64(e.p50)/float64(raw.p50), float64(e.p99)/float64(raw.p99)
		rows = append(rows,
			goalRow{name + ", p50", "≤ 2×", fmt.Sprintf("%.2f× (%.1f vs %.1f ms)", v50, ms(e.p50), ms(raw.p50)), verdict(v50 <= 2)},
			goalRow{name + ", p99", "≤ 3×", fmt.Sprintf("%.2f× (%.1f vs %.1f ms)", v99, ms(e.p99), ms(raw.p99)), verdict(v99 <= 3)})
	}
	if len(r.fresh) == 0 {
		rows = append(rows, goalRow{"freshness", "≤ 2× p50, ≤ 3× p99", "not measured", -1})
	}
	before, after := r.set("before merge"), r.set("after merge")
	detail := func(s *thrSet, a string, sb *thrSet, b string) string {
		if s == nil || sb == nil {
			return ""
		}
		return rowsPerSecText(s.reads[a]) + " vs " + rowsPerSecText(sb.reads[b])
	}
	rows = append(rows,
		thrGoal(fmt.Sprintf("throughput with payloads (%s each), from the start: feed rows/s / raw GETs rows/s at concurrency %d", sizeLabel(int64(r.o.size)), r.o.conc),
			thrRatio(before, kFeedPayload, before, kRawGets), 0.8, detail(before, kFeedPayload, before, kRawGets)),
		thrGoal("throughput without payloads, from the start: feed (metadata only) rows/s / Table.Scan (no payloads) rows/s",
			thrRatio(before, kFeedMeta, before, kScan), 0.8, detail(before, kFeedMeta, before, kScan)))
	// Idle long-polls at the default poll interval.
	var idle []*feedIdle
	for _, fi := range r.idles {
		if fi.poll == engine.DefaultConfig().FeedPollInterval {
			idle = append(idle, fi)
		}
	}
	if len(idle) < 2 {
		rows = append(rows, goalRow{"store requests/s of a process whose consumers long-poll an idle table", "independent of the consumers", "not measured", -1})
	} else {
		var parts []string
		ok := true
		for _, fi := range idle {
			parts = append(parts, fmt.Sprintf("%d: %.1f/s", fi.consumers, fi.perSec()))
			ok = ok && fi.perSec() <= 1.2*idle[0].perSec()+0.5 && fi.perSec() >= 0.8*idle[0].perSec()-0.5
		}
		rows = append(rows, goalRow{fmt.Sprintf("store requests/s of a process whose %s consumers long-poll an idle table (Wait %v, poll %v, %d partitions)",
			joinInts(r.o.consumers), r.o.idleWait, idle[0].poll, r.o.partitions),
			"independent of the consumers: each within ±20% of 1 consumer's", strings.Join(parts, ", "), verdict(ok)})
	}
	// The store's own pace drifts between the two sets: each set's ratio
	// to its raw GETs says how much of a change is the feed's.
	norm := func(k string) string {
		return fmt.Sprintf("; / raw GETs %s before, %s after", fx(thrRatio(before, k, before, kRawGets)), fx(thrRatio(after, k, after, kRawGets)))
	}
	rows = append(rows,
		thrGoal("catch-up after the WAL is merged, with payloads: feed rows/s after / before the merge",
			thrRatio(after, kFeedPayload, before, kFeedPayload), 0.8, detail(after, kFeedPayload, before, kFeedPayload)+norm(kFeedPayload)),
		thrGoal("catch-up after the WAL is merged, metadata only: feed rows/s after / before the merge",
			thrRatio(after, kFeedMeta, before, kFeedMeta), 0.8, detail(after, kFeedMeta, before, kFeedMeta)+norm(kFeedMeta)))
	exp := goalRow{"catch-up after the merge: reads answered 410 cursor_expired", "none", "not measured", -1}
	if after != nil && after.reads[kFeedPayload] != nil {
		exp.measured, exp.met = fmt.Sprintf("%d of %d reads", r.expired, after.reads[kFeedPayload].reads+after.reads[kFeedMeta].reads), verdict(r.expired == 0)
	}
	return append(rows, exp)
}

func (rep *report) feedMarkdown() string {
	var b strings.Builder
	pr := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	o, r := rep.o, rep.feed
	if r == nil {
		return feedHeading + ": not measured\n"
	}
	f := r.o
	mode := "full"
	if o.quick {
		mode = "quick (smoke test; scaled down)"
	}
	pr("%s: freshness, throughput and long-poll cost of the change feed\n\n", feedHeading)
	pr("Written by the feed phase of `rollbench` (%s), %s run, %s, wall time %v.\n\n", r.side, mode,
		rep.started.Format("2006-01-02 15:04 UTC"), r.dur.Round(time.Second))
	pr("- **Reproduce:** `make bench-feed` (`./test/azurite/azurite.sh run -- go run ./cmd/rollbench -phases feed`; rewrites this\n")
	pr("  section and its figure, `%s`, only); it is part of `make bench` too. Flags: `%s`.\n", rep.feedFigureFile(), strings.Join(o.args, " "))
	pr("- **Machine:** %s/%s, %d cores (%s), %s RAM; load average %s at start, %s at end; %s.\n",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel(), memTotal(), r.load0, r.load1, runtime.Version())
	pr("- **Setup:** two tables of `engine.TableOptions{Partitions: %d}`; one writer engine owns every partition; every consumer, the\n", f.partitions)
	pr("  scans and the merger are engines of their own, each with its own store client, standing for other processes (a consumer in\n")
	pr("  the owner's process reads through the writer's engine). `FeedRetention` %v. Every row carries a %s payload (inline in the\n", feedRetention, sizeLabel(int64(f.size)))
	pr("  WAL). Engine level, not over HTTP: rollbench runs no servers. Every delivered row is checked: each acknowledged row once, in\n")
	pr("  its partition, offsets dense, never after a row whose append began after it was acknowledged, and the payload byte for byte.\n")
	pr("  The raw side is %s in the same run.\n\n", map[bool]string{true: "the Azure SDK on the same Azurite", false: "plain objstore calls through the same latency model"}[r.side == "Azurite"])

	pr("### Goals\n\n| measure | result | goal | verdict |\n|---|---|---|---|\n")
	for _, g := range rep.feedGoals() {
		pr("| %s | %s | %s | %s |\n", g.goal, g.measured, g.target, metMark(g.met))
	}
	pr("\n")
	if len(rep.problems) > 0 {
		pr("**FAILED:** %s\n\n", strings.Join(rep.problems, "; "))
	}
	if len(rep.warnings) > 0 {
		pr("Warnings (errors outside the reads, not failing the run):\n\n")
		for _, w := range rep.warnings {
			pr("- %s\n", firstLine(w))
		}
		pr("\n")
	}

	if len(r.fresh) > 0 {
		raw := r.baseline.summary()
		pr("### F1. Freshness\n\n")
		pr("%d rows appended one at a time, one every %v, by the writer; the consumer long-polls (`Feed` with `Wait` %v, payloads carried,\n", f.samples, f.spacing, feedLongPoll)
		pr("always from the cursor it was given, which passes through its text form) from the table's newest position. *Append start →\n")
		pr("delivered* is from the call to `Append` to the return of the `Feed` call that delivers the row, which is what the raw PUT of\n")
		pr("the same bytes followed by a raw GET of them measures (%d of them, one every %v, half before the cases and half after);\n", raw.n, f.spacing)
		pr("*ack → delivered* is from `Append`'s return. Milliseconds. Store calls are the consumer's process's during the case, per second\n")
		pr("(the owner's include its appends).\n\n")
		pr("| consumer | poll interval | rows | pages | append start → delivered p50 | p99 | ack → delivered p50 | p99 | store calls/s of its process |\n")
		pr("|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
		pr("| raw PUT + GET (baseline) | — | %d | — | %.1f | %.1f | — | — | — |\n", raw.n, ms(raw.p50), ms(raw.p99))
		for _, fc := range r.fresh {
			e, l := fc.e2e.summary(), fc.lag.summary()
			poll := fmt.Sprint(fc.poll)
			if fc.owner {
				poll += " (woken by its commits)"
			}
			pr("| %s | %s | %d | %d | %.1f (%s) | %.1f (%s) | %.1f | %.1f | %.1f: %s |\n", fc.label, poll, fc.rows, fc.pages,
				ms(e.p50), dratio(e.p50, raw.p50), ms(e.p99), dratio(e.p99, raw.p99), ms(l.p50), ms(l.p99),
				float64(total(fc.ops))/fc.dur.Seconds(), perSecond(fc.ops, fc.dur))
		}
		pr("\n")
		pr("%s", rep.addFigure(rep.feedFigureName(), "share of rows delivered within a latency of their append's start, per consumer, with the raw PUT + GET",
			freshnessPlot(r)))
	}
	if len(r.sets) > 0 {
		pr("### F2. Reading a whole table: throughput, before and after the merge\n\n")
		pr("%d rows appended %d at a time (so segments group several rows), the writer flushing after every %d (a generation per\n", f.rows, f.conc, f.genRows)
		pr("partition each time). Each read runs in a fresh reader engine (cold caches) from the start to an empty answer: the feed in\n")
		pr("pages of up to %s (`MaxBytes`; with payloads `PayloadBytes` = `MaxBytes`, and a row a page delivers without its payload is\n", sizeLabel(feedMaxBytes))
		pr("fetched by id, %d at a time, inside the timed read), `Table.Scan` without payloads (its Arrow stream decoded), and raw GETs of\n", f.conc)
		pr("%d blobs of %s at concurrency %d (the feed's fetch concurrency). After an untimed pass of raw GETs, %d rounds in alternating\n", f.rows, sizeLabel(int64(f.size)), f.conc, f.rounds)
		pr("orders; rows/s is the median round's (each round's in the last column: Azurite pauses now and then). Then the\n")
		pr("table is merged until nothing is left, by a merger with no reclaim grace (the retention keeps the merged generations), and\n")
		pr("everything is read again.\n\n")
		pr("| when | read | rows | rows/s | / raw GETs | pages | rows not carried (fetched by id) | store requests per row | MB read per row | rounds, rows/s |\n")
		pr("|---|---|---:|---:|---:|---:|---:|---|---:|---|\n")
		for _, s := range r.sets {
			for _, k := range thrKinds {
				t := s.reads[k]
				if t == nil {
					continue
				}
				reqs, mb, pages, unc := "1 GET", "—", "—", "—"
				if k != kRawGets {
					reqs = perUnit(t.ops, t.rows)
					if t.storeBytes > 0 {
						mb = fmt.Sprintf("%.3f", float64(t.storeBytes)/1e6/float64(t.rows))
					}
				} else if t.bytes > 0 {
					mb = fmt.Sprintf("%.3f", float64(t.bytes)/1e6/float64(t.rows))
				}
				if k == kFeedPayload || k == kFeedMeta {
					pages = fmt.Sprint(t.pages)
					unc = fmt.Sprint(t.uncarried)
				}
				var rounds []string
				for _, v := range t.rates {
					rounds = append(rounds, fmt.Sprintf("%.0f", v))
				}
				pr("| %s | %s | %d | %.0f | %s | %s | %s | %s | %s | %s |\n", s.when, k, t.rows, t.rowsPerSec(), fx(thrRatio(s, k, s, kRawGets)), pages, unc, reqs, mb,
					strings.Join(rounds, ", "))
			}
		}
		pr("\n")
		if m := r.merge; m != nil {
			pr("The merge: %d passes, %d generations (%d rows) merged in %v; %d generations reclaimed (the retention keeps them); %d pending after.\n\n",
				m.passes, m.gens, m.rows, m.dur.Round(time.Millisecond), m.reclaimed, m.pending)
		}
	}
	if len(r.idles) > 0 {
		pr("### F3. Long-polls on an idle table\n\n")
		pr("A fresh reader engine; its consumers each read from the newest position and then long-poll (`Wait` %v) in a loop, their\n", f.idleWait)
		pr("first reads spread over one `Wait`. Once all wait, the process's store calls are counted for %v.\n\n", f.idleWindow)
		pr("| consumers | poll interval | store calls/s | by call, per second | answers in the window | heads probed (engine `FeedProbes`) |\n")
		pr("|---:|---:|---:|---|---:|---:|\n")
		for _, fi := range r.idles {
			pr("| %d | %v | %.1f | %s | %d | %d |\n", fi.consumers, fi.poll, fi.perSec(), perSecond(fi.ops, fi.window), fi.answers, fi.probes)
		}
		pr("\n")
	}
	if notes := rep.interpretFeed(); len(notes) > 0 {
		pr("### What the numbers say\n\n")
		for _, n := range notes {
			pr("- %s\n", n)
		}
		pr("\n")
	}
	return b.String()
}

// perSecond renders counts per second of d, largest first.
func perSecond(m map[string]int64, d time.Duration) string {
	if d <= 0 || len(m) == 0 {
		return "—"
	}
	keys := slices.Collect(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return int(m[b] - m[a])
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %s", trimFloat(float64(m[k])/d.Seconds()), k))
	}
	return strings.Join(parts, " + ")
}

// interpretFeed says, from this run's counts, why the goals missed were
// missed. Every number is this run's; an explanation appears only when
// the counts show the behaviour it explains.
func (rep *report) interpretFeed() []string {
	r := rep.feed
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	raw := r.baseline.summary()
	parts := r.o.partitions
	var fast *freshCase
	for _, fc := range r.fresh {
		e, l, a := fc.e2e.summary(), fc.lag.summary(), fc.ack.summary()
		if e.n == 0 || raw.n == 0 {
			continue
		}
		perRow := func(op string) float64 { return per(fc.ops[op], fc.rows) }
		switch {
		case fc.owner:
			add("**Consumer in the owner's process:** append start → delivered p50 %.1f ms (p99 %.1f ms) is the append itself (p50 %.1f ms, "+
				"p99 %.1f ms: its existence check, the segment's create-if-absent PUT and the head's swap, where the raw side makes one PUT) "+
				"plus the delivery after the acknowledgement (p50 %.1f ms, p99 %.1f ms: the commit wakes the consumer at once, which GETs "+
				"the new segment). The append alone is %s of the raw PUT + GET at p50 and %s at p99, the delivery after it %s and %s of it. "+
				"Each of its `Feed` calls also HEADs the heads of all %d partitions as it begins (%.1f `Head head` per delivered row, the "+
				"probe loop's included, which runs in the owner's process too although its own commits wake its readers): a call takes only "+
				"heads observed after it began (read-after-ack), and the commit that woke the previous call was observed before it.",
				ms(e.p50), ms(e.p99), ms(a.p50), ms(a.p99), ms(l.p50), ms(l.p99), dratio(a.p50, raw.p50), dratio(a.p99, raw.p99),
				dratio(l.p50, raw.p50), dratio(l.p99, raw.p99), parts, perRow("Head head"))
		case strings.Contains(fc.label, "relayed"):
			add("**Another process with the owner relaying** (its waiting partitions handed to the owner's `AwaitFeed`, then `ProbeFeed` when the "+
				"owner answers; in-process here, the service adds one intra-cluster HTTP round trip): ack → delivered p50 %.1f ms, p99 %.1f ms, "+
				"against %.1f / %.1f ms for the same poll interval without the relay; append start → delivered %s p50, %s p99 of the raw PUT + GET.",
				ms(l.p50), ms(l.p99), ms(r.freshByPoll(fc.poll).lag.summary().p50), ms(r.freshByPoll(fc.poll).lag.summary().p99),
				dratio(e.p50, raw.p50), dratio(e.p99, raw.p99))
		default:
			if fc.poll < engine.DefaultConfig().FeedPollInterval {
				fast = fc
			}
			add("**Consumer in another process, poll %v:** it learns of a commit only from its process's probe loop (a HEAD per partition "+
				"waited on, every poll interval), so a row waits half an interval (%.1f ms) for it on average and up to a whole one: ack → "+
				"delivered p50 %.1f ms, p99 %.1f ms; append start → delivered %s of the raw PUT + GET at p50, %s at p99. A probe that finds "+
				"several new segments delivers them in one page (%d pages for %d rows); per delivered row its process made %s.",
				fc.poll, ms(fc.poll/2), ms(l.p50), ms(l.p99), dratio(e.p50, raw.p50), dratio(e.p99, raw.p99), fc.pages, fc.rows,
				perUnit(fc.ops, fc.rows))
		}
	}
	for _, fc := range r.fresh {
		if !fc.owner && fc.coldOps["GetRange segment"] > 0 {
			add("**A fresh process's first read from a cursor** (untimed above) took %.1f ms and %s: `feedStart` asks `oldestPos` for every "+
				"partition on every read, which needs the table's resident snapshot, and loading it reads the layout of every unmerged WAL "+
				"segment of the table (the point lookups' index; the feed itself takes layouts from the heads and seal records). It grows "+
				"with the backlog of unmerged segments (%d here, for %q), once per process and again whenever the snapshot is refreshed.",
				ms(fc.coldDur), perUnit(fc.coldOps, 1), fc.coldOps["GetRange segment"], fc.label)
			break
		}
	}
	var idleDef, idleFast *feedIdle
	var idleLevels []*feedIdle
	for _, fi := range r.idles {
		switch {
		case fi.poll == engine.DefaultConfig().FeedPollInterval:
			idleLevels = append(idleLevels, fi)
			if fi.consumers == 1 {
				idleDef = fi
			}
		case fi.consumers == 1:
			idleFast = fi
		}
	}
	if fast != nil && idleDef != nil && idleFast != nil {
		add("**The poll interval's trade-off:** at %v a consumer in another process gets its rows at p50 %.1f ms after the acknowledgement "+
			"instead of %.1f ms at %v, and its process probes %.1f heads per second while it waits on an idle table instead of %.1f (F3): "+
			"%d partitions / interval, per table waited on, whatever the number of consumers.",
			fast.poll, ms(fast.lag.summary().p50), ms(r.freshByPoll(engine.DefaultConfig().FeedPollInterval).lag.summary().p50),
			engine.DefaultConfig().FeedPollInterval, float64(idleFast.ops["Head head"])/idleFast.window.Seconds(),
			float64(idleDef.ops["Head head"])/idleDef.window.Seconds(), parts)
	}
	if len(idleLevels) >= 2 {
		var fits []string
		for _, fi := range idleLevels {
			want := float64(parts)/fi.poll.Seconds() + float64(fi.consumers*parts)/r.o.idleWait.Seconds()
			fits = append(fits, fmt.Sprintf("%s: %.1f by that count, %.1f measured", plural(fi.consumers, "consumer"), want, float64(fi.ops["Head head"])/fi.window.Seconds()))
		}
		add("**Idle long-polls** cost the probe loop's %d partitions / poll interval HEADs per second, independent of the consumers, plus "+
			"%d HEADs each time a consumer's long-poll ends empty and it calls `Feed` again: `Table.feed` takes only heads observed after "+
			"the call began (read-after-ack), the probe loop's last observation is older, so `feedHeads` (engine/feedwatch.go) probes every "+
			"partition the call reads itself. HEADs per second = partitions / poll + consumers × partitions / Wait: %s. With many consumers "+
			"the per-call probes dominate. An engine change would make it flat: a call with `Wait` > 0 could take its first heads from the "+
			"probe loop's next observation (at most one interval away, still after the call began) or join a probe already in flight that "+
			"began after it, instead of probing on entry.",
			parts, parts, strings.Join(fits, "; "))
	}
	before, after := r.set("before merge"), r.set("after merge")
	if before != nil && before.reads[kFeedPayload] != nil {
		t := before.reads[kFeedPayload]
		segs := per(t.ops["Get segment"], t.rows)
		add("**Whole-table reads with payloads:** the feed GETs each segment once, whole (%.2f per row: %.1f rows per segment), 16 at a time "+
			"per page, after planning it from the generations' seal records (%.2f `Get seal` per row) and, in a generation still open, "+
			"from the segments' layouts (%.2f `GetRange segment` per row); %s of the raw GETs' rows/s.%s",
			segs, 1/max(segs, 1e-9), per(t.ops["Get seal"], t.rows), per(t.ops["GetRange segment"], t.rows),
			fx(thrRatio(before, kFeedPayload, before, kRawGets)),
			map[bool]string{true: fmt.Sprintf(" %d rows came without their payload (a page's payload budget ran out inside a segment it had "+
				"already fetched whole) and were fetched again by id.", t.uncarried), false: ""}[t.uncarried > 0])
	}
	if before != nil && before.reads[kFeedMeta] != nil && before.reads[kScan] != nil {
		m, sc := before.reads[kFeedMeta], before.reads[kScan]
		note := ""
		if m.storeBytes > 0 {
			note = fmt.Sprintf(" A metadata-only feed read still GETs whole segments, payloads included (%.3f MB read per row for %s "+
				"payloads: `fetchFeedSegments` does a whole `Get` and `rowfile.Decode` drops the bytes); a ranged read of the segments' "+
				"metadata columns would read a fraction of that.", float64(m.storeBytes)/1e6/float64(m.rows), sizeLabel(int64(r.o.size)))
		}
		add("**Without payloads** the feed reads %s the rows/s of `Table.Scan`, which reads each row's batch with a ranged GET of its "+
			"own (%s per row: a batch of %s rows holds one row) in id order.%s",
			fx(thrRatio(before, kFeedMeta, before, kScan)), perUnit(filterOps(sc.ops, "GetRange"), sc.rows), sizeLabel(int64(r.o.size)), note)
	}
	if before != nil && after != nil && r.merge != nil {
		a, b := after.reads[kFeedPayload], before.reads[kFeedPayload]
		if a != nil && b != nil {
			add("**Catch-up after the merge:** the merge folded %d generations into the base and reclaimed %d (the retention keeps them), "+
				"so the feed reads the same segments after it: %s the rows/s before with payloads, %s metadata only, %d reads answered "+
				"`cursor_expired`. Store requests per row with payloads: %s after, %s before; raw GETs ran at %s of their rows/s before "+
				"the merge in the same sets.",
				r.merge.gens, r.merge.reclaimed, fx(thrRatio(after, kFeedPayload, before, kFeedPayload)),
				fx(thrRatio(after, kFeedMeta, before, kFeedMeta)), r.expired, trimFloat(per(total(a.ops), a.rows)), trimFloat(per(total(b.ops), b.rows)),
				fx(thrRatio(after, kRawGets, before, kRawGets)))
		}
	}
	return out
}

// freshByPoll is the plain other-process freshness case at poll.
func (r *feedResult) freshByPoll(poll time.Duration) *freshCase {
	for _, fc := range r.fresh {
		if !fc.owner && fc.poll == poll && !strings.Contains(fc.label, "relayed") {
			return fc
		}
	}
	return &freshCase{}
}

// filterOps keeps the calls whose name starts with prefix.
func filterOps(m map[string]int64, prefix string) map[string]int64 {
	out := map[string]int64{}
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

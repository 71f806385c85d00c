package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// The partitions phase's section of BENCHMARKS.md: its goal table first,
// then the tables it is computed from. Its subsections are "###", so the
// section ends at the next "## " heading; a run of the phase replaces it,
// the other runs keep it.

const partHeading = "## Partitions"

// partitions runs the phase into rep; a run of the phase alone also
// completes rep (problems, warnings, duration).
func (rep *report) partitions(ctx context.Context, e *env) (*report, error) {
	res, err := runPartitions(ctx, e)
	rep.parts = res
	if err != nil {
		e.problem("partitions: " + err.Error())
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if rep.o.partitionsOnly() {
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

// outputPartitions prints the section and, when the run writes -out,
// replaces it there.
func (rep *report) outputPartitions() error {
	md := rep.partitionsMarkdown()
	fmt.Print(md)
	if o := rep.o; o.out != "" {
		old, err := os.ReadFile(o.out)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		if err := os.WriteFile(o.out, []byte(spliceSection(string(old), partHeading, md)), 0o644); err != nil {
			return err
		}
		logf("wrote the partitions section of %s", o.out)
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

// callGroup sorts a writer's objstore call into what an append is made
// of: "commit" (the segment and the head swap), "check" (the reads of the
// WAL and the base an existence check or a refresh makes) or "other" (the
// members' heartbeats and polls, seal records, leases, the registry's
// writes).
func callGroup(op string) string {
	verb, class, _ := strings.Cut(op, " ")
	switch {
	case op == "PutIfAbsent segment" || op == "Put head":
		return "commit"
	case (verb == "Head" || verb == "Get" || verb == "GetRange") &&
		slices.Contains([]string{"head", "segment", "seal", "registry", "manifest", "data-index", "data-file", "descriptor"}, class):
		return "check"
	}
	return "other"
}

func groupOps(ops map[string]int64) map[string]map[string]int64 {
	out := map[string]map[string]int64{"commit": {}, "check": {}, "other": {}}
	for k, v := range ops {
		out[callGroup(k)][k] += v
	}
	return out
}

func per(n int64, d int) float64 {
	if d == 0 {
		return 0
	}
	return float64(n) / float64(d)
}

// cellRatio is kind k's quantile q over the raw GET's in the cell.
func cellRatio(c *partCell, q float64) float64 { return ratioOf(c.ph, kAbsent, q) }

func ratioRange(vals []float64) string {
	if len(vals) == 0 {
		return "—"
	}
	lo, hi := slices.Min(vals), slices.Max(vals)
	if fmt.Sprintf("%.2f", lo) == fmt.Sprintf("%.2f", hi) {
		return fx(lo)
	}
	return fmt.Sprintf("%.2f–%.2f×", lo, hi)
}

func median(vals []float64) float64 {
	v := slices.Clone(vals)
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// worstDev is the largest deviation of vals from their median.
func worstDev(vals []float64) (float64, int) {
	m := median(vals)
	worst, at := 0.0, -1
	for i, v := range vals {
		if d := math.Abs(v/m - 1); d > worst {
			worst, at = d, i
		}
	}
	return worst, at
}

func verdict(ok bool) int {
	if ok {
		return 1
	}
	return 0
}

// partGoals is the goal table of the section.
func (rep *report) partGoals() []goalRow {
	p := rep.parts
	var rows []goalRow
	// The model's grid.
	var p50s, p99s []float64
	var worst50, worst99 string
	for _, c := range p.grid {
		p50s, p99s = append(p50s, cellRatio(c, 0.5)), append(p99s, cellRatio(c, 0.99))
	}
	if len(p.grid) > 0 {
		hi50, hi99 := slices.Max(p50s), slices.Max(p99s)
		worst50 = fmt.Sprintf(" (highest: %d writers × %d partitions)", p.grid[slices.Index(p50s, hi50)].writers, p.grid[slices.Index(p50s, hi50)].partitions)
		worst99 = fmt.Sprintf(" (highest: %d writers × %d partitions)", p.grid[slices.Index(p99s, hi99)].writers, p.grid[slices.Index(p99s, hi99)].partitions)
		grid := fmt.Sprintf("%s writers × %s partitions", joinInts(rep.o.partWriters), joinInts(rep.o.partCounts))
		rows = append(rows,
			goalRow{"latency model: absent id p50 / raw GET p50, writers active, " + grid, "≤ 1.2×",
				ratioRange(p50s) + worst50, verdict(hi50 <= 1.2)},
			goalRow{"latency model: absent id p99 / raw GET p99, writers active, " + grid, "≤ 1.5×",
				ratioRange(p99s) + worst99, verdict(hi99 <= 1.5)})
		d50, i50 := worstDev(p50s)
		d99, i99 := worstDev(p99s)
		rows = append(rows,
			goalRow{"latency model: flatness of the absent p50 ratio across the grid", "every cell within ±20% of the grid's median",
				fmt.Sprintf("median %.2f×, worst %+.0f%% (%d × %d)", median(p50s), 100*(p50s[i50]/median(p50s)-1), p.grid[i50].writers, p.grid[i50].partitions), verdict(d50 <= 0.2)},
			goalRow{"latency model: flatness of the absent p99 ratio across the grid", "every cell within ±20% of the grid's median",
				fmt.Sprintf("median %.2f×, worst %+.0f%% (%d × %d)", median(p99s), 100*(p99s[i99]/median(p99s)-1), p.grid[i99].writers, p.grid[i99].partitions), verdict(d99 <= 0.2)})
		// Calls per append at the smallest partition count, by writers.
		var parts []string
		var vals []float64
		for _, c := range p.grid {
			if c.partitions != rep.o.partCounts[0] {
				continue
			}
			g := groupOps(c.writerOps)
			v := per(total(g["check"])+total(g["commit"]), c.w.acked)
			vals = append(vals, v)
			parts = append(parts, fmt.Sprintf("%d: %.2f (%.2f check + %.2f commit)", c.writers, v, per(total(g["check"]), c.w.acked), per(total(g["commit"]), c.w.acked)))
		}
		ok := len(vals) > 0
		for _, v := range vals {
			ok = ok && math.Abs(v/vals[0]-1) <= 0.1
		}
		rows = append(rows, goalRow{fmt.Sprintf("latency model: store calls per acknowledged append (existence check + commit), %s writers, %d partitions",
			joinInts(rep.o.partWriters), rep.o.partCounts[0]), "constant: each within ±10% of 1 writer's", strings.Join(parts, "; "), verdict(ok)})
	}
	// Azurite.
	if len(p.az) == 0 {
		rows = append(rows, goalRow{"Azurite: absent id p50 / raw GET p50, writers active", "≤ 1.5× each, within ±30% of each other", "not run (-store latency)", -1})
	} else {
		var vals []float64
		var parts []string
		for _, c := range p.az {
			v := cellRatio(c, 0.5)
			vals = append(vals, v)
			parts = append(parts, fmt.Sprintf("%d writers %.2f×", c.writers, v))
		}
		rows = append(rows,
			goalRow{fmt.Sprintf("Azurite: absent id p50 / raw GET p50, %s writers active, %d partitions", joinInts(rep.o.partAzWriters), p.az[0].partitions),
				"≤ 1.5× each", strings.Join(parts, ", "), verdict(slices.Max(vals) <= 1.5)},
			goalRow{"Azurite: the same ratios against each other", "within ±30% (highest / lowest ≤ 1.3)",
				fmt.Sprintf("highest / lowest %.2f", slices.Max(vals)/slices.Min(vals)), verdict(slices.Max(vals)/slices.Min(vals) <= 1.3)})
	}
	for _, f := range p.fwd {
		o, r := f.ph.series[kOwner].summary(), f.ph.series[kRouted].summary()
		v := float64(r.p50) / float64(o.p50)
		rows = append(rows, goalRow{fmt.Sprintf("%s: append p50 through a non-owner (Stage, owner's Commit) / through the owner, %s payload", f.side, sizeLabel(int64(f.size))),
			"≤ 1.3×", fmt.Sprintf("%.2f× (%.2f vs %.2f ms)", v, ms(r.p50), ms(o.p50)), verdict(v <= 1.3)})
	}
	for _, s := range p.sustains {
		name := fmt.Sprintf("latency model, sustained writes, %d writers, %.0f rows/s offered, %v", s.writers, s.rate, s.dur.Round(time.Second))
		frac := per(int64(s.w.acked), s.w.offered)
		rows = append(rows, goalRow{name + ": rows acknowledged / offered", "≥ 98%",
			fmt.Sprintf("%.1f%% (%d of %d; %d refused for back-pressure, %d failed)", 100*frac, s.w.acked, s.w.offered, s.w.bp, s.w.errs), verdict(frac >= 0.98)})
		a, raw := s.w.lat.summary(), s.rawPut.summary()
		v := float64(a.p99) / float64(max(raw.p99, 1))
		rows = append(rows, goalRow{name + ": append p99 / raw PUT p99", "≤ 3×",
			fmt.Sprintf("%.2f× (%.1f vs %.1f ms)", v, ms(a.p99), ms(raw.p99)), verdict(v <= 3)})
		first, second, maxG := s.halves()
		bounded := s.w.bp == 0 && len(s.points) >= 4 && float64(second) <= 1.5*float64(first)+2
		note := ""
		if s.dur < 10*time.Minute {
			note = fmt.Sprintf("; %v run, not the issue's 10 minutes (-part-sustain 10m)", s.dur.Round(time.Second))
		}
		rows = append(rows, goalRow{name + ": pending generations bounded", "second half's max ≤ 1.5 × first half's + 2, no back-pressure",
			fmt.Sprintf("max %d (first half %d, second half %d; %d partitions, so %d open ones at any time)%s", maxG, first, second, s.partitions, s.partitions, note), verdict(bounded)})
	}
	return rows
}

// halves is the most pending generations in the first and second half of
// the run, and over all of it.
func (s *partSustain) halves() (first, second, all int) {
	for _, pt := range s.points {
		g := int(pt.gens)
		if pt.at < s.dur/2 {
			first = max(first, g)
		} else {
			second = max(second, g)
		}
		all = max(all, g)
	}
	return first, second, all
}

func (rep *report) partitionsMarkdown() string {
	var b strings.Builder
	pr := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	o, p := rep.o, rep.parts
	if p == nil {
		return partHeading + ": not measured\n"
	}
	mode := "full"
	if o.quick {
		mode = "quick (smoke test; scaled down)"
	}
	stores := "the latency model and Azurite"
	if len(p.az) == 0 {
		stores = "the latency model only (-store latency)"
	}
	pr("%s: lookups and appends of hash-partitioned tables\n\n", partHeading)
	pr("Written by the partitions phase of `rollbench` (%s), %s run, %s, wall time %v.\n\n", stores, mode,
		rep.started.Format("2006-01-02 15:04 UTC"), p.dur.Round(time.Second))
	pr("- **Reproduce:** `make bench-partitions` (`./test/azurite/azurite.sh run -- go run ./cmd/rollbench -phases partitions`; rewrites\n")
	pr("  this section and its figure, `bench/model-partitions-pending.svg`, only); it is part of `make bench` too. Flags: `%s`. The issue's 10-minute sustained writes: `-part-sustain 10m`.\n", strings.Join(o.args, " "))
	pr("- **Machine:** %s/%s, %d cores (%s), %s RAM; load average %s at start, %s at end; %s.\n",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel(), memTotal(), p.load0, p.load1, runtime.Version())
	m := p.model
	pr("- **Latency model:** objstore/memory behind objstore/latency, HEAD p50 %s / p99 %s, GET %s / %s, PUT %s / %s (conditional PUT %s / %s), %.0f MiB/s per body;\n",
		msText(m.Head.P50), msText(m.Head.P99), msText(m.Get.P50), msText(m.Get.P99), msText(m.Put.P50), msText(m.Put.P99), msText(m.PutIf.P50), msText(m.PutIf.P99), m.Bandwidth/(1<<20))
	pr("  the raw side is plain objstore calls through the same model in the same run (raw GET: %d B).\n", o.readSize)
	pr("- **Setup:** tables of `engine.TableOptions{Partitions: n}`; writers are `engine.DB`s of this process (`Config.Shard` pw-NN, defaults\n")
	pr("  otherwise, each with its own store client), appending through routing: a writer whose cached members view gives an id's\n")
	pr("  partition to another writer (or that gets `*engine.NotOwnerError`) calls `Stage` itself and `Commit` on the owner's `*engine.Table`.\n")
	pr("  **In process, not over HTTP:** rollbench runs no servers, so a forwarded append here lacks the service's intra-cluster round trip.\n")
	pr("  The reader is an engine of its own (no payload cache); the merger too (`ReclaimGrace` 0). Before measuring, the cluster waits\n")
	pr("  until every writer names the same owner for every partition. No legacy (`Partitions: -1`) comparison is run.\n\n")

	pr("### Goals\n\n| measure | result | goal | verdict |\n|---|---|---|---|\n")
	for _, g := range rep.partGoals() {
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

	cellTable := func(cells []*partCell) {
		pr("| writers | partitions | appends acknowledged (forwarded) | raw GET p50 | raw GET p99 | raw HEAD p50 | absent p50 | absent p99 | requests per absent lookup |\n")
		pr("|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, c := range cells {
			ab, raw, hd := c.ph.series[kAbsent].summary(), c.ph.series[kRaw].summary(), c.ph.series[kRawHead].summary()
			pr("| %d | %d | %d (%d) | %.2f | %.2f | %.2f | %.2f (%s) | %.2f (%s) | %s |\n", c.writers, c.partitions, c.w.acked, c.w.forwarded,
				ms(raw.p50), ms(raw.p99), ms(hd.p50), ms(ab.p50), dratio(ab.p50, raw.p50), ms(ab.p99), dratio(ab.p99, raw.p99),
				perUnit(c.ph.tallies[kAbsent].snap().ops, ab.n))
		}
		pr("\n")
	}
	if len(p.grid) > 0 {
		pr("### P1. Absent ids with writers active, latency model\n\n")
		pr("Each active writer appends one 1 KiB row per %v (two at a time at most) while this process looks up ids never written,\n", o.activeInterval)
		pr("interleaved with raw GETs and raw HEADs, %d of each spread over at least %v. Milliseconds; ratios to the raw GET's same quantile.\n\n", o.partSamples, o.partSpread)
		cellTable(p.grid)
		pr("### P2. Store calls per acknowledged append, latency model\n\n")
		pr("All objstore calls of all writers while the rows of P1 were appended, per acknowledged append: *check* are reads of heads,\n")
		pr("segments, seals, the registry and the base (an existence check or a refresh), *commit* the segment's create-if-absent and the head's\n")
		pr("swap (a generation's rotation swaps the head too), *other* the rest (the members' heartbeats and polls, seal records, leases).\n")
		pr("Background work (each writer's members poll every second, its resident snapshot's whole refresh every `ResidentMaxAge`, its\n")
		pr("generations' rotations) is counted too, so at %v per row per writer these are per-second costs over 2 rows/s. *Owned checks*\n", o.activeInterval)
		pr("are the commits whose existence check the owner answered from its own view of the partition, without a request (engine\n")
		pr("`Stats.OwnedChecks`), out of the segments written.\n\n")
		pr("| writers | partitions | appends | segments | owned checks | check | commit | other | all calls, per append |\n|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, c := range p.grid {
			g := groupOps(c.writerOps)
			pr("| %d | %d | %d | %d | %d | %.2f | %.2f | %.2f | %s |\n", c.writers, c.partitions, c.w.acked, c.segments, c.owned, per(total(g["check"]), c.w.acked),
				per(total(g["commit"]), c.w.acked), per(total(g["other"]), c.w.acked), perUnit(c.writerOps, c.w.acked))
		}
		pr("\n")
	}
	if len(p.az) > 0 {
		pr("### P3. Absent ids with writers active, Azurite\n\n")
		pr("As P1, on Azurite (one Node.js thread serving one request at a time), the raw side the Azure SDK.\n\n")
		cellTable(p.az)
	}
	if len(p.fwd) > 0 {
		pr("### P4. An append through the owner and through a non-owner\n\n")
		pr("Two writers; every row's partition is owned by the first. One append at a time, the paths interleaved: through the owner\n")
		pr("(`Append`), through the other writer routing it (`Stage` there, `Commit` on the owner), through the other writer trying `Append`\n")
		pr("first (it answers `NotOwnerError` after reading the members, then `Stage` + `Commit`), and a raw PUT of the same bytes.\n\n")
		pr("| store | path | n | p50 ms | p99 ms | p50 / owner's | requests per append (both writers) |\n|---|---|---:|---:|---:|---:|---|\n")
		for _, f := range p.fwd {
			own := f.ph.series[kOwner].summary()
			for _, k := range f.ph.kinds {
				s := f.ph.series[k].summary()
				reqs := "1 PUT"
				if k != kRawPut {
					reqs = perUnit(f.ops[k], s.n)
				}
				pr("| %s | %s | %d | %.2f | %.2f | %s | %s |\n", f.side, kindNames[k], s.n, ms(s.p50), ms(s.p99), dratio(s.p50, own.p50), reqs)
			}
		}
		pr("\n")
	}
	if len(p.sustains) > 0 {
		pr("### P5. Sustained writes with merges, latency model\n\n")
		pr("The writers together are offered a row of %s every 1/rate s (each writer its share, up to %d appends in flight; a row whose\n", sizeLabel(int64(o.partSustainSize)), o.sustainConc)
		pr("turn finds them all busy is offered and not appended); a merger merges in a loop; a raw PUT of the same size every 100 ms\n")
		pr("through the model is the baseline; the table's pending generations are sampled every %v.\n\n", o.partTick)
		pr("| writers | partitions | duration | offered | acknowledged (forwarded) | back-pressure | failed | append p50 / p99 ms | raw PUT p50 / p99 ms | pending generations max (first half / second half) | merge passes (rows merged) | rows read back |\n")
		pr("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, s := range p.sustains {
			a, raw := s.w.lat.summary(), s.rawPut.summary()
			f, sec, all := s.halves()
			pr("| %d | %d | %v | %d (%.0f/s) | %d (%d) | %d | %d | %.1f / %.1f | %.1f / %.1f | %d (%d / %d) | %d (%d) | %d of %d |\n",
				s.writers, s.partitions, s.dur.Round(time.Second), s.w.offered, float64(s.w.offered)/s.dur.Seconds(), s.w.acked, s.w.forwarded,
				s.w.bp, s.w.errs, ms(a.p50), ms(a.p99), ms(raw.p50), ms(raw.p99), all, f, sec, s.passes, s.merged, s.verified, s.checked)
		}
		pr("\n")
		pr("%s", rep.addFigure("model-partitions-pending", "pending generations over time under sustained writes, partitioned table", partSustainPlot(p.sustains)))
		for _, s := range p.sustains {
			pr("- %d writers: the writers' calls per acknowledged append: %s.\n", s.writers, perUnit(s.writerOps, s.w.acked))
		}
		pr("\n")
	}
	return b.String()
}

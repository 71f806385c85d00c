package main

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/rollstore/rollstore/objstore/latency"
)

// The report of -store latency: one section of BENCHMARKS.md of its own,
// "## Latency model …", which a run replaces and the Azurite run keeps
// (keptTail). Its subsections are "###" and below, so the section ends at
// the next "## " heading.

const (
	latencyHeading = "## Latency model"
	fixtureHeading = "## Staging fixture on Azurite"
)

// keptTail is the part of an old BENCHMARKS.md that the Azurite run keeps:
// from the first section another run owns (the staging fixture's, the
// latency model's) to the end.
func keptTail(old string) string {
	cut := -1
	for _, h := range []string{fixtureHeading, latencyHeading, partHeading, feedHeading} {
		if i := strings.Index(old, "\n"+h); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut < 0 {
		return ""
	}
	return old[cut+1:]
}

// spliceSection replaces the section of old that begins with heading (up
// to the next "## " heading, or the end) by section, or appends section
// when old has none.
func spliceSection(old, heading, section string) string {
	section = strings.TrimRight(section, "\n") + "\n"
	i := strings.Index(old, "\n"+heading)
	if i < 0 {
		return strings.TrimRight(old, "\n") + "\n\n" + section
	}
	rest := old[i+1+len(heading):]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		return old[:i+1] + section + rest[j:]
	}
	return old[:i+1] + section
}

// outputLatency prints the latency-model report and, for a run that
// writes -out, replaces its section of that file.
func (r *report) outputLatency() error {
	md := r.latencyMarkdown()
	fmt.Print(md)
	if o := r.o; o.out != "" {
		old, err := os.ReadFile(o.out)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		out := spliceSection(string(old), latencyHeading, md)
		if r.parts != nil {
			out = spliceSection(out, partHeading, r.partitionsMarkdown())
		}
		if err := os.WriteFile(o.out, []byte(out), 0o644); err != nil {
			return err
		}
		logf("wrote the latency model's section of %s", o.out)
		if err := r.writeFigures(); err != nil {
			return err
		}
	}
	if len(r.problems) > 0 {
		for _, p := range r.problems {
			fmt.Fprintln(os.Stderr, "rollbench: problem:", p)
		}
		return fmt.Errorf("%d problems (see the FAILED list of the report)", len(r.problems))
	}
	return nil
}

// opCalls names the objstore calls each operation of the model stands for.
var opCalls = map[latency.Op]string{
	latency.OpHead:   "Head",
	latency.OpGet:    "Get, GetRange (to the first byte; the body then streams at the bandwidth)",
	latency.OpPut:    "Put (plus its body at the bandwidth)",
	latency.OpPutIf:  "Put with IfNotExists or IfMatch (plus its body at the bandwidth)",
	latency.OpDelete: "Delete, DeleteIfMatch; DeleteMany per batch",
	latency.OpList:   "List, per page",
	latency.OpLease:  "AcquireLease, Renew, Release",
}

// latencySources are the pages the model's defaults rest on (see
// latency.Config), with what each says.
var latencySources = []struct{ title, url, says string }{
	{"Scalability and performance targets for Blob storage", "https://learn.microsoft.com/azure/storage/blobs/scalability-targets",
		"a single blob: up to 500 requests/s; a single page blob: up to 60 MiB/s; a single block blob: up to the account's " +
			"ingress/egress limits, its high-throughput path above 4 MiB (standard) or 256 KiB (premium) per Put Blob or Put Block"},
	{"Performance and scalability checklist for Blob storage", "https://learn.microsoft.com/azure/storage/blobs/storage-performance-checklist",
		"the same per-blob target; nearing a target raises latency before the service throttles (503/500)"},
	{"Latency in Blob storage", "https://learn.microsoft.com/azure/storage/blobs/storage-blobs-latency",
		"for small operations the time is “predominantly spent handling the request, rather than transferring data”; premium " +
			"block blobs have “significantly lower and more consistent latency” than standard"},
	{"Scalability targets for premium block blob storage accounts", "https://learn.microsoft.com/azure/storage/blobs/scalability-targets-premium-block-blobs",
		"premium is for “smaller, kilobyte-range objects” needing “consistent low-latency storage”"},
	{"Azure Block Blob storage performance tiers (2019)",
		"https://github.com/MicrosoftDocs/azure-docs/blob/014513711acd0485c5226261c073205c2d693631/articles/storage/blobs/storage-blob-performance-tiers.md",
		"premium: “single-digit consistent storage latency”; standard: “high capacity and high throughput”"},
	{"Hot, Cool, and Archive access tiers (2021)",
		"https://github.com/MicrosoftDocs/azure-docs/blob/0089f187e7d58912b9095acc2c17247623f340d9/articles/storage/blobs/access-tiers-overview.md",
		"latency (time to first byte) of the hot and cool tiers: “milliseconds”"},
}

func msText(d time.Duration) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)), "0"), ".") + " ms"
}

// tierOf names the preset cfg's latencies match, or "custom".
func tierOf(cfg latency.Config) string {
	for name, preset := range map[string]latency.Config{"standard": latency.StandardConfig(), "premium": latency.PremiumConfig()} {
		same := cfg.Bandwidth == preset.Bandwidth
		for _, op := range latency.Ops {
			same = same && *cfg.For(op) == *preset.For(op)
		}
		if same {
			return name
		}
	}
	return "custom"
}

func (r *report) latencyMarkdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	o, m := r.o, r.e.lat
	cfg := m.Config()
	mode := "full"
	if o.quick {
		mode = "quick (smoke test; scaled down)"
	}
	args := "(defaults)"
	if len(o.args) > 0 {
		args = "`" + strings.Join(o.args, " ") + "`"
	}
	p("%s: lookups against writers and backlog on a store that serves requests in parallel\n\n", latencyHeading)
	p("> **A model, not Azure.** Azurite serves one request at a time, so sections 7 and 8 cannot show what parallel\n")
	p("> probes cost on Azure Blob Storage. Here the engine runs on `objstore/memory` behind `objstore/latency`: every\n")
	p("> request waits a latency drawn for it alone from its operation's distribution, so requests issued together overlap.\n")
	p("> The raw baseline (a GET of an object of the same size, a HEAD) goes through the same model in the same run. The\n")
	p("> **ratios** and the **requests per lookup and per append** are the result; the milliseconds are the model's.\n\n")
	p("- **Date:** %s · **run:** %s, flags %s · wall time %s\n", r.started.Format("2006-01-02 15:04 MST"), mode, args, r.dur.Round(time.Second))
	p("- **Machine:** %s/%s, %d vCPU (%s, shared with other work), %s RAM; load average %s at start, %s at end\n",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel(), memTotal(), r.load0, r.load1)
	p("- **Reproduce:** `make bench-latency` (= `go run ./cmd/rollbench -store latency`: the full run, a few minutes; rewrites this\n")
	p("  section of BENCHMARKS.md and its figures, `bench/model-*.svg`, and nothing else) · `go run ./cmd/rollbench -store latency -quick` (< 1 min, prints only) ·\n")
	p("  `-latency-tier premium`, `-latency-head-p50 4ms`, `-latency-bandwidth 100`, `-latency-seed 2`, … (`go run ./cmd/rollbench -help`)\n")
	p("- **Setup:** the reader is this process's `engine.DB` (payload cache off); the writers are `rollbench child`'s writer run\n")
	p("  in this process, one goroutine and one `engine.DB` (its own shard) each, since a memory bucket cannot be shared\n")
	p("  between processes: the model's waits cost no CPU, but the writers' engines share the machine's %d cores with the\n", runtime.NumCPU())
	p("  reader. Every engine reaches the model through a counting wrapper (the calls per lookup and per append below); the\n")
	p("  raw side calls the model's bucket directly. %d-byte payloads; `engine.DefaultConfig()` except as stated.\n\n", o.readSize)

	p("### The model\n\n")
	p("Tier `%s`: each request waits a lognormal latency with the p50 and p99 below, drawn independently (seed %d); bodies\n", tierOf(cfg), cfg.Seed)
	p("stream at %.0f MiB/s each (a GET's while it is read, a PUT's with its latency); a List costs one LIST per %d entries, a\n", cfg.Bandwidth/(1<<20), cfg.ListPage)
	p("DeleteMany one DELETE per %d keys. No throttling, no per-partition or per-account limit, no queueing in the store.\n\n", cfg.DeleteBatch)
	p("| operation | objstore calls | p50 | p99 | requests in this run |\n|---|---|---:|---:|---:|\n")
	for _, op := range latency.Ops {
		d := cfg.For(op)
		p("| %s | %s | %s | %s | %d |\n", strings.ToUpper(strings.ReplaceAll(string(op), "_", " ")), opCalls[op], msText(d.P50), msText(d.P99), m.Calls(op))
	}
	p("\nWhere the defaults come from. Microsoft publishes targets and qualitative latency statements for Blob storage, not\n")
	p("per-operation latency percentiles:\n\n")
	for _, s := range latencySources {
		p("- [%s](%s): %s.\n", s.title, s.url, s.says)
	}
	p("\nSo the `premium` tier keeps every p50 and p99 in single-digit milliseconds; `standard` (the default) takes a p50 of a\n")
	p("few milliseconds (2–3× premium's) and a p99 five times its p50 (“less consistent”), writes dearer than reads and a LIST\n")
	p("dearer than a HEAD; one body streams at 60 MiB/s, the single-blob figure the targets publish. The per-operation\n")
	p("numbers are assumptions within those statements (documented in `objstore/latency.Config`), not published figures; an\n")
	p("account's own *Success E2E Latency* metric is the better source, and every one of them is a flag.\n\n")

	r.latencySummary(&b)

	if len(r.problems) > 0 {
		p("### ❌ FAILED\n\n")
		for _, pr := range r.problems {
			p("- %s\n", firstLine(pr))
		}
		for _, ph := range r.phases() {
			for _, e := range ph.errs {
				p("- read error (%s): `%s`\n", ph.name, firstLine(e))
			}
		}
		p("\n")
	}
	if len(r.warnings) > 0 {
		p("### ⚠ Errors outside the reads\n\n")
		for _, w := range r.warnings {
			p("- %s\n", firstLine(w))
		}
		p("\n")
	}

	var goals []goalRow
	for _, g := range r.goals() {
		if g.met >= 0 {
			goals = append(goals, g)
		}
	}
	if len(goals) > 0 {
		p("### The lookup goals, on the model\n\n")
		p("The goals of the Azurite report that these tables measure, against the raw GET through the model (a goal is\n")
		p("about the engine's overhead over one GET, which the model keeps and Azurite's serialisation distorts).\n\n")
		p("| goal | target | measured | met? |\n|---|---|---|---|\n")
		for _, g := range goals {
			p("| %s | %s | %s | %s |\n", g.goal, g.target, g.measured, metMark(g.met))
		}
	}

	for i, sc := range r.scalings {
		r.scalingSection(&b, "###", fmt.Sprintf("L%d.", i+1), sc)
	}

	p("\n### What the model shows\n\n")
	for _, s := range r.interpretLatency() {
		p("- %s\n", s)
	}
	return b.String()
}

// latencySummary is the one table of ratios and request counts per level:
// what the run is for.
func (r *report) latencySummary(b *strings.Builder) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	if len(r.scalings) == 0 {
		return
	}
	p("### Ratios against the raw GET through the model, and requests\n\n")
	p("Each lookup's p50 over the raw GET's p50, its p99 over the raw GET's p99, measured in the same row (raw GET: the\n")
	p("whole %d-byte object through the model; raw HEAD: one HEAD through the model, the request an absent lookup\n", r.o.readSize)
	p("repeats). *Calls* are the objstore calls the reader made per lookup and the writers per appended row (the build's\n")
	p("appends for idle rows; the trickled appends, with the writers' background work, for active rows).\n\n")
	p("*Machine* is the raw GET's p50 over the model's median for it (the GET's p50 plus the body's transfer, %s ms): what\n", fms(r.modelRawGet()))
	p("this machine's CPU added to a request in that row. Near 1.00× the ratios are the model's; well above, the CPU's share\n")
	p("(the writers run in this process) weighs on every request, most on the lookups that issue many at once.\n\n")
	p("| table | level | writers | raw GET p50 / p99 | machine | raw HEAD p50 | absent p50 | absent p99 | WAL hit p50 | WAL hit p99 | base hit p50 | calls per absent lookup | calls per WAL hit | writer calls per append |\n")
	p("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|\n")
	for _, sc := range r.scalings {
		for _, row := range sc.rows {
			ph := row.phase
			state := "idle"
			appendCalls := perUnit(row.buildOps, row.built)
			if row.active {
				state = fmt.Sprintf("%d active", row.shards)
				appendCalls = perUnit(row.trickleOps, row.trickled)
			}
			machine := "—"
			if model := r.modelRawGet(); model > 0 {
				machine = fx(float64(qOf(ph.series[kRaw], 0.5)) / float64(model))
			}
			p("| %s | %s | %s | %s / %s ms | %s | %s ms | %s | %s | %s | %s | %s | %s | %s | %s |\n", sc.name, row.label, state,
				fms(qOf(ph.series[kRaw], 0.5)), fms(qOf(ph.series[kRaw], 0.99)), machine, fms(qOf(ph.series[kRawHead], 0.5)),
				fx(ratioOf(ph, kAbsent, 0.5)), fx(ratioOf(ph, kAbsent, 0.99)), fx(ratioOf(ph, kWAL, 0.5)), fx(ratioOf(ph, kWAL, 0.99)),
				fx(ratioOf(ph, kWarm, 0.5)), perLookup(ph, kAbsent), perLookup(ph, kWAL), appendCalls)
		}
	}
	p("\n")
}

// modelRawGet is the model's median of the raw GET: its first byte's
// median plus the payload's transfer (a constant added to a lognormal
// shifts its median by as much).
func (r *report) modelRawGet() time.Duration {
	cfg := r.e.lat.Config()
	d := cfg.Get.P50
	if cfg.Bandwidth > 0 {
		d += time.Duration(float64(r.o.readSize) / cfg.Bandwidth * float64(time.Second))
	}
	return d
}

// slowestHead is the model's median of the slowest of n independent
// HEADs: the HEAD distribution's quantile 0.5^(1/n).
func (r *report) slowestHead(n int) time.Duration {
	d := r.e.lat.Config().Head
	if d.P50 <= 0 || d.P99 <= d.P50 {
		return d.P50
	}
	q := math.Pow(0.5, 1/float64(n))
	z := math.Sqrt2 * math.Erfinv(2*q-1)
	sigma := math.Log(float64(d.P99)/float64(d.P50)) / 2.3263478740408408
	return time.Duration(float64(d.P50) * math.Exp(sigma*z))
}

// interpretLatency is the closing notes of the latency report, computed
// from this run's counts.
func (r *report) interpretLatency() []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	for _, sc := range r.scalings {
		r.interpretScaling(add, sc)
		// How the absent lookup's cost follows the number of active
		// writers: the slowest of 1 + N parallel HEADs.
		act := scaleRows(sc, true)
		if len(act) < 2 {
			continue
		}
		var parts []string
		for _, row := range act {
			n := max(1, len(row.phase.series[kAbsent].total))
			reqs := float64(total(row.phase.tallies[kAbsent].snap().ops)) / float64(n)
			heads := 1 + int(math.Round(float64(row.phase.tallies[kAbsent].snap().ops["Head head"])/float64(n)))
			parts = append(parts, fmt.Sprintf("%s %s (%d active): %.1f requests, p50 %s of the raw GET (the model's median of the slowest "+
				"of %d parallel HEADs: %s), %s of the raw HEAD; p99 %s of the raw GET", row.label, sc.spec.unit, row.shards, reqs,
				fx(ratioOf(row.phase, kAbsent, 0.5)), heads, fx(float64(r.slowestHead(heads))/float64(r.modelRawGet())),
				fx(ratioOfKind(row.phase, kAbsent, kRawHead, 0.5)), fx(ratioOf(row.phase, kAbsent, 0.99))))
		}
		add("**%s, absent id with writers active**, level by level: %s. The requests of one refresh go out together, so "+
			"the lookup costs the slowest of them, not their sum; the model's median of that maximum (over its own median of "+
			"the raw GET) is what the measured ratio comes close to, the machine's CPU adding its share.", sc.spec.label, strings.Join(parts, "; "))
	}
	if len(r.scalings) > 0 {
		add("Every ratio compares two things the model times alike, in the same row: what differs between them is the engine's " +
			"requests (how many, and how many one after another) and its CPU. On Azure the absolute numbers move with the account, " +
			"region and load; the request counts per lookup and per append do not.")
	}
	add("The machine is shared (load average %s at start, %s at end) and the writers run in the reader's process: CPU the "+
		"writers' engines take shows as latency of the reader's lookups, which the model does not have; compare ratios within "+
		"one run.", r.load0, r.load1)
	return out
}

// ratioOfKind is kind k's quantile q over kind base's in the same phase.
func ratioOfKind(ph *readPhase, k, base string, q float64) float64 {
	a, b := qOf(ph.series[k], q), qOf(ph.series[base], q)
	if a == 0 || b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/rollstore/rollstore/engine"
)

type report struct {
	o            *options
	e            *env
	started      time.Time
	dur          time.Duration
	load0, load1 string
	appends      []appendResult
	memory       []memResult
	quiet, load  *readPhase
	scalings     []*scaling // in the order of scaleSpecs
	sustain      *sustainResult
	parts        *partResult  // the partitions phase
	feed         *feedResult  // the feed phase
	probes       []phaseStats // the prober's, per phase
	figures      []figure     // written beside -out with the report
	problems     []string
	warnings     []string
}

// phases returns every read phase of the run, for the checks.
func (r *report) phases() []*readPhase {
	var out []*readPhase
	for _, ph := range []*readPhase{r.quiet, r.load} {
		if ph != nil {
			out = append(out, ph)
		}
	}
	for _, sc := range r.scalings {
		for _, row := range sc.rows {
			if row.phase != nil {
				out = append(out, row.phase)
			}
		}
	}
	if r.sustain != nil && r.sustain.reads != nil {
		out = append(out, r.sustain.reads)
	}
	return out
}

func moduleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "?"
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			return d.Version
		}
	}
	return "?"
}

func azuriteVersion() string {
	b, err := os.ReadFile("test/azurite/node_modules/azurite/package.json")
	if err != nil {
		return "?"
	}
	var p struct{ Version string }
	if json.Unmarshal(b, &p) != nil || p.Version == "" {
		return "?"
	}
	return p.Version
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "?"
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "?"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d", &kb); err != nil {
				return "?" // not "0 GiB"
			}
			return fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
		}
	}
	return "?"
}

func fms(d time.Duration) string {
	if d == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", ms(d))
}

func ratio(a, b float64) string {
	if b == 0 || a == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func dratio(a, b time.Duration) string { return ratio(float64(a), float64(b)) }

func (r *report) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	o := r.o
	mode := "full"
	if o.quick {
		mode = "quick (smoke test; scaled down)"
	}
	args := "(defaults)"
	if len(o.args) > 0 {
		args = "`" + strings.Join(o.args, " ") + "`"
	}

	p("# rollstore benchmarks\n\n")
	p("> **Azurite, not Azure.** Every number here was measured against Azurite — a single-threaded Node.js\n")
	p("> emulator (~2,000 GET/s ceiling on this machine) on loopback — on a shared, noisy 2-vCPU machine.\n")
	p("> Absolute figures say little about Azure Blob Storage. The result is the **ratio against the raw-SDK\n")
	p("> baseline measured in the same run**, same Azurite, same moment.\n\n")
	p("- **Date:** %s · **run:** %s, flags %s · wall time %s\n", r.started.Format("2006-01-02 15:04 MST"), mode, args, r.dur.Round(time.Second))
	p("- **Machine:** %s/%s, %d vCPU (%s, shared with other work), %s RAM; load average %s at start, %s at end\n",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel(), memTotal(), r.load0, r.load1)
	p("- **Software:** %s; azblob %s on both sides; Azurite %s (`--location` on disk, `--skipApiVersionCheck`)\n",
		runtime.Version(), moduleVersion("github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"), azuriteVersion())
	p("- **Reproduce:** `make bench` (full run, ≲ 20 min, 10 of them the merge run; rewrites this file and its figures in `bench/`,\n")
	p("  drawn by rollbench from the same run's data) · smoke test:\n")
	p("  `make bench BENCH_FLAGS=-quick` (< 90 s, prints only) · directly: `./test/azurite/azurite.sh run -- go run ./cmd/rollbench [-quick]`\n")
	p("  (`-phases backlog,shards` and the other flags of `go run ./cmd/rollbench -help` run parts; a partial run only prints)\n")
	p("- **Setup:** rollstore = `engine` with `engine.DefaultConfig()` (shard `bench-0`, `ReclaimGrace` 0) over `objstore/azure`;\n")
	p("  raw = `azblob.Client`. Both get the same HTTP transport settings (a copy of objstore/azure's) with separate\n")
	p("  connection pools, the same retry policy, and a fresh container each on the same Azurite. MB = 10⁶ bytes.\n")
	p("  Sections 7–9 run writers and the merger as processes of their own (`rollbench child`, each one `engine.DB` with\n")
	p("  its own shard), and time lookups from this process.\n\n")

	r.goalsSection(&b)

	if len(r.problems) > 0 {
		p("## ❌ FAILED\n\n")
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
		p("## ⚠ Errors outside the reads\n\n")
		p("Not read errors, so they do not fail the run; each is an error an engine call returned.\n\n")
		for _, w := range r.warnings {
			p("- %s\n", firstLine(w))
		}
		p("\n")
	}

	if len(r.appends) > 0 {
		r.appendsSection(&b)
	}
	if len(r.memory) > 0 {
		r.memorySection(&b)
	}
	if r.quiet != nil && r.load != nil {
		r.readsSection(&b)
	}
	for _, sc := range r.scalings {
		r.scalingSection(&b, "##", fmt.Sprintf("%d.", sc.spec.num), sc)
	}
	if r.sustain != nil {
		r.sustainSection(&b)
	}
	if len(r.probes) > 0 {
		r.proberSection(&b)
	}

	p("\n## Interpretation\n\n")
	for _, s := range r.interpret() {
		p("- %s\n", s)
	}
	return b.String()
}

func (r *report) appendsSection(b *strings.Builder) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## 1. Append throughput\n\n")
	p("Rows are appended with `tb.Append` (acknowledged = durable) by N goroutines; the baseline uploads the same bytes to\n")
	p("the same Azurite at the same concurrency: `UploadBuffer` for inline-sized payloads, `UploadStream` with objstore/azure's\n")
	p("block size and concurrency (4 MiB × 4) for large ones, whose bytes come from a generator reader on both sides.\n")
	p("Two rounds per side in the order raw, rollstore, rollstore, raw.\n\n")
	p("| payload | concurrency | rows per side | rollstore rows/s | rollstore MB/s | raw SDK rows/s | raw SDK MB/s | **rollstore / raw** | HTTP requests per row: rollstore | raw |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, a := range r.appends {
		p("| %s (%d B) | %d | %d | %.1f | %.2f | %.1f | %.2f | **%s** | %s | %s |\n", a.label, a.size, a.conc, a.rs.rows,
			a.rs.rowsPerSec(), a.rs.mbPerSec(), a.raw.rowsPerSec(), a.raw.mbPerSec(), ratio(a.rs.rowsPerSec(), a.raw.rowsPerSec()),
			trimFloat(float64(total(a.rs.reqs.http))/float64(a.rs.rows)), trimFloat(float64(total(a.raw.reqs.http))/float64(a.raw.rows)))
	}
	p("\nWhat rollstore issued per acknowledged row (objstore calls by the engine; then HTTP requests as they reached Azurite):\n\n")
	for _, a := range r.appends {
		p("- **%s:** %s\n  — HTTP: %s\n", a.label, perUnit(a.rs.reqs.ops, a.rs.rows), perUnit(a.rs.reqs.http, a.rs.rows))
	}
	for _, a := range r.appends {
		p("- raw **%s:** %s\n", a.label, perUnit(a.raw.reqs.http, a.raw.rows))
	}

}

func (r *report) memorySection(b *strings.Builder) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	o := r.o
	p("\n## 2. Peak memory of one %d MB append\n\n", o.hugeSize/1e6)
	p("One append alone, its payload streamed from a generator reader. A goroutine samples the Go heap\n")
	p("(`%s`) every millisecond; the peak RSS is reset through `/proc/self/clear_refs` before and read from `VmHWM` after.\n\n", metricHeapObjects)
	p("| writer | time | MB/s | Go heap peak above baseline | heap allocated during the write | peak RSS | RSS growth over start | heap samples |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, m := range r.memory {
		rss, growth := "n/a", "n/a"
		if m.rssPeak >= 0 {
			rss = fmt.Sprintf("%.1f MiB", mib(m.rssPeak))
			growth = fmt.Sprintf("%.1f MiB", mib(m.rssPeak-m.rssBase))
		}
		p("| %s | %s | %.1f | %.1f MiB | %.1f MiB | %s | %s | %d |\n", m.who, m.dur.Round(time.Millisecond),
			float64(m.size)/1e6/m.dur.Seconds(), mib(m.heapPeak), mib(m.allocated), rss, growth, m.samples)
	}
	if len(r.memory) == 2 {
		rs, raw := r.memory[0], r.memory[1]
		p("\nrollstore / raw: heap peak %s, RSS growth %s, time %s. Requests of the rollstore append: %s.\n",
			ratio(float64(rs.heapPeak), float64(raw.heapPeak)), ratio(float64(rs.rssPeak-rs.rssBase), float64(raw.rssPeak-raw.rssBase)),
			ratio(float64(rs.dur), float64(raw.dur)), perUnit(rs.reqs.http, 1))
		p("The SDK's `UploadStream` keeps its block buffers in anonymous `mmap`s, outside the Go heap; objstore/azure stages\n")
		p("its blocks from Go memory (the SDK unmaps its buffers while net/http may still write from them): the heap figure\n")
		p("counts rollstore's blocks and misses the SDK's, RSS includes both.\n")
	}

}

func (r *report) readsSection(b *strings.Builder) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	o := r.o
	p("\n## 3. Read latency, %d-byte payloads, quiet\n\n", o.readSize)
	p("One read at a time (latency, not throughput), the kinds interleaved. A read is `tb.OpenPayload(id, 0, -1)` then\n")
	p("reading to EOF; every byte is compared with what was written. *Headers* is the time until `OpenPayload` (or the raw\n")
	p("`DownloadStream`) returned, i.e. the payload's response headers arrived; the other columns are time to the last byte\n")
	p("(for absent ids, time to the not-found answer). Milliseconds; ratios are against the raw SDK GET of the same phase.\n\n")
	r.readTable(b, r.quiet)
	p("\n## 4. The same reads under load\n\n")
	if li := r.load.load; li != nil {
		p("While the reads ran, the writer process (shard `bench-0`, same table) streamed %d MB appends back to back\n", li.hugeSize/1e6)
		p("(%d completed, %s each on average) and looped %d concurrent %d-byte appends → `Flush` → `Merge` with zero reclaim\n",
			li.hugeDone, avgDur(li.hugeDur).Round(time.Millisecond), li.churnRows, o.readSize)
		p("grace (%d iterations: %d base versions committed, %d generations reclaimed under the reads; merge pass %s on average).\n",
			li.churnIters, li.merges, li.reclaimed, avgDur(li.mergeDur).Round(time.Millisecond))
		p("%d of %d samples (%.0f%%) were taken while a %d MB append was streaming.", li.samplesWithHuge, li.samplesTotal,
			100*float64(li.samplesWithHuge)/float64(max(li.samplesTotal, 1)), li.hugeSize/1e6)
		if li.writer != nil && li.writer.get("versions collected") == 0 {
			p(" No base version was garbage-collected during the phase (`RetainAge` defaults to 10 min), so reads on a stale\n")
			p("snapshot whose data files were collected are not exercised here.")
		}
		if li.timedOut {
			p(" The phase hit its time cap (-load-max) before every kind had %d samples.", o.loadSamples)
		}
		p("\n\n")
	}
	r.readTable(b, r.load)

	p("\n### What each read kind does\n\n")
	for _, k := range []string{kHot, kWarm, kCold, kWAL, kColdWAL, kRecent, kFresh, kNewest, kEarlier, kAbsent, kRaw, kRawHead, kRawSpan} {
		p("- **%s**: %s.\n", kindNames[k], kindNotes[k])
	}

	p("\n## 5. Requests per read\n\n")
	p("Counted by a wrapper around the engine's `objstore.Bucket` (the calls the engine makes, by what the key is) and by\n")
	p("the HTTP transport (the requests that reached Azurite, with the response bytes received). Under load, requests are\n")
	p("attributed through the read's context, so the writer's traffic is not in these figures.\n\n")
	p("| phase | read kind | objstore calls per read | HTTP requests per read | KB received per read | served from the payload cache |\n")
	p("|---|---|---|---:|---:|---:|\n")
	for _, ph := range []*readPhase{r.quiet, r.load} {
		for _, k := range ph.kinds {
			n := len(ph.series[k].total)
			t := ph.tallies[k].snap()
			ops := perUnit(t.ops, n)
			if isRaw(k) {
				ops = "— (raw SDK: " + perUnit(t.http, n) + ")"
			} else if len(t.ops) == 0 {
				ops = "none"
			}
			p("| %s | %s | %s | %s | %.1f | %d of %d |\n", ph.name, kindNames[k], ops, trimFloat(float64(total(t.http))/float64(max(n, 1))),
				float64(t.bytes)/1e3/float64(max(n, 1)), ph.cached[k], n)
		}
	}

	p("\n## 6. Engine counters\n\n")
	p("Deltas of `db.Stats()` of the reading process(es), per read kind (exact: reads were sequential). Checks: no read\n")
	p("errors, no missing-file errors, no overload refusals, and `absent` equal to the number of absent-id lookups.\n\n")
	names := readCounters(&engine.Stats{}).names()
	p("| phase | read kind | samples | %s |\n", strings.Join(names, " | "))
	p("|---|---|---:|%s\n", strings.Repeat("---:|", len(names)))
	for _, ph := range []*readPhase{r.quiet, r.load} {
		for _, k := range ph.kinds {
			st := ph.stats[k]
			if st == nil {
				continue
			}
			vals := make([]string, len(st))
			for i, c := range st {
				vals[i] = fmt.Sprint(c.v)
			}
			p("| %s | %s | %d | %s |\n", ph.name, kindNames[k], len(ph.series[k].total), strings.Join(vals, " | "))
		}
	}
	if li := r.load.load; li != nil && li.writer != nil {
		parts := make([]string, len(li.writer))
		for i, c := range li.writer {
			parts[i] = fmt.Sprintf("%s %d", c.name, c.v)
		}
		p("\nWriter process during the load phase: %s.\n", strings.Join(parts, ", "))
	}
	if len(r.problems) == 0 {
		p("\n**Checks passed:** %d + %d reads, 0 read errors, 0 missing-file errors, absent answers = absent lookups.\n",
			sumSamples(r.quiet), sumSamples(r.load))
	}
}

func (c counters) names() []string {
	out := make([]string, len(c))
	for i, x := range c {
		out[i] = x.name
	}
	return out
}

func sumSamples(ph *readPhase) int {
	n := 0
	for _, s := range ph.series {
		n += len(s.total)
	}
	return n
}

func avgDur(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t / time.Duration(len(ds))
}

func (r *report) readTable(b *strings.Builder, ph *readPhase) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	raw := ph.series[kRaw].summary()
	p("| read kind | n | headers p50 | p50 | p99 | **max** | p50 / raw | p99 / raw | max / raw |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, k := range ph.kinds {
		s := ph.series[k].summary()
		name := kindNames[k]
		if k == kRaw {
			name = "*" + name + "*"
		}
		p("| %s | %d | %s | %s | %s | **%s** | %s | %s | %s |\n", name, s.n, fms(s.first50), fms(s.p50), fms(s.p99), fms(s.max),
			dratio(s.p50, raw.p50), dratio(s.p99, raw.p99), dratio(s.max, raw.max))
	}
}

// firstLine keeps an error's first line: the SDK's errors go on with the
// whole HTTP response.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.TrimSpace(s)
}

// proberSection shows Azurite's own latency phase by phase: a raw GET of
// one blob every -probe-every, on a goroutine of its own.
func (r *report) proberSection(b *strings.Builder) {
	p := func(f string, a ...any) { fmt.Fprintf(b, f, a...) }
	p("\n## 10. Azurite itself, phase by phase\n\n")
	p("A raw SDK GET of a %d-byte blob every %v on a goroutine of its own, from the quiet reads on, whatever the\n", r.o.readSize, r.o.probeEvery)
	p("phases wait for: a pause of Azurite (its metadata saves, its garbage collection) shows here, a pause of one of\n")
	p("rollstore's processes does not. Milliseconds.\n\n")
	p("| phase | duration | probes | p50 | p99 | max | failed | probes over 1 s | time covered by them |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.probes {
		p("| %s | %v | %d | %s | %s | %s | %d | %d | %v |\n", s.name, s.dur.Round(time.Second), s.n, fms(s.p50), fms(s.p99), fms(s.max),
			s.errs, s.slow, s.stalled.Round(100*time.Millisecond))
	}
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/engine/keyspace"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/latency"
	"github.com/rollstore/rollstore/objstore/memory"
)

// The request breakdowns are only as good as the key classes: if the
// engine's layout changes, this fails instead of the report quietly
// counting "other".
func TestKeyClass(t *testing.T) {
	table, err := keyspace.ForTable("reads")
	if err != nil {
		t.Fatal(err)
	}
	lay, err := table.Incarnation(keyspace.NewIncarnationName(time.Unix(1_800_000_000, 0), 7))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := lay.DataFile("00000000000000000001-abcdef")
	idx, _ := lay.DataIndex("00000000000000000001-abcdef")
	pay, _ := lay.Payload("bench-0", 3, "0123456789abcdef")
	for key, want := range map[string]string{
		table.Descriptor():           "descriptor",
		lay.Registry():               "registry",
		lay.Members():                "members",
		lay.Head("bench-0"):          "head",
		lay.Version(7):               "manifest",
		data:                         "data-file",
		idx:                          "data-index",
		lay.Segment("bench-0", 3, 1): "segment",
		lay.Seal("bench-0", 3):       "seal",
		pay:                          "payload-object",
		"not a table key":            "other",
	} {
		if got := keyClass(key); got != want {
			t.Errorf("keyClass(%q) = %q, want %q", key, got, want)
		}
	}
	for prefix, want := range map[string]string{
		lay.WALPrefix():                    "wal/",
		lay.GenerationPrefix("bench-0", 3): "generation/",
		lay.VersionsPrefix():               "versions/",
		lay.DataPrefix():                   "data/",
	} {
		if got := prefixClass(prefix); got != want {
			t.Errorf("prefixClass(%q) = %q, want %q", prefix, got, want)
		}
	}
}

func TestRestOp(t *testing.T) {
	for _, c := range []struct {
		method, url, rangeHdr, want string
	}{
		{"GET", "/acct/c/k", "", "Get Blob"},
		{"GET", "/acct/c/k", "bytes=0-9", "Get Blob (range)"},
		{"HEAD", "/acct/c/k", "", "Get Blob Properties"},
		{"GET", "/acct/c?restype=container&comp=list&prefix=t/wal/", "", "List Blobs"},
		{"PUT", "/acct/c/k?comp=block&blockid=x", "", "Put Block"},
		{"PUT", "/acct/c/k?comp=blocklist", "", "Put Block List"},
		{"PUT", "/acct/c/k", "", "Put Blob"},
		{"PUT", "/acct/c?restype=container", "", "Create Container"},
		{"DELETE", "/acct/c/k", "", "Delete Blob"},
		{"POST", "/acct/c?restype=container&comp=batch", "", "Blob Batch"},
	} {
		req := httptest.NewRequest(c.method, "http://127.0.0.1"+c.url, nil)
		if c.rangeHdr != "" {
			req.Header.Set("x-ms-range", c.rangeHdr)
		}
		if got := restOp(req); got != c.want {
			t.Errorf("%s %s: %q, want %q", c.method, c.url, got, c.want)
		}
	}
}

func TestQuantile(t *testing.T) {
	var s series
	for i := 1; i <= 100; i++ {
		s.add(0, time.Duration(i)*time.Millisecond)
	}
	got := s.summary()
	if got.p50 != 50*time.Millisecond || got.p99 != 99*time.Millisecond || got.max != 100*time.Millisecond || got.n != 100 {
		t.Fatalf("summary = %+v", got)
	}
}

func TestStreamAndPayload(t *testing.T) {
	n, err := io.Copy(io.Discard, newStream("x", 3<<20+17))
	if err != nil || n != 3<<20+17 {
		t.Fatalf("stream gave %d bytes, %v", n, err)
	}
	a, b := payload("id-1", 4096), payload("id-1", 4096)
	if string(a) != string(b) || string(a) == string(payload("id-2", 4096)) {
		t.Fatal("payload must be deterministic per id and differ between ids")
	}
	if got := perUnit(map[string]int64{"Head manifest": 4, "List wal/": 2, "Put seal": 0}, 2); got != "2 Head manifest + 1 List wal/ + <0.01 Put seal" {
		t.Fatalf("perUnit = %q", got)
	}
}

func TestLeaseKeyClass(t *testing.T) {
	table, _ := keyspace.ForTable("reads")
	lay, err := table.Incarnation(keyspace.NewIncarnationName(time.Unix(1_800_000_000, 0), 7))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{lay.ShardLease("bench-0"), lay.MergerLease()} {
		if got := keyClass(k); got != "lease" {
			t.Errorf("keyClass(%q) = %q, want lease", k, got)
		}
	}
}

func TestIntList(t *testing.T) {
	var l intList
	if err := l.Set("10, 100,1000"); err != nil || l.String() != "10,100,1000" {
		t.Fatalf("Set: %v, %v", l, err)
	}
	for _, bad := range []string{"", "1,x", "0", "10,5", "3,3"} {
		if err := l.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
}

// phaseOf builds a read phase whose kinds all took the given latencies
// (milliseconds), the raw GET rawMS.
func phaseOf(rawMS float64, kinds map[string]float64) *readPhase {
	names := []string{kRaw}
	for k := range kinds {
		names = append(names, k)
	}
	p := newReadPhase("test", names)
	for range 100 {
		p.series[kRaw].add(0, time.Duration(rawMS*float64(time.Millisecond)))
		for k, v := range kinds {
			p.series[k].add(0, time.Duration(v*float64(time.Millisecond)))
		}
	}
	return p
}

func TestFlatnessAndLookupGoals(t *testing.T) {
	o := &options{}
	specs := scaleSpecs(o)
	flat := &scaling{name: "backlog", spec: specs[0]}
	for i, label := range []string{"10", "100", "1000", "5000"} {
		// The raw GET drifts; the ratios stay at 1.2× (absent) and 1.5× (WAL),
		// except the WAL hit at 5000, which grows 40%.
		raw := 1 + 0.1*float64(i)
		wal := 1.5 * raw
		if label == "5000" {
			wal = 2.1 * raw
		}
		ph := phaseOf(raw, map[string]float64{kAbsent: 1.2 * raw, kWAL: wal, kWarm: 1.1 * raw})
		flat.rows = append(flat.rows, &scaleRow{label: label, phase: ph})
	}
	rows := scaleRows(flat, false)
	devs, worst := flatness(rows, kAbsent, 0.5)
	if worst > 1e-9 || len(devs) != 4 {
		t.Fatalf("absent flatness: %v, worst %v; want all 0", devs, worst)
	}
	if _, worst := flatness(rows, kWAL, 0.5); worst < 0.39 || worst > 0.41 {
		t.Fatalf("WAL flatness worst %v, want 0.4", worst)
	}
	r := &report{o: o, scalings: []*scaling{flat}}
	if g := r.flatGoal(flat.spec, flat, false); g.met != 0 || !strings.Contains(g.measured, "WAL hit p50 ±40%") {
		t.Fatalf("flat goal = %+v, want missed with WAL ±40%%", g)
	}
	if g := r.lookupGoal("absent", "≤ 1.5×", kAbsent, 0.5, 1.5, false); g.met != 1 {
		t.Fatalf("absent goal = %+v, want met", g)
	}
	if g := r.lookupGoal("WAL", "≤ 2×", kWAL, 0.5, 2, false); g.met != 0 || !strings.Contains(g.measured, "1.50–2.10×") {
		t.Fatalf("WAL goal = %+v, want missed, 1.50–2.10×", g)
	}
	if g := r.flatGoal(specs[1], nil, false); g.met != -1 {
		t.Fatalf("a table not measured must say so: %+v", g)
	}
}

func TestBoundedGoal(t *testing.T) {
	mk := func(gens ...int) *sustainResult {
		s := &sustainResult{shards: 3, dur: 10 * time.Minute}
		for i, g := range gens {
			s.samples = append(s.samples, pendingSample{at: time.Duration(i) * s.dur / time.Duration(len(gens)), gens: g, maxShard: (g + 2) / 3})
		}
		return s
	}
	if g := mk(3, 6, 4, 3, 6, 5, 3, 4).boundedGoal(); g.met != 1 {
		t.Fatalf("steady backlog: %+v, want met", g)
	}
	if g := mk(3, 6, 9, 12, 15, 18, 21, 24).boundedGoal(); g.met != 0 {
		t.Fatalf("growing backlog: %+v, want missed", g)
	}
	s := mk(3, 4, 3, 4)
	s.writers = []childMsg{{Backpressure: 2}}
	if g := s.boundedGoal(); g.met != 0 {
		t.Fatalf("back-pressure refusals: %+v, want missed", g)
	}
	s = mk(3, 4, 3, 4)
	s.dur = time.Minute
	if g := s.boundedGoal(); g.met != -1 {
		t.Fatalf("a short run does not meet a 10-minute goal: %+v", g)
	}
}

func TestReplayRatio(t *testing.T) {
	rp := replay{pass: passReport{InBytes: 10e6, OutBytes: 10e6}, rawGet: 300 * time.Millisecond, rawPut: 200 * time.Millisecond}
	rp.pass.Result.Duration = time.Second
	if got := rp.ratio(); got != 0.5 {
		t.Fatalf("ratio = %v, want 0.5 (raw moved the same bytes in half the time)", got)
	}
	if got := rp.mbps(time.Second); got != 20 {
		t.Fatalf("mbps = %v, want 20", got)
	}
}

// The merger's recorder sees exactly the objects a pass reads whole and the
// bytes it writes, and passes bodies through unchanged.
func TestIORecorder(t *testing.T) {
	ctx := context.Background()
	table, _ := keyspace.ForTable("t")
	lay, _ := table.Incarnation(keyspace.NewIncarnationName(time.Unix(1_800_000_000, 0), 7))
	mem := memory.New()
	rec := &ioRecorder{}
	b := newCountingBucket(mem, newTally(), rec)
	seg := lay.Segment("s", 1, 1)
	data, _ := lay.DataFile("00000000000000000001-abcdef")
	if _, err := b.Put(ctx, seg, bytes.NewReader(make([]byte, 1000)), objstore.PutOptions{Size: 1000}); err != nil {
		t.Fatal(err)
	}
	rec.reset() // the segment's write is the writer's, not the pass's
	rc, _, err := b.Get(ctx, seg)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := io.Copy(io.Discard, rc); err != nil || n != 1000 {
		t.Fatalf("read %d, %v", n, err)
	}
	rc.Close()
	if _, err := b.Put(ctx, data, bytes.NewReader(make([]byte, 700)), objstore.PutOptions{Size: 700}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, lay.Registry(), bytes.NewReader([]byte("{}")), objstore.PutOptions{Size: 2}); err != nil {
		t.Fatal(err)
	}
	pr := rec.report(engine.MergeResult{}, time.Now())
	if len(pr.Inputs) != 1 || pr.Inputs[0] != seg || pr.InBytes != 1000 || pr.OutBytes != 700 || pr.OutFiles != 1 {
		t.Fatalf("report = %+v", pr)
	}
	if _, err := b.(objstore.Leaser).AcquireLease(ctx, lay.MergerLease(), 15*time.Second); err != nil {
		t.Fatalf("leases must pass through the counting bucket: %v", err)
	}
}

func TestTailBuffer(t *testing.T) {
	tb := &tailBuffer{name: "w"}
	for i := range 8 {
		fmt.Fprintf(tb, "line %d\n", i)
	}
	fmt.Fprint(tb, "partial")
	if got := tb.last(); got != "line 3 | line 4 | line 5 | line 6 | line 7" {
		t.Fatalf("last = %q", got)
	}
}

// TestLatencyScaling runs the scaling tables on the latency model, tiny:
// the writers in this process, every latency a fraction of a millisecond.
// It checks the report's rows and the request counts, not timings.
func TestLatencyScaling(t *testing.T) {
	if testing.Short() {
		t.Skip("runs engines for a few seconds")
	}
	args := []string{"-store", "latency", "-quick", "-out", "",
		"-backlog", "3,6", "-shards", "1,3", "-shard-segments", "6",
		"-scale-samples", "6", "-scale-spread", "0s", "-scale-base-rows", "3", "-base-rows", "3", "-wal-rows", "2",
		"-writer-idle-after", "1s", "-active-interval", "30ms", "-latency-bandwidth", "600"}
	for _, op := range latency.Ops {
		name := "-latency-" + strings.ReplaceAll(string(op), "_", "-")
		args = append(args, name+"-p50", "200us", name+"-p99", "800us")
	}
	o, err := parseFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := measure(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.problems) > 0 {
		t.Fatalf("problems: %v", rep.problems)
	}
	if len(rep.scalings) != 2 {
		t.Fatalf("%d scaling tables, want backlog and shards", len(rep.scalings))
	}
	for _, sc := range rep.scalings {
		if len(sc.rows) != 4 {
			t.Fatalf("%s: %d rows, want 2 levels × (idle, active)", sc.name, len(sc.rows))
		}
		for _, row := range sc.rows {
			ph := row.phase
			what := fmt.Sprintf("%s %s active=%v", sc.name, row.label, row.active)
			for _, k := range []string{kAbsent, kWAL, kWarm, kRaw, kRawHead} {
				if n := len(ph.series[k].total); n != 6 {
					t.Errorf("%s: %d %s samples, want 6", what, n, kindNames[k])
				}
			}
			n := int64(len(ph.series[kAbsent].total))
			absent := ph.tallies[kAbsent].snap().ops
			// The tables are partitioned (16 partitions): an absent lookup
			// probes its id's partition head, one HEAD, writers idle or
			// active; only a whole refresh (once per ResidentMaxAge) reads
			// the registry and the active partitions' heads.
			heads, refreshes := absent["Head head"], ph.stats[kAbsent].get("refreshes")
			if heads < n || absent["Head registry"] > n || heads > n+16*absent["Head registry"] {
				t.Errorf("%s: an absent lookup made %s (%d refreshes), want one partition-head HEAD each, more only in whole refreshes",
					what, perUnit(absent, int(n)), refreshes)
			}
			if wal := ph.tallies[kWAL].snap().ops; wal["GetRange segment"] != n {
				t.Errorf("%s: a WAL hit made %s, want one ranged GET of its segment", what, perUnit(wal, int(n)))
			}
			if row.active {
				if len(ph.series[kFresh].total) == 0 || row.trickled == 0 {
					t.Errorf("%s: %d rows trickled, %d read just acknowledged", what, row.trickled, len(ph.series[kFresh].total))
				}
				// Appends forwarded to one owner at once may share a
				// group commit's segment, and the window counted may hold
				// a write begun before it.
				if segs := row.trickleOps["PutIfAbsent segment"]; segs < 1 {
					t.Errorf("%s: %d segment puts for %d trickled appends", what, segs, row.trickled)
				}
			} else if segs := row.buildOps["PutIfAbsent segment"]; row.built > 0 && (segs < 1 || segs > int64(row.built+row.shards)) {
				// One more per writer at most: the stop of the previous
				// row's trickle cancels an append whose group commit (the
				// writer's, not the append's) may still land in this window.
				t.Errorf("%s: %d segment puts for %d appended rows", what, segs, row.built)
			}
		}
	}
	m := rep.e.lat
	for _, op := range []latency.Op{latency.OpHead, latency.OpGet, latency.OpPutIf, latency.OpLease} {
		if m.Calls(op) == 0 {
			t.Errorf("the model charged no %s request", op)
		}
	}
	md := rep.latencyMarkdown()
	for _, want := range []string{
		latencyHeading,
		"| HEAD | Head | 0.2 ms | 0.8 ms |",
		"### L1. Lookups against the backlog: 3 / 6 pending segments",
		"### L2. Lookups against the number of writer shards: 1 / 3",
		"| backlog | 6 | idle |",
		"| shards | 3 | 3 active |",
		"| 3 | active | ",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if strings.Contains(md, "\n## ") {
		t.Error("the latency report has a second level-2 heading: it would end its own section in BENCHMARKS.md")
	}

	// Written, the report embeds its figures, drawn from the same rows.
	dir := t.TempDir()
	rep.o.out = filepath.Join(dir, "BENCHMARKS.md")
	if err := rep.outputLatency(); err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(rep.o.out)
	if err != nil {
		t.Fatal(err)
	}
	lookups := []string{"absent id, writers idle", "absent id, writers active", "WAL hit, writers idle", "base hit, writers idle",
		"just acknowledged, active", "raw GET, writers idle", "raw HEAD, writers idle"}
	checkFigures(t, string(written), dir, map[string][]string{
		"bench/model-lookups-backlog.svg": lookups,
		"bench/model-lookups-shards.svg":  lookups,
	})
}

// The latency run replaces its own section of BENCHMARKS.md; the Azurite
// run keeps it.
func TestBenchmarksSections(t *testing.T) {
	azurite := "# rollstore benchmarks\n\n## 1. Appends\n\nold\n"
	fixture := "## Staging fixture on Azurite\n\nfixture\n\n## Run to run\n\nhand\n"
	lat := latencyHeading + ": old\n\n### The model\n\nold model\n"
	got := spliceSection(azurite+"\n"+fixture, latencyHeading, latencyHeading+": new\n")
	if want := azurite + "\n" + fixture + "\n" + latencyHeading + ": new\n"; got != want {
		t.Fatalf("appending the section:\n%s\nwant\n%s", got, want)
	}
	got = spliceSection(azurite+"\n"+lat+"\n"+fixture, latencyHeading, latencyHeading+": new\n")
	if want := azurite + "\n" + latencyHeading + ": new\n\n" + fixture; got != want {
		t.Fatalf("replacing the section:\n%s\nwant\n%s", got, want)
	}
	if got, want := keptTail(azurite+"\n"+fixture+"\n"+lat), fixture+"\n"+lat; got != want {
		t.Fatalf("kept tail:\n%s\nwant\n%s", got, want)
	}
	if got := keptTail(azurite); got != "" {
		t.Fatalf("kept tail of a file with no other run's section: %q", got)
	}
}

// The latency report's expectation for an absent lookup: the median of
// the slowest of n HEADs drawn from the model.
func TestSlowestHead(t *testing.T) {
	m, err := latency.New(memory.New(), latency.StandardConfig()) // HEAD: p50 5 ms, p99 25 ms
	if err != nil {
		t.Fatal(err)
	}
	r := &report{o: &options{readSize: 53248}, e: &env{lat: m}}
	if got := r.slowestHead(1); got < 4999*time.Microsecond || got > 5001*time.Microsecond {
		t.Errorf("one HEAD: median %v, want 5ms", got)
	}
	// 0.5^(1/17) = 0.96 is the normal's 1.75σ: 5 ms × 5^(1.75/2.326) = 16.8 ms.
	if got := r.slowestHead(17); got < 16500*time.Microsecond || got > 17100*time.Microsecond {
		t.Errorf("slowest of 17 HEADs: median %v, want 16.8ms", got)
	}
	if r.slowestHead(4) >= r.slowestHead(5) {
		t.Error("the slowest of more HEADs must be slower")
	}
	// The raw GET's median: the first byte's 6 ms plus 53,248 B at 60 MiB/s.
	if got := r.modelRawGet(); got < 6840*time.Microsecond || got > 6860*time.Microsecond {
		t.Errorf("raw GET median %v, want 6.85ms", got)
	}
}

// TestLatencyPartitions runs the partitions phase on the latency model,
// tiny: it checks the report's rows and the counts, not timings.
func TestLatencyPartitions(t *testing.T) {
	if testing.Short() {
		t.Skip("runs engines for a few seconds")
	}
	args := []string{"-store", "latency", "-quick", "-phases", "partitions", "-out", "",
		"-part-writers", "1,3", "-part-partitions", "4,8", "-part-samples", "8", "-part-spread", "0s",
		"-active-interval", "30ms", "-part-fwd-samples", "4", "-part-fwd-size", "2048",
		"-part-sustain-writers", "2", "-part-sustain", "2s", "-part-sustain-rate", "40", "-part-sustain-size", "512", "-part-tick", "250ms",
		"-sustain-verify", "10", "-latency-bandwidth", "600"}
	for _, op := range latency.Ops {
		name := "-latency-" + strings.ReplaceAll(string(op), "_", "-")
		args = append(args, name+"-p50", "200us", name+"-p99", "800us")
	}
	o, err := parseFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	if !o.partitionsOnly() {
		t.Fatal("-phases partitions is the partitions phase alone")
	}
	rep, err := measure(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.problems) > 0 {
		t.Fatalf("problems: %v", rep.problems)
	}
	p := rep.parts
	if p == nil || len(p.grid) != 4 || len(p.az) != 0 || len(p.fwd) != 1 || len(p.sustains) != 1 {
		t.Fatalf("partitions result: %+v", p)
	}
	for _, c := range p.grid {
		what := fmt.Sprintf("%d writers × %d partitions", c.writers, c.partitions)
		n := int64(len(c.ph.series[kAbsent].total))
		if n != 8 || len(c.ph.series[kRaw].total) != 8 || len(c.ph.series[kRawHead].total) != 8 {
			t.Errorf("%s: %d absent samples, want 8 of each kind", what, n)
		}
		// One HEAD of the id's partition head per absent lookup; a whole
		// refresh (once per ResidentMaxAge) probes more.
		if ops := c.ph.tallies[kAbsent].snap().ops; ops["Head head"] < n {
			t.Errorf("%s: absent lookups made %s", what, perUnit(ops, int(n)))
		}
		if c.w.acked == 0 || c.w.errs > 0 {
			t.Errorf("%s: %d appends acknowledged, %d failed: %v", what, c.w.acked, c.w.errs, c.w.errSample)
		}
		if c.writers == 1 && c.w.forwarded != 0 {
			t.Errorf("%s: %d appends forwarded by a lone writer", what, c.w.forwarded)
		}
		// Every committed segment is one create-if-absent; rows may share one.
		if segs := c.writerOps["PutIfAbsent segment"]; segs < c.segments || c.segments == 0 {
			t.Errorf("%s: %d segment puts, %d segments written", what, segs, c.segments)
		}
	}
	f := p.fwd[0]
	for _, k := range []string{kOwner, kRouted, kViaError, kRawPut} {
		if got := len(f.ph.series[k].total); got != 4 {
			t.Errorf("forwarding: %d samples of %s, want 4", got, kindNames[k])
		}
	}
	if segs := f.ops[kRouted]["PutIfAbsent segment"]; segs != 4 {
		t.Errorf("a forwarded append commits one segment on the owner: %d for 4", segs)
	}
	s := p.sustains[0]
	if s.w.offered == 0 || s.w.acked == 0 || s.verified != s.checked || s.checked == 0 || len(s.points) == 0 || s.rawPut.summary().n == 0 {
		t.Errorf("sustained writes: offered %d, acked %d, %d of %d read back, %d samples", s.w.offered, s.w.acked, s.verified, s.checked, len(s.points))
	}
	md := rep.partitionsMarkdown()
	for _, want := range []string{
		partHeading + ": lookups and appends",
		"| measure | result | goal | verdict |",
		"latency model: absent id p50 / raw GET p50, writers active, 1 / 3 writers × 4 / 8 partitions",
		"store calls per acknowledged append",
		"Azurite: absent id p50 / raw GET p50, writers active | not run (-store latency)",
		"append p50 through a non-owner (Stage, owner's Commit) / through the owner, 2KiB payload",
		"sustained writes, 2 writers, 40 rows/s offered",
		"### P1. Absent ids with writers active, latency model",
		"| 3 | 8 | ",
		"### P5. Sustained writes with merges, latency model",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the section lacks %q", want)
		}
	}
	if strings.Count(md, "\n## ") != 0 {
		t.Error("the section has a second level-2 heading")
	}

	dir := t.TempDir()
	rep.o.out = filepath.Join(dir, "BENCHMARKS.md")
	if err := rep.outputPartitions(); err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(rep.o.out)
	if err != nil {
		t.Fatal(err)
	}
	checkFigures(t, string(written), dir, map[string][]string{
		"bench/model-partitions-pending.svg": {"2 writers: pending", "2 writers: max in a partition"},
	})
}

// TestLatencyFeed runs the feed phase on the latency model, tiny: it
// checks that every case ran, every row was checked, and what the report
// says, not timings.
func TestLatencyFeed(t *testing.T) {
	if testing.Short() {
		t.Skip("runs engines for a few seconds")
	}
	args := []string{"-store", "latency", "-quick", "-phases", "feed", "-out", "",
		"-feed-samples", "6", "-feed-spacing", "5ms", "-feed-fast-poll", "10ms", "-feed-rows", "40", "-feed-gen-rows", "15",
		"-feed-size", "3000", "-feed-rounds", "2", "-feed-consumers", "1,4", "-feed-idle-wait", "200ms", "-feed-idle-window", "300ms", "-latency-bandwidth", "600"}
	for _, op := range latency.Ops {
		name := "-latency-" + strings.ReplaceAll(string(op), "_", "-")
		args = append(args, name+"-p50", "200us", name+"-p99", "800us")
	}
	o, err := parseFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	if !o.feedOnly() || o.out != "" {
		t.Fatal("-phases feed is the feed phase alone")
	}
	rep, err := measure(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.problems) > 0 {
		t.Fatalf("problems: %v", rep.problems)
	}
	f := rep.feed
	if f == nil || len(f.fresh) != 4 || len(f.sets) != 2 || len(f.idles) != 3 || f.merge == nil {
		t.Fatalf("feed result: %+v", f)
	}
	if n := len(f.baseline.total); n != 6 {
		t.Errorf("%d raw PUT + GET samples, want 6", n)
	}
	for _, fc := range f.fresh {
		if fc.rows != 6 || len(fc.e2e.total) != 6 || fc.pages == 0 || fc.pages > 6 {
			t.Errorf("freshness %s: %d rows in %d pages, %d samples; want 6 rows", fc.label, fc.rows, fc.pages, len(fc.e2e.total))
		}
		// Every delivered row is one GET of its segment (one row each).
		if got := fc.own.snap().ops["Get segment"]; got != 6 {
			t.Errorf("freshness %s: the consumer made %d segment GETs for 6 rows of a segment each", fc.label, got)
		}
	}
	for _, s := range f.sets {
		for _, k := range thrKinds {
			r := s.reads[k]
			if r == nil || r.rows != 2*40 || r.reads != 2 || len(r.rates) != 2 {
				t.Fatalf("%s %s: %+v, want 2 reads of 40 rows", s.when, k, r)
			}
		}
		if r := s.reads[kFeedPayload]; r.bytes != 2*40*3000 || r.uncarried != 0 {
			t.Errorf("%s: the feed carried %d payload bytes (%d rows not carried), want every row's", s.when, r.bytes, r.uncarried)
		}
		if r := s.reads[kFeedMeta]; r.bytes != 0 {
			t.Errorf("%s: a read without payloads carried %d bytes", s.when, r.bytes)
		}
	}
	// 40 rows, a flush after every 15: three rounds, each sealing a
	// generation in every partition the round wrote to.
	if m := f.merge; m.rows != 40 || m.pending != 0 || m.reclaimed != 0 || m.gens < 3 {
		t.Errorf("merge: %+v; want 40 rows merged, nothing pending or reclaimed", m)
	}
	if f.expired != 0 {
		t.Errorf("%d reads expired", f.expired)
	}
	for _, fi := range f.idles {
		if fi.delivered != 0 || fi.ops["Head head"] == 0 || fi.answers == 0 {
			t.Errorf("idle %d consumers, poll %v: %d delivered, %d head probes, %d answers", fi.consumers, fi.poll, fi.delivered, fi.ops["Head head"], fi.answers)
		}
	}
	md := rep.feedMarkdown()
	for _, want := range []string{
		feedHeading + ": freshness, throughput",
		"| measure | result | goal | verdict |",
		"freshness, consumer in the owner's process: append start → row delivered / raw PUT + GET, p50",
		"freshness, consumer in another process, poll 10ms",
		"relayed to the owner",
		"throughput with payloads (3000B each)",
		"store requests/s of a process whose 1 / 4 consumers long-poll an idle table",
		"catch-up after the merge: reads answered 410 cursor_expired | 0 of 4 reads",
		"### F1. Freshness", "### F2. Reading a whole table", "### F3. Long-polls on an idle table", "### What the numbers say",
		"| after merge | feed, payloads | 80 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the section lacks %q", want)
		}
	}
	if strings.Count(md, "\n## ") != 0 {
		t.Error("the section has a second level-2 heading")
	}

	dir := t.TempDir()
	rep.o.out = filepath.Join(dir, "BENCHMARKS.md")
	if err := rep.outputFeed(); err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(rep.o.out)
	if err != nil {
		t.Fatal(err)
	}
	checkFigures(t, string(written), dir, map[string][]string{
		"bench/model-feed-freshness.svg": {"the owner's process", "another process, poll 250ms", "another process, poll 10ms",
			"another process, relayed to the owner, poll 250ms", "raw PUT + GET (baseline)"},
	})
}

// A delivery with a gap, a repeat, a row out of order, or a row missing
// fails the checks; a right one passes.
func TestCheckDelivery(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var ids []string
	written := map[string]wrote{}
	for i := range 4 {
		id := fmt.Sprintf("row-%d", i)
		for j := 0; engine.PartitionOf(id, 2) != 0; j++ {
			id = fmt.Sprintf("row-%d-%d", i, j)
		}
		ids = append(ids, id)
		// One at a time: each append began after the one before was acknowledged.
		written[id] = wrote{start: t0.Add(time.Duration(2*i) * time.Second), ack: t0.Add(time.Duration(2*i+1) * time.Second)}
	}
	deliver := func(order ...int) []got {
		var out []got
		for off, i := range order {
			out = append(out, got{id: ids[i], part: 0, off: uint64(off)})
		}
		return out
	}
	if p := checkDelivery("ok", deliver(0, 1, 2, 3), written, 2, nil); len(p) != 0 {
		t.Fatalf("a right delivery failed: %v", p)
	}
	for name, c := range map[string]struct {
		rows []got
		want string
	}{
		"swapped":   {deliver(0, 2, 1, 3), "began after it was acknowledged"},
		"repeated":  {deliver(0, 1, 1, 2, 3), "delivered twice"},
		"missing":   {deliver(0, 1, 2), "never delivered"},
		"gap":       {append(deliver(0, 1), got{id: ids[2], off: 3}, got{id: ids[3], off: 4}), "want 2 (offsets dense)"},
		"bytes":     {append(deliver(0, 1, 2), got{id: ids[3], off: 3, bad: "differs"}), "differs"},
		"partition": {append(deliver(0, 1, 2), got{id: ids[3], part: 1, off: 0}), "delivered in partition 1"},
	} {
		p := checkDelivery(name, c.rows, written, 2, nil)
		if !strings.Contains(strings.Join(p, "\n"), c.want) {
			t.Errorf("%s: problems %q, want one saying %q", name, p, c.want)
		}
	}
}

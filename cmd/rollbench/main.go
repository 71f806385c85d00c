// Command rollbench measures rollstore's engine against the raw Azure SDK on
// the same Azurite, in one run:
//
//  1. append throughput for 1 KiB, 53 KiB and 64 MiB payloads, against raw
//     SDK uploads of the same bytes at the same concurrency (one Put Blob
//     per row for the small ones);
//  2. peak memory (Go heap and RSS) of one 300 MB append, against the raw
//     SDK's UploadStream of the same bytes;
//  3. point-read latency of 53,248-byte payloads — hot payloads (payload
//     cache), base hits, cold base hits (fresh process), WAL hits, absent
//     ids — against a raw SDK GET of a blob of that size;
//  4. the same reads while the writer streams 300 MB appends into the same
//     table and loops small appends, flushes and merges with zero reclaim
//     grace, so generations are reclaimed under the reads;
//  5. lookups against the backlog (10 … 5,000 pending one-row segments) and
//     against the number of writer shards (1 … 16), with writer processes
//     idle and then active, reading what they acknowledge at once;
//  6. 10 minutes of sustained writes from 3 writer processes with a merger
//     process: pending generations over time, and merge passes replayed
//     with the raw SDK (the same objects read, a blob of the size written).
//
// Writers and the merger of 5 and 6 are copies of this command started as
// child processes (`rollbench child`, see child.go). It counts every
// request (objstore calls and HTTP requests) per read kind, checks every
// byte read and the engine's counters, prints a markdown report that opens
// with the performance goal table filled in, and writes it to BENCHMARKS.md. A
// goal missed is reported as missed; any read error, wrong byte,
// missing-file error, or absent answer for a present row fails the run:
// the report then has a FAILED section listing them, and the exit status is
// 1.
//
// Run it under the Azurite harness; make bench does exactly this:
//
//	./test/azurite/azurite.sh run -- go run ./cmd/rollbench          # full, ≲ 20 min
//	./test/azurite/azurite.sh run -- go run ./cmd/rollbench -quick   # smoke, < 90 s, prints only
//
// Azurite is one Node.js thread on loopback: its numbers are not Azure's.
// Only the ratios against the raw-SDK baseline measured in the same run
// carry beyond this machine.
//
// Azurite also serves one request at a time, so it cannot show what
// requests issued in parallel cost on Azure. -store latency runs the
// scaling tables of 5 on objstore/memory behind objstore/latency's model
// of Azure Blob Storage instead (requests wait latencies drawn per
// operation, in parallel), the raw baseline through the same model, the
// writers in this process (make bench-latency; a few minutes, no Azurite):
//
//	go run ./cmd/rollbench -store latency            # rewrites its section of BENCHMARKS.md
//	go run ./cmd/rollbench -store latency -quick     # prints only
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/objstore/latency"
)

type options struct {
	quick bool

	smallSize, mediumSize, largeSize int64
	smallRows, mediumRows, largeRows int
	smallConc, largeConc             int

	hugeSize int64

	readSize          int
	baseRows, walRows int
	samples           int
	loadSamples       int
	churnRows         int
	loadMax           time.Duration

	// Scaling tables.
	backlog        []int
	shardCounts    []int
	shardSegments  int
	scaleSamples   int
	scaleBaseRows  int
	idleAfter      time.Duration
	activeInterval time.Duration
	activeFor      time.Duration

	// Merge under sustained writes.
	sustainDur      time.Duration
	sustainShards   int
	sustainRate     float64
	sustainConc     int
	sustainTick     time.Duration
	sustainVerify   int
	passSampleEvery time.Duration
	mergePrebuild   int
	probeEvery      time.Duration

	// Partitions (partitions.go).
	partWriters, partCounts, partAzWriters, partSustainWriters []int
	partSamples, partFwdSamples, partFwdSize, partSustainSize  int
	partSpread, partSustainDur, partTick                       time.Duration
	partSustainRate                                            float64

	// The feed phase (feed.go).
	feed feedOptions

	phases map[string]bool

	// The store: "azurite" (the default) or "latency" (objstore/memory
	// behind objstore/latency's model, the writers in this process).
	store string
	lat   latency.Config

	out  string
	keep bool
	seed uint64

	args []string
}

// allPhases are the report's phases in order; -phases selects some.
var allPhases = []string{"appends", "memory", "reads", "backlog", "shards", "partitions", "feed", "merge"}

// latencyPhases are the phases -store latency runs by default; the others
// compare against the Azure SDK itself (uploads, memory, merge replays), or
// are about Azurite. It may also run partitions (-phases partitions): its
// model parts then, without its Azurite parts.
var latencyPhases = []string{"backlog", "shards"}

// The stores.
const (
	storeAzurite = "azurite"
	storeLatency = "latency"
)

type intList []int

func (l *intList) String() string {
	parts := make([]string, len(*l))
	for i, v := range *l {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ",")
}

func (l *intList) Set(s string) error {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || v < 1 {
			return fmt.Errorf("%q: want positive integers separated by commas", s)
		}
		if len(out) > 0 && v <= out[len(out)-1] {
			return fmt.Errorf("%q: want increasing values", s)
		}
		out = append(out, v)
	}
	*l = out
	return nil
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("rollbench", flag.ContinueOnError)
	fs.BoolVar(&o.quick, "quick", false, "smoke run (< 60 s): scaled-down sizes and counts; prints the report without writing -out unless -out is given")
	fs.Int64Var(&o.smallSize, "small-size", 1<<10, "bytes of the small append payload")
	fs.Int64Var(&o.mediumSize, "medium-size", 53<<10, "bytes of the medium append payload")
	fs.Int64Var(&o.largeSize, "large-size", 64<<20, "bytes of the large append payload")
	fs.IntVar(&o.smallRows, "small-rows", 3000, "small appends per side")
	fs.IntVar(&o.mediumRows, "medium-rows", 1500, "medium appends per side")
	fs.IntVar(&o.largeRows, "large-rows", 6, "large appends per side")
	fs.IntVar(&o.smallConc, "small-concurrency", 16, "concurrent appends for small and medium payloads")
	fs.IntVar(&o.largeConc, "large-concurrency", 2, "concurrent appends for large payloads")
	fs.Int64Var(&o.hugeSize, "huge-size", 300e6, "bytes of the single large append (memory phase and read load)")
	fs.IntVar(&o.readSize, "read-size", 53248, "payload bytes of the rows read")
	fs.IntVar(&o.baseRows, "base-rows", 400, "rows merged into the base for reads (and raw blobs)")
	fs.IntVar(&o.walRows, "wal-rows", 200, "rows sealed but not merged for WAL reads")
	fs.IntVar(&o.samples, "samples", 500, "sequential samples per read kind, quiet")
	fs.IntVar(&o.loadSamples, "load-samples", 200, "sequential samples per read kind, under load")
	fs.IntVar(&o.churnRows, "churn-rows", 8, "rows per iteration of the append+flush+merge loop under load")
	fs.DurationVar(&o.loadMax, "load-max", 4*time.Minute, "cap on the under-load read phase")
	o.backlog = intList{10, 100, 1000, 5000}
	o.shardCounts = intList{1, 4, 16}
	fs.Var((*intList)(&o.backlog), "backlog", "pending-segment levels of the backlog-scaling table (one writer, one row per segment)")
	fs.Var((*intList)(&o.shardCounts), "shards", "writer-shard counts of the shard-scaling table")
	fs.IntVar(&o.shardSegments, "shard-segments", 1024, "pending segments of the shard-scaling table, split evenly over the shards")
	fs.IntVar(&o.scaleSamples, "scale-samples", 400, "samples per read kind per row of the scaling tables")
	fs.IntVar(&o.scaleBaseRows, "scale-base-rows", 100, "rows merged into the base of each scaling table before its backlog")
	fs.DurationVar(&o.idleAfter, "writer-idle-after", time.Second, "engine.Config.IdleAfter of the scaling tables' writer processes")
	fs.DurationVar(&o.activeInterval, "active-interval", 500*time.Millisecond, "one append per writer per this interval in the \"writers active\" rows")
	fs.DurationVar(&o.activeFor, "scale-spread", 10*time.Second, "each row of the scaling tables spreads its samples over at least this long")
	fs.DurationVar(&o.sustainDur, "sustain", 10*time.Minute, "length of the merge run under sustained writes")
	fs.IntVar(&o.sustainShards, "sustain-shards", 3, "writer processes of the merge run")
	fs.Float64Var(&o.sustainRate, "sustain-rate", 25, "rows per second offered by each writer of the merge run")
	fs.IntVar(&o.sustainConc, "sustain-concurrency", 4, "concurrent appends of each writer of the merge run")
	fs.DurationVar(&o.sustainTick, "sustain-tick", 5*time.Second, "how often the merge run samples pending generations (and reads)")
	fs.IntVar(&o.sustainVerify, "sustain-verify", 300, "acknowledged rows of the merge run read back at its end")
	fs.DurationVar(&o.passSampleEvery, "pass-sample-every", 20*time.Second, "replay a merge pass with the raw SDK at most this often")
	fs.IntVar(&o.mergePrebuild, "merge-prebuild", 300, "rows per writer sealed before the merge run (its first, quiet, pass)")
	fs.DurationVar(&o.probeEvery, "probe-every", 250*time.Millisecond, "during the merge run, a raw GET on its own goroutine this often (Azurite's own stalls)")
	o.partWriters, o.partCounts, o.partAzWriters, o.partSustainWriters = intList{1, 4, 16, 64}, intList{16, 64, 256}, intList{1, 4, 16}, intList{3, 16}
	fs.Var((*intList)(&o.partWriters), "part-writers", "partitions phase: writer counts of the latency model's grid")
	fs.Var((*intList)(&o.partCounts), "part-partitions", "partitions phase: partition counts of the latency model's grid")
	fs.Var((*intList)(&o.partAzWriters), "part-az-writers", "partitions phase: writer counts of the absent lookups on Azurite")
	fs.Var((*intList)(&o.partSustainWriters), "part-sustain-writers", "partitions phase: writer counts of the sustained writes")
	fs.IntVar(&o.partSamples, "part-samples", 200, "partitions phase: absent lookups (and raw GETs, raw HEADs) per cell")
	fs.DurationVar(&o.partSpread, "part-spread", 6*time.Second, "partitions phase: each cell spreads its samples over at least this long")
	fs.IntVar(&o.partFwdSamples, "part-fwd-samples", 100, "partitions phase: appends per path (owner, non-owner) and raw PUTs")
	fs.IntVar(&o.partFwdSize, "part-fwd-size", 53<<10, "partitions phase: payload bytes of the owner/non-owner appends")
	fs.DurationVar(&o.partSustainDur, "part-sustain", 2*time.Minute, "partitions phase: length of each sustained-write run (the issue's goal is 10m)")
	fs.Float64Var(&o.partSustainRate, "part-sustain-rate", 100, "partitions phase: rows per second offered by all the writers of a sustained-write run together")
	fs.IntVar(&o.partSustainSize, "part-sustain-size", 8<<10, "partitions phase: payload bytes of the sustained writes' rows")
	fs.DurationVar(&o.partTick, "part-tick", 2*time.Second, "partitions phase: how often the sustained writes sample pending generations")
	o.feed.register(fs)
	phases := fs.String("phases", strings.Join(allPhases, ","), "phases to run ("+strings.Join(allPhases, ",")+"); a partial run only prints")
	fs.StringVar(&o.out, "out", "BENCHMARKS.md", `write the report here ("" to only print it)`)
	fs.BoolVar(&o.keep, "keep", false, "keep the bench containers instead of deleting them")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the read-id choice")
	fs.StringVar(&o.store, "store", storeAzurite, "the store: azurite (ROLLSTORE_AZURITE_CONNECTION_STRING; raw side the Azure SDK), or latency "+
		"(objstore/memory behind objstore/latency's model of Azure Blob Storage, raw side the same model; phases "+strings.Join(latencyPhases, ",")+")")
	tier := fs.String("latency-tier", "standard", "-store latency: the model's preset, standard or premium (latency.StandardConfig, PremiumConfig); the -latency-* flags below override it")
	latFlags := latency.StandardConfig()
	for _, op := range latency.Ops {
		d := latFlags.For(op)
		name := "latency-" + strings.ReplaceAll(string(op), "_", "-")
		fs.DurationVar(&d.P50, name+"-p50", d.P50, fmt.Sprintf("-store latency: median latency of a %s request (standard tier's shown)", op))
		fs.DurationVar(&d.P99, name+"-p99", d.P99, fmt.Sprintf("-store latency: 99th-percentile latency of a %s request", op))
	}
	bwMiB := fs.Float64("latency-bandwidth", latFlags.Bandwidth/(1<<20), "-store latency: MiB/s of one body's transfer (0: instant)")
	fs.Uint64Var(&latFlags.Seed, "latency-seed", latFlags.Seed, "-store latency: seed of the model's draws")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	def := func(name string, apply func()) {
		if !set[name] {
			apply()
		}
	}
	phaseList := allPhases
	if o.quick {
		def("part-writers", func() { o.partWriters = intList{1, 4} })
		def("part-partitions", func() { o.partCounts = intList{16, 64} })
		def("part-az-writers", func() { o.partAzWriters = intList{1, 4} })
		def("part-samples", func() { o.partSamples = 30 })
		def("part-spread", func() { o.partSpread = time.Second })
		def("part-fwd-samples", func() { o.partFwdSamples = 15 })
		def("part-sustain", func() { o.partSustainDur = 10 * time.Second })
		def("sustain-verify", func() { o.sustainVerify = 50 })
		o.feed.quick(def)
	}
	switch o.store {
	case storeAzurite:
	case storeLatency:
		phaseList = append(latencyPhases[:len(latencyPhases):len(latencyPhases)], "partitions", "feed")
		switch *tier {
		case "standard":
			o.lat = latency.StandardConfig()
		case "premium":
			o.lat = latency.PremiumConfig()
		default:
			return nil, fmt.Errorf("-latency-tier %q: want standard or premium", *tier)
		}
		for _, op := range latency.Ops {
			name := "latency-" + strings.ReplaceAll(string(op), "_", "-")
			if set[name+"-p50"] {
				o.lat.For(op).P50 = latFlags.For(op).P50
			}
			if set[name+"-p99"] {
				o.lat.For(op).P99 = latFlags.For(op).P99
			}
		}
		if set["latency-bandwidth"] {
			o.lat.Bandwidth = *bwMiB * (1 << 20)
		}
		o.lat.Seed = latFlags.Seed
		if err := o.lat.Validate(); err != nil {
			return nil, err
		}
		// Sized for a two-core machine: the writers run in this process
		// (each an engine.DB of its own), and a full run takes a few
		// minutes. More writers (-shards 1,4,16,64) work, but 64 active
		// writers in this process saturate two cores: the report's
		// "machine" column then shows the CPU's share.
		def("phases", func() { *phases = strings.Join(latencyPhases, ",") })
		def("backlog", func() { o.backlog = intList{10, 100, 1000} })
		def("shard-segments", func() { o.shardSegments = 256 })
		def("scale-samples", func() { o.scaleSamples = 200 })
		def("scale-spread", func() { o.activeFor = 5 * time.Second })
		def("scale-base-rows", func() { o.scaleBaseRows = 50 })
		def("base-rows", func() { o.baseRows = 50 })
		def("wal-rows", func() { o.walRows = 10 })
		if o.quick {
			def("backlog", func() { o.backlog = intList{10, 50} })
			def("shards", func() { o.shardCounts = intList{1, 4} })
			def("shard-segments", func() { o.shardSegments = 32 })
			def("scale-samples", func() { o.scaleSamples = 30 })
			def("scale-spread", func() { o.activeFor = time.Second })
			def("scale-base-rows", func() { o.scaleBaseRows = 10 })
			def("base-rows", func() { o.baseRows = 10 })
			def("wal-rows", func() { o.walRows = 5 })
			def("out", func() { o.out = "" })
		}
	default:
		return nil, fmt.Errorf("-store %q: want %s or %s", o.store, storeAzurite, storeLatency)
	}
	if o.quick && o.store == storeAzurite {
		def("small-rows", func() { o.smallRows = 200 })
		def("medium-rows", func() { o.mediumRows = 120 })
		def("large-size", func() { o.largeSize = 16 << 20 })
		def("large-rows", func() { o.largeRows = 2 })
		def("huge-size", func() { o.hugeSize = 64e6 })
		def("base-rows", func() { o.baseRows = 80 })
		def("wal-rows", func() { o.walRows = 40 })
		def("samples", func() { o.samples = 30 })
		def("load-samples", func() { o.loadSamples = 15 })
		def("load-max", func() { o.loadMax = 15 * time.Second })
		def("backlog", func() { o.backlog = intList{10, 100, 200} })
		def("shard-segments", func() { o.shardSegments = 160 })
		def("scale-samples", func() { o.scaleSamples = 25 })
		def("scale-spread", func() { o.activeFor = time.Second })
		def("scale-base-rows", func() { o.scaleBaseRows = 20 })
		def("sustain", func() { o.sustainDur = 15 * time.Second })
		def("sustain-tick", func() { o.sustainTick = 2 * time.Second })
		def("sustain-verify", func() { o.sustainVerify = 50 })
		def("pass-sample-every", func() { o.passSampleEvery = 5 * time.Second })
		def("merge-prebuild", func() { o.mergePrebuild = 60 })
		def("out", func() { o.out = "" })
	}
	o.phases = map[string]bool{}
	for ph := range strings.SplitSeq(*phases, ",") {
		ph = strings.TrimSpace(ph)
		if !slices.Contains(allPhases, ph) {
			return nil, fmt.Errorf("-phases: unknown phase %q (want some of %s)", ph, strings.Join(allPhases, ","))
		}
		if !slices.Contains(phaseList, ph) {
			return nil, fmt.Errorf("-phases: phase %q needs Azurite (-store %s runs %s)", ph, o.store, strings.Join(phaseList, ","))
		}
		o.phases[ph] = true
	}
	// A partial run only prints, except a run of the partitions phase
	// alone, which writes its own section (as -store latency writes its).
	defaults := len(allPhases)
	if o.store == storeLatency {
		defaults = len(latencyPhases)
	}
	if len(o.phases) < defaults && !set["out"] && !o.partitionsOnly() && !o.feedOnly() {
		o.out = ""
	}
	switch {
	case o.smallRows < 2 || o.mediumRows < 2 || o.largeRows < 2:
		return nil, errors.New("-small-rows, -medium-rows and -large-rows must be at least 2 (two rounds per side)")
	case o.smallConc < 1 || o.largeConc < 1 || o.churnRows < 1:
		return nil, errors.New("concurrencies and -churn-rows must be positive")
	case o.smallSize < 1 || o.mediumSize < 1 || o.largeSize < 1 || o.hugeSize < 1 || o.readSize < 1:
		return nil, errors.New("sizes must be positive")
	case o.baseRows < 1 || o.walRows < 1 || o.samples < 1 || o.loadSamples < 1:
		return nil, errors.New("row and sample counts must be positive")
	case o.scaleSamples < 1 || o.scaleBaseRows < 1 || o.mergePrebuild < 1 || o.sustainShards < 1 || o.sustainConc < 1 || o.sustainRate <= 0:
		return nil, errors.New("scaling and merge-run counts and rates must be positive")
	case o.shardSegments < o.shardCounts[len(o.shardCounts)-1]:
		return nil, errors.New("-shard-segments must be at least the largest shard count")
	case o.idleAfter <= 0 || o.activeInterval <= 0 || o.sustainTick <= 0 || o.sustainDur <= 0:
		return nil, errors.New("durations must be positive")
	case o.partSamples < 1 || o.partFwdSamples < 1 || o.partFwdSize < 1 || o.partSustainSize < 1 || o.partSustainRate <= 0 ||
		o.partSustainDur <= 0 || o.partTick <= 0 || o.partSpread < 0:
		return nil, errors.New("the -part-* counts, sizes, rates and durations must be positive")
	}
	if err := o.feed.validate(); err != nil {
		return nil, err
	}
	o.args = args
	return o, nil
}

// partitionsOnly: the run is the partitions phase alone.
func (o *options) partitionsOnly() bool { return len(o.phases) == 1 && o.phases["partitions"] }

var started = time.Now()

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rollbench %6.1fs  %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		os.Exit(childMain(os.Args[2:]))
	}
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "rollbench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "rollbench: FAIL:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o *options) error {
	rep, err := measure(ctx, o)
	if err != nil {
		return err
	}
	return rep.output()
}

// measure runs the phases o selects and returns their report.
func measure(ctx context.Context, o *options) (*report, error) {
	rep := &report{o: o, started: time.Now().UTC(), load0: loadavg()}
	e, err := setup(ctx, o)
	if err != nil {
		return nil, err
	}
	rep.e = e
	defer func() {
		if o.keep && e.raw != nil {
			logf("kept containers %s and %s", e.rsContainer, e.rawContainer)
			return
		}
		if cerr := e.cleanup(context.WithoutCancel(ctx)); cerr != nil {
			logf("cleanup: %v", cerr)
		}
	}()
	if e.lat != nil {
		logf("store: %s; writers run in this process", e.endpoint)
	} else {
		logf("rollstore container %s, raw container %s on %s", e.rsContainer, e.rawContainer, e.endpoint)
	}

	// The writer-and-merger process.
	wdb, err := engine.Open(e.store, writerConfig())
	if err != nil {
		return nil, err
	}
	defer wdb.Close(context.WithoutCancel(ctx))

	// 1. Append throughput.
	if o.phases["appends"] {
		for _, a := range []struct {
			label      string
			size       int64
			rows, conc int
		}{
			{sizeLabel(o.smallSize), o.smallSize, o.smallRows, o.smallConc},
			{sizeLabel(o.mediumSize), o.mediumSize, o.mediumRows, o.smallConc},
			{sizeLabel(o.largeSize), o.largeSize, o.largeRows, o.largeConc},
		} {
			res, err := benchAppends(ctx, e, wdb, a.label, a.size, a.rows, a.conc)
			if err != nil {
				return nil, err
			}
			rep.appends = append(rep.appends, res)
		}
	}

	// 2. Peak memory of one large append.
	if o.phases["memory"] {
		if rep.memory, err = benchMemory(ctx, e, wdb, o.hugeSize); err != nil {
			return nil, err
		}
	}

	// 3. Read latency, quiet. The reads fixture also holds the raw blobs
	// every later phase's baseline reads (the partitions phase has its own).
	if o.partitionsOnly() {
		return rep.partitions(ctx, e)
	}
	if o.feedOnly() {
		return rep.feedPhase(ctx, e)
	}
	r, err := setupReads(ctx, e, wdb)
	if err != nil {
		return nil, err
	}
	// From here on a raw GET every -probe-every shows Azurite's own pauses,
	// phase by phase (the latency model has none to show).
	if e.lat == nil {
		r.startProber(ctx)
		defer r.prober.stop()
	}
	if o.phases["reads"] {
		r.prober.mark("3. quiet reads")
		rep.quiet = quietReads(ctx, r, o.samples)

		// 4. The same reads under a large append and merge/reclaim churn.
		r.prober.mark("4. reads under load")
		rep.load, err = loadReads(ctx, r, o.loadSamples, o.hugeSize, o.churnRows, o.loadMax)
		if err != nil {
			e.problem(err.Error())
		}
	}

	// 5. Lookups against the backlog and the number of writer shards.
	for _, spec := range scaleSpecs(o) {
		if !o.phases[spec.name] || ctx.Err() != nil {
			continue
		}
		r.prober.mark(fmt.Sprintf("%d. %s scaling", spec.num, strings.TrimSuffix(spec.name, "s")))
		sc, err := runScaling(ctx, r, spec)
		if sc != nil {
			rep.scalings = append(rep.scalings, sc)
		}
		if err != nil {
			e.problem(strings.TrimSuffix(spec.name, "s") + " scaling: " + err.Error())
		}
	}

	// Partitioned tables, on the latency model and on Azurite.
	if o.phases["partitions"] && ctx.Err() == nil {
		if _, err := rep.partitions(ctx, e); err != nil {
			return nil, err
		}
	}

	// The change feed.
	if o.phases["feed"] && ctx.Err() == nil {
		if _, err := rep.feedPhase(ctx, e); err != nil {
			return nil, err
		}
	}

	// 6. Merges under sustained writes.
	if o.phases["merge"] && ctx.Err() == nil {
		r.prober.mark("9. merges under sustained writes")
		if rep.sustain, err = sustainedMerge(ctx, r); err != nil {
			e.problem("merge under sustained writes: " + err.Error())
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rep.problems = append(rep.problems, e.problems...)
	rep.warnings = append(rep.warnings, e.warnings...)
	for _, ph := range rep.phases() {
		rep.problems = append(rep.problems, ph.verify()...)
	}
	if rep.parts != nil {
		rep.problems = append(rep.problems, rep.parts.verify()...)
	}
	if rep.feed != nil {
		rep.problems = append(rep.problems, rep.feed.verify()...)
	}
	rep.dur = time.Since(rep.started)
	if r != nil && r.prober != nil {
		rep.probes = r.prober.perPhase(time.Since(r.prober.start))
	}
	rep.load1 = loadavg()
	return rep, nil
}

// output prints the report and writes it to -out. A failed run still
// writes its report: the measurements stand, and the FAILED section at the
// top says what broke; the error it returns fails make.
func (rep *report) output() error {
	o := rep.o
	if o.partitionsOnly() {
		return rep.outputPartitions()
	}
	if o.feedOnly() {
		return rep.outputFeed()
	}
	if rep.e.lat != nil {
		return rep.outputLatency()
	}
	md := rep.markdown()
	fmt.Print(md)
	if o.out != "" {
		// Sections other runs own (the staging fixture's, the latency
		// model's), at the end of the file, are kept.
		if old, err := os.ReadFile(o.out); err == nil {
			if tail := keptTail(string(old)); tail != "" {
				md = strings.TrimRight(md, "\n") + "\n" + tail
			}
		}
		if rep.parts != nil {
			md = spliceSection(md, partHeading, rep.partitionsMarkdown())
		}
		if rep.feed != nil {
			md = spliceSection(md, feedHeading, rep.feedMarkdown())
		}
		if err := os.WriteFile(o.out, []byte(md), 0o644); err != nil {
			return err
		}
		logf("wrote %s", o.out)
		if err := rep.writeFigures(); err != nil {
			return err
		}
	}
	if len(rep.problems) > 0 {
		for _, p := range rep.problems {
			fmt.Fprintln(os.Stderr, "rollbench: problem:", p)
		}
		return fmt.Errorf("%d problems (see the FAILED section of the report)", len(rep.problems))
	}
	return nil
}

func sizeLabel(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// Command rollbench measures rollstore's engine against the raw Azure SDK on
// the same Azurite, in one run:
//
//  1. append throughput for 1 KiB, 53 KiB and 64 MiB payloads, against raw
//     SDK uploads of the same bytes at the same concurrency;
//  2. peak memory (Go heap and RSS) of one 300 MB append, against the raw
//     SDK's UploadStream of the same bytes;
//  3. point-read latency of 53,248-byte payloads — warm and cold base hits,
//     WAL hits, absent ids — against a raw SDK GET of a blob of that size;
//  4. the same reads while the writer streams 300 MB appends into the same
//     table and loops small appends, flushes and merges with zero reclaim
//     grace, so generations are reclaimed under the reads.
//
// It counts every request (objstore calls and HTTP requests) per read kind,
// checks every byte read and the engine's counters, prints a markdown report
// and writes it to BENCHMARKS.md. Any read error, missing-file error, or
// absent answer for a present row fails the run: the report opens with a
// FAILED section listing them, and the exit status is 1.
//
// Run it under the Azurite harness; make bench does exactly this:
//
//	./test/azurite/azurite.sh run -- go run ./cmd/rollbench          # full, ≲ 10 min
//	./test/azurite/azurite.sh run -- go run ./cmd/rollbench -quick   # smoke, < 60 s, prints only
//
// Azurite is one Node.js thread on loopback: its numbers are not Azure's.
// Only the ratios against the raw-SDK baseline measured in the same run
// carry beyond this machine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rollstore/rollstore/engine"
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

	out  string
	keep bool
	seed uint64

	args []string
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
	fs.StringVar(&o.out, "out", "BENCHMARKS.md", `write the report here ("" to only print it)`)
	fs.BoolVar(&o.keep, "keep", false, "keep the bench containers instead of deleting them")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the read-id choice")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.quick {
		def := func(name string, apply func()) {
			if !set[name] {
				apply()
			}
		}
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
		def("out", func() { o.out = "" })
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
	}
	o.args = args
	return o, nil
}

var started = time.Now()

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rollbench %6.1fs  %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
}

func main() {
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

func run(ctx context.Context, o *options) (err error) {
	rep := &report{o: o, started: time.Now().UTC(), load0: loadavg()}
	e, err := setup(ctx, o)
	if err != nil {
		return err
	}
	rep.e = e
	defer func() {
		if o.keep {
			logf("kept containers %s and %s", e.rsContainer, e.rawContainer)
			return
		}
		if cerr := e.cleanup(context.WithoutCancel(ctx)); cerr != nil {
			logf("cleanup: %v", cerr)
		}
	}()
	logf("rollstore container %s, raw container %s on %s", e.rsContainer, e.rawContainer, e.endpoint)

	// The writer-and-merger process.
	wdb, err := engine.Open(e.store, writerConfig())
	if err != nil {
		return err
	}
	defer wdb.Close(context.WithoutCancel(ctx))

	// 1. Append throughput.
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
			return err
		}
		rep.appends = append(rep.appends, res)
	}

	// 2. Peak memory of one large append.
	if rep.memory, err = benchMemory(ctx, e, wdb, o.hugeSize); err != nil {
		return err
	}

	// 3. Read latency, quiet.
	r, err := setupReads(ctx, e, wdb)
	if err != nil {
		return err
	}
	rep.quiet = quietReads(ctx, r, o.samples)

	// 4. The same reads under a large append and merge/reclaim churn.
	rep.load, err = loadReads(ctx, r, o.loadSamples, o.hugeSize, o.churnRows, o.loadMax)
	if err != nil {
		rep.problems = append(rep.problems, err.Error())
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	rep.problems = append(rep.problems, rep.quiet.verify()...)
	rep.problems = append(rep.problems, rep.load.verify()...)
	rep.dur = time.Since(rep.started)
	rep.load1 = loadavg()

	// A failed run still writes its report: the measurements stand, and the
	// FAILED section at the top says what broke. The exit status fails make.
	md := rep.markdown()
	fmt.Print(md)
	if o.out != "" {
		// Sections other tools own (the staging fixture's) are kept.
		if old, err := os.ReadFile(o.out); err == nil {
			if i := strings.Index(string(old), "\n## Staging fixture on Azurite"); i >= 0 {
				md = strings.TrimRight(md, "\n") + "\n" + string(old[i:])
			}
		}
		if err := os.WriteFile(o.out, []byte(md), 0o644); err != nil {
			return err
		}
		logf("wrote %s", o.out)
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

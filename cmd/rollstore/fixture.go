package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rollstore/rollstore/cmd/rollstore/internal/fixture"
	"github.com/rollstore/rollstore/objstore"
)

// fixtureConfig is everything `rollstore fixture` is configured with:
// where the store is, by the same flags and ROLLSTORE_* variables as
// serve (one environment configures both), and the run itself, whose
// variables are ROLLSTORE_FIXTURE_*.
type fixtureConfig struct {
	storeConfig
	run       fixture.Config
	logLevel  string
	logFormat string
}

func defaultFixtureConfig() fixtureConfig {
	return fixtureConfig{
		storeConfig: defaultStoreConfig(),
		run:         fixture.DefaultConfig(),
		logLevel:    "warn",
		logFormat:   "text",
	}
}

// flags registers the flags, in the sections of --help, and returns the
// names of the store's, which keep serve's environment variables.
func (c *fixtureConfig) flags(fs *flag.FlagSet) (storeFlags map[string]bool, groups *flagGroups) {
	g := newFlagGroups(fs)
	c.storeConfig.flags(fs, g)
	storeFlags = map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { storeFlags[f.Name] = true })
	fs.Lookup("prefix").Usage = "key `prefix` of the run, which must hold no object (see --force); default: a new fixture-<UTC time>-<random>"

	g.start("Run")
	r := &c.run
	fs.IntVar(&r.Writers, "writers", r.Writers, "writer shards, each a pod with its own engine, shard lease and listener")
	fs.IntVar(&r.Readers, "readers", r.Readers, "reader pods, each with its own engine and caches")
	fs.StringVar(&r.Table, "table", r.Table, "`name` of the table the run creates (it must not exist)")
	fs.Var(byteSize{&r.LargeSize}, "large-size", "`size` of each large payload, streamed from a generator (never held in memory)")
	fs.IntVar(&r.LargeCount, "large-count", r.LargeCount, "large payloads to write")
	fs.IntVar(&r.LargeConcurrency, "large-concurrency", r.LargeConcurrency, "large payloads streaming at once")
	fs.Var(byteSize{&r.SmallSize}, "small-size", "`size` of each small payload; lookups and the baseline read payloads of this size")
	fs.IntVar(&r.SmallCount, "small-count", r.SmallCount, "small payloads to write")
	fs.IntVar(&r.SmallConcurrency, "small-concurrency", r.SmallConcurrency, "small payloads written at once (also the final comparison's concurrency)")
	fs.BoolVar(&r.PaceSmall, "pace-small", r.PaceSmall, "spread the small writes over the large writes' progress, so both run until the end")
	fs.DurationVar(&r.MinWriteTime, "min-write-time", r.MinWriteTime, "spread the small writes over at least this long (short runs: lets generations seal and merge meanwhile)")
	fs.IntVar(&r.ReadConcurrency, "read-concurrency", r.ReadConcurrency, "lookups each reader serves at once while the writes run")
	fs.DurationVar(&r.RequestTimeout, "request-timeout", r.RequestTimeout, "bound on a lookup or small PUT, and on the wait for headers of a large read; slower is an error")
	fs.IntVar(&r.BaselineObjects, "baseline-objects", r.BaselineObjects, "objects of --small-size the raw-SDK baseline reads (azure only)")
	fs.DurationVar(&r.GenMaxAge, "generation-max-age", r.GenMaxAge, "writers seal a generation this long after its first write")
	fs.Var(byteSize{&r.GenMaxBytes}, "generation-max-bytes", "writers seal a generation at this `size`")
	fs.DurationVar(&r.MergeInterval, "merge-interval", r.MergeInterval, "period of the merger's passes (reclaim grace is always 0)")
	fs.Var(byteSize{&r.MergeMaxBytes}, "merge-max-bytes", "WAL `size` one merge pass takes at most")
	fs.DurationVar(&r.LeaseDuration, "lease-duration", r.LeaseDuration, "shard and merger lease period (15s..60s)")
	fs.Var(byteSize{&r.CacheBytes}, "cache", "`size` of each pod's caches")
	fs.BoolVar(&r.Keep, "keep", r.Keep, "leave the table and the baseline objects in the store for inspection")
	fs.BoolVar(&r.Force, "force", r.Force, "run on a prefix that already holds objects; cleanup then deletes only what the run created")
	g.start("Logging")
	fs.StringVar(&c.logLevel, "log-level", c.logLevel, "pods' log `level`: debug, info, warn or error (5xx answers log at error)")
	fs.StringVar(&c.logFormat, "log-format", c.logFormat, "pods' log `format`: text or json")
	g.settle()
	return storeFlags, g
}

// fixtureEnvName names a flag's environment variable: serve's for the
// store flags, ROLLSTORE_FIXTURE_* for the rest.
func fixtureEnvName(storeFlags map[string]bool) func(string) string {
	return func(name string) string {
		if storeFlags[name] {
			return envName(name)
		}
		return "ROLLSTORE_FIXTURE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	}
}

// validate refuses what would otherwise silently mean "the default": a
// zero in fixture.Config takes the default, a zero on the command line is
// a mistake. Errors name the flags and their variables.
func (c *fixtureConfig) validate(envOf func(string) string) error {
	var p problems
	if err := c.storeConfig.validate(); err != nil {
		p = append(p, err)
	}
	o := func(name string) string { return optName(name, envOf) }
	r := c.run
	atLeast1 := func(name string, v int64) { p.check(v >= 1, o(name), "must be at least 1, got %d", v) }
	atLeast1("writers", int64(r.Writers))
	atLeast1("readers", int64(r.Readers))
	atLeast1("large-size", r.LargeSize)
	atLeast1("small-size", r.SmallSize)
	atLeast1("generation-max-bytes", r.GenMaxBytes)
	atLeast1("merge-max-bytes", r.MergeMaxBytes)
	atLeast1("cache", r.CacheBytes)
	atLeast1("large-concurrency", int64(r.LargeConcurrency))
	atLeast1("small-concurrency", int64(r.SmallConcurrency))
	atLeast1("read-concurrency", int64(r.ReadConcurrency))
	atLeast1("baseline-objects", int64(r.BaselineObjects))
	p.check(r.LargeCount >= 0, o("large-count"), "must not be negative, got %d", r.LargeCount)
	p.check(r.SmallCount >= 0, o("small-count"), "must not be negative, got %d", r.SmallCount)
	p.check(r.LargeCount+r.SmallCount > 0 || r.LargeCount < 0 || r.SmallCount < 0, o("large-count"), "and %s are both zero: nothing to write", o("small-count"))
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"request-timeout", r.RequestTimeout}, {"generation-max-age", r.GenMaxAge}, {"merge-interval", r.MergeInterval}} {
		p.check(d.v > 0, o(d.name), "must be positive, got %v", d.v)
	}
	p.check(r.MinWriteTime >= 0, o("min-write-time"), "must not be negative, got %v", r.MinWriteTime)
	p.checkErr(objstore.ValidateLeaseDuration(r.LeaseDuration), o("lease-duration"))
	if _, err := newLogger(io.Discard, c.logLevel, c.logFormat); err != nil {
		// newLogger names serve's variables; the fixture's are its own.
		p.add("%s %q / %s %q: want a level of debug, info, warn or error and a format of text or json",
			o("log-level"), c.logLevel, o("log-format"), c.logFormat)
	}
	return p.err()
}

// where describes the store for the report, without secrets.
func (c *fixtureConfig) where() string {
	switch c.store {
	case "memory":
		return fmt.Sprintf("memory store, prefix `%s`", c.prefix)
	case "local":
		return fmt.Sprintf("local folder `%s`, prefix `%s`", c.data, c.prefix)
	}
	at := c.azureEndpoint()
	if at != "" {
		at = " at " + at
	}
	return fmt.Sprintf("azure container `%s`%s, prefix `%s`", c.azure.Container, at, c.prefix)
}

func runFixture(ctx context.Context, env cmdEnv, args []string) error {
	cfg, err := parseFixture(env, args)
	if cfg == nil || err != nil {
		return err // nil, nil: help was asked for and printed
	}
	log, err := newLogger(env.stderr, cfg.logLevel, cfg.logFormat)
	if err != nil {
		return err // validated already
	}
	warnUnknownEnv(log, env)
	if cfg.prefix == "" {
		cfg.prefix = fixture.NewPrefix(time.Now())
	}
	store, raw, closeStore, err := openStore(ctx, &cfg.storeConfig)
	if err != nil {
		return err
	}
	defer closeStore()

	run := cfg.run
	run.Store, run.Backend, run.Where = store, raw, cfg.where()
	run.Logger, run.Progress, run.Out = log, env.stderr, env.stdout
	if cfg.store == "azure" {
		get, closeBaseline, err := fixture.AzureBaseline(cfg.azure, cfg.prefix)
		if err != nil {
			return err
		}
		defer closeBaseline()
		run.Baseline = get
	}

	// SIGINT or SIGTERM stops the workload; the run still cleans up.
	sigCtx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	res, err := fixture.Run(sigCtx, run)
	if err != nil {
		return err
	}
	if !res.OK() {
		return fmt.Errorf("FAIL: %d errors, cleanup verified: %v (see the report)", res.Errors, res.Cleaned || res.Kept)
	}
	return nil
}

// parseFixture builds the configuration from defaults, the environment and
// args, in increasing precedence, as parseServe does.
func parseFixture(env cmdEnv, args []string) (*fixtureConfig, error) {
	cfg := defaultFixtureConfig()
	fs := flag.NewFlagSet("fixture", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.Usage = func() {}
	storeFlags, groups := cfg.flags(fs)
	envOf := fixtureEnvName(storeFlags)
	withEnvNames(fs, envOf)
	if err := applyEnv(fs, envOf, env.lookupEnv); err != nil {
		fmt.Fprintf(env.stderr, "rollstore fixture: %v\n", err)
		return nil, errUsage
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fixtureUsage(env.stdout, groups)
			return nil, nil
		}
		fmt.Fprintln(env.stderr, "Run 'rollstore fixture --help' for the flags.")
		return nil, errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.stderr, "rollstore fixture: unexpected arguments %q\n", fs.Args())
		return nil, errUsage
	}
	if err := cfg.validate(envOf); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(env.stderr, "rollstore fixture: %s\n", line)
		}
		return nil, errUsage
	}
	return &cfg, nil
}

func fixtureUsage(w io.Writer, groups *flagGroups) {
	fmt.Fprint(w, `Usage: rollstore fixture [flags]

The staging fixture. On a fresh prefix it starts writer shards, readers and a
merger in this process, each its own engine and HTTP listener on 127.0.0.1,
and drives them over HTTP: large payloads stream in alongside small ones,
generations are sealed quickly and merged with zero reclaim grace, and the
readers meanwhile look up merged ids, just-written ids and absent ids. Then
it compares every payload byte for byte through a reader, checks /readyz
and the table status on every pod, prints a markdown report (latency per
lookup kind, errors, generations reclaimed, and on azure a raw-SDK GET
baseline from the same run), drops the table and deletes what is left
under the prefix, and verifies by listing that nothing remains.

It exits 0 only if there was no error (no 5xx, transport error, wrong byte,
false 404 or failed status check) and cleanup was verified (or --keep).

Against Azurite:   make fixture
Against Azure:     rollstore fixture --store azure --azure-container C \
                     --azure-account A --azure-auth default

The store flags and their environment variables are serve's; the others'
variables are ROLLSTORE_FIXTURE_*. The command line wins. Sizes take KiB,
MiB, GiB or TiB suffixes (or Ki, Mi, Gi, Ti), or plain bytes.

`)
	groups.print(w)
}

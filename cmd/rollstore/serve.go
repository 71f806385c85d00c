package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rollstore/rollstore/cmd/rollstore/internal/server"
	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/engine/layout"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/azure"
	"github.com/rollstore/rollstore/objstore/local"
	"github.com/rollstore/rollstore/objstore/memory"
)

// serveConfig is everything `rollstore serve` is configured with. Its
// defaults make a fresh checkout work with no flags: a local folder under
// ./data, one writer shard, the merger in-process, listening on localhost.
type serveConfig struct {
	storeConfig
	listen string
	role   string // all, writer, reader or merger
	shard  string

	authTokenFile string
	logLevel      string
	logFormat     string
	hostname      string // $HOSTNAME: a StatefulSet writer's default shard

	// The limits, grace periods and intervals bind straight into the
	// configs they belong to.
	server server.Config
	engine engine.Config
}

// storeConfig says where the tables live. Every subcommand that opens the
// store shares it, so its flags and environment variables mean the same
// everywhere.
type storeConfig struct {
	store  string // local, azure or memory
	data   string
	prefix string
	azure  azure.Config
}

func defaultStoreConfig() storeConfig {
	return storeConfig{
		store: "local",
		data:  "./data",
		azure: azure.Config{Auth: azure.AuthDefault, Retry: azure.RetryConfig{MaxElapsed: azure.DefaultMaxElapsed}},
	}
}

func defaultServeConfig() serveConfig {
	return serveConfig{
		storeConfig: defaultStoreConfig(),
		listen:      "127.0.0.1:8080",
		role:        "all",
		shard:       "",
		logLevel:    "info",
		logFormat:   "text",
		server:      server.DefaultConfig(),
		engine:      engine.DefaultConfig(),
	}
}

func (c *storeConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.store, "store", c.store, "object store: local (a folder), azure, or memory (lost at exit)")
	fs.StringVar(&c.data, "data", c.data, "`folder` of the local store")
	fs.StringVar(&c.prefix, "prefix", c.prefix, "key prefix under which every table lives (a fresh prefix per staging run)")

	fs.StringVar(&c.azure.Container, "azure-container", c.azure.Container, "Azure Blob container")
	fs.StringVar((*string)(&c.azure.Auth), "azure-auth", string(c.azure.Auth), "Azure auth `mode`: connection-string, shared-key, workload-identity or default (DefaultAzureCredential)")
	fs.StringVar(&c.azure.ConnectionString, "azure-connection-string", c.azure.ConnectionString, "Azure connection string (auth connection-string; prefer the environment variable)")
	fs.StringVar(&c.azure.AccountName, "azure-account", c.azure.AccountName, "Azure storage account name")
	fs.StringVar(&c.azure.AccountKey, "azure-account-key", c.azure.AccountKey, "Azure account key (auth shared-key; prefer the environment variable)")
	fs.StringVar(&c.azure.Endpoint, "azure-endpoint", c.azure.Endpoint, "Azure blob endpoint `URL` (default https://<account>.blob.core.windows.net)")
	fs.BoolVar(&c.azure.CreateContainer, "azure-create-container", c.azure.CreateContainer, "create the Azure container if it is missing")
	fs.DurationVar(&c.azure.Retry.MaxElapsed, "azure-retry-budget", c.azure.Retry.MaxElapsed, "how long one Azure request may keep failing (retries, and connecting) before its error is answered: 503 with Retry-After for an unreachable store; negative: the SDK's retry count alone")
}

func (c *storeConfig) validate() error {
	switch c.store {
	case "local", "memory":
	case "azure":
		if c.azure.Container == "" {
			return errors.New("--store azure needs --azure-container")
		}
	default:
		return fmt.Errorf("--store %q: want local, azure or memory", c.store)
	}
	return nil
}

func (c *serveConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.listen, "listen", c.listen, "`address` to listen on (use :8080 to listen on every interface)")
	c.storeConfig.flags(fs)

	fs.StringVar(&c.role, "role", c.role, "what this process does: all (write, read, merge), writer (no merger), reader (refuses writes, no merger), merger (refuses writes)")
	fs.StringVar(&c.shard, "shard", c.shard, "writer shard this process owns, unique per writer ([A-Za-z0-9_][A-Za-z0-9._-]*); default: local-0 for role all, the pod name ($HOSTNAME, e.g. rollstore-writer-2) for role writer")
	fs.DurationVar(&c.engine.LeaseDuration, "lease-duration", c.engine.LeaseDuration, "shard and merger lease period on stores with leases (15s..60s); a writer stops acknowledging before its lease can pass to another")

	fs.Var(byteSize{&c.server.MaxBodyBytes}, "max-body", "largest payload `size` one PUT may send (413 above)")
	fs.IntVar(&c.server.MaxRecordHeaderBytes, "max-record-header", c.server.MaxRecordHeaderBytes, "largest Rollstore-Record header in `bytes` (431 above)")
	fs.Var(byteSize{&c.server.MaxBatchBytes}, "max-batch-body", fmt.Sprintf("largest batch body `size`, and largest decoded batch; a batch also holds at most %d rows (413 above either)", c.engine.SegmentMaxRows))
	fs.DurationVar(&c.server.UploadIdleTimeout, "upload-idle-timeout", c.server.UploadIdleTimeout, "answer 408 to an upload that sends nothing for this long; 0 disables it and --upload-min-rate")
	fs.Var(byteSize{&c.server.UploadMinRate}, "upload-min-rate", "`size` per second an upload must average after its first --upload-idle-timeout (408 below); 0 disables")
	fs.IntVar(&c.server.MaxConcurrentRequests, "max-concurrent-requests", c.server.MaxConcurrentRequests, "API requests served at once; more get 503 with Retry-After")
	fs.IntVar(&c.server.MaxConcurrentUploads, "max-concurrent-uploads", c.server.MaxConcurrentUploads, "uploads (PUT of a rollout, batches) among them, so the rest always serve reads; default half of --max-concurrent-requests")
	fs.Var(byteSize{&c.engine.MaxPayloadInFlight}, "max-inflight-payload", "payload `size` being read at once; reads beyond it get 503 with Retry-After")
	fs.IntVar(&c.engine.WriteMaxPendingGens, "write-max-pending-per-shard", c.engine.WriteMaxPendingGens, "generations per shard waiting for a merge beyond which appends get 503 with Retry-After (reads are never refused for it)")
	fs.IntVar(&c.engine.WriteMaxPendingTotal, "write-max-pending", c.engine.WriteMaxPendingTotal, "generations in total waiting for a merge beyond which appends get 503 with Retry-After")
	fs.Var(byteSize{&c.engine.CacheBytes}, "cache", "`size` of the caches of immutable indexes, batches and resident snapshots")
	fs.Var(byteSize{&c.engine.PayloadCacheBytes}, "payload-cache", "`size` of the cache of hot payloads; 0 disables it")
	fs.Var(byteSize{&c.engine.PayloadCacheMaxItem}, "payload-cache-max-item", "largest payload `size` the payload cache takes (larger ones always stream from the store)")

	fs.DurationVar(&c.engine.GenMaxAge, "generation-max-age", c.engine.GenMaxAge, "seal a WAL generation this long after its first write, making it mergeable")
	fs.DurationVar(&c.engine.IdleAfter, "writer-idle-after", c.engine.IdleAfter, "a writer with no appends for this long leaves the registry's active set, so readers stop probing its shard")
	fs.DurationVar(&c.server.MergeInterval, "merge-interval", c.server.MergeInterval, "period of the in-process merger (roles all and merger); 0 disables it")
	fs.IntVar(&c.server.SweepEvery, "sweep-every", c.server.SweepEvery, "sweep orphaned objects every `n` merger passes")
	fs.DurationVar(&c.engine.ReclaimGrace, "reclaim-grace", c.engine.ReclaimGrace, "delay between merging generations and deleting them")
	fs.DurationVar(&c.engine.OrphanGrace, "orphan-grace", c.engine.OrphanGrace, "age at which unreferenced objects are swept; must exceed the longest upload")
	fs.IntVar(&c.engine.RetainVersions, "retain-versions", c.engine.RetainVersions, "newest base versions kept readable for pinned reads")
	fs.DurationVar(&c.engine.RetainAge, "retain-age", c.engine.RetainAge, "base versions younger than this are kept readable too")

	fs.DurationVar(&c.server.ReadyTimeout, "ready-timeout", c.server.ReadyTimeout, "/readyz answers within this (503 with the reason if the store or the tables do not answer in time); keep it below the readiness probe's timeout")
	fs.StringVar(&c.authTokenFile, "auth-token-file", c.authTokenFile, "`file` of bearer tokens, one per line; when set every request except /healthz and /readyz needs one (including /metrics)")
	fs.DurationVar(&c.server.DrainTimeout, "drain-timeout", c.server.DrainTimeout, "bound on the graceful drain after SIGTERM or SIGINT")
	fs.DurationVar(&c.server.CloseTimeout, "close-timeout", c.server.CloseTimeout, "after the drain (even one that overran --drain-timeout), time to seal open generations and release the shard's lease")
	fs.DurationVar(&c.server.DrainDelay, "drain-delay", c.server.DrainDelay, "after SIGTERM, keep the listener open this long answering 503 while load balancers notice readiness failing")
	fs.StringVar(&c.logLevel, "log-level", c.logLevel, "log `level`: debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", c.logFormat, "log `format`: text or json")
}

// validate checks the settings and derives the dependent ones.
func (c *serveConfig) validate() error {
	if err := c.storeConfig.validate(); err != nil {
		return err
	}
	switch c.role {
	case "all", "writer":
		if c.shard == "" && c.role == "all" {
			c.shard = "local-0"
		}
		if c.shard == "" {
			// A StatefulSet pod's hostname is its stable name, ordinal included.
			c.shard = c.hostname
		}
		if c.shard == "" {
			return fmt.Errorf("--role %s needs --shard (or HOSTNAME)", c.role)
		}
		if err := layout.ValidateShard(c.shard); err != nil {
			return fmt.Errorf("--shard: %w", err)
		}
		c.engine.Shard = c.shard
	case "reader", "merger":
		c.engine.Shard = "" // writes are answered 503 read_only
	default:
		return fmt.Errorf("--role %q: want all, writer, reader or merger", c.role)
	}
	if c.role == "writer" || c.role == "reader" || c.server.MergeInterval == 0 {
		c.server.MergeInterval = -1
	}
	if c.server.UploadIdleTimeout == 0 {
		c.server.UploadIdleTimeout = -1
	}
	if c.server.UploadMinRate == 0 {
		c.server.UploadMinRate = -1
	}
	if c.server.MaxConcurrentUploads > c.server.MaxConcurrentRequests {
		return fmt.Errorf("--max-concurrent-uploads %d exceeds --max-concurrent-requests %d", c.server.MaxConcurrentUploads, c.server.MaxConcurrentRequests)
	}
	if c.server.MaxBodyBytes <= 0 || c.server.MaxBatchBytes <= 0 || c.server.MaxRecordHeaderBytes <= 0 {
		return errors.New("--max-body, --max-batch-body and --max-record-header must be positive")
	}
	// One payload limit: the engine refuses what the server would.
	c.engine.MaxPayload = c.server.MaxBodyBytes
	return nil
}

func (c *serveConfig) logger(w io.Writer) (*slog.Logger, error) {
	return newLogger(w, c.logLevel, c.logFormat)
}

// newLogger builds the logger of --log-level and --log-format.
func newLogger(w io.Writer, levelName, format string) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(levelName)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", levelName)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

func runServe(ctx context.Context, env cmdEnv, args []string) error {
	cfg, err := parseServe(env, args)
	if cfg == nil || err != nil {
		return err // nil, nil: help was asked for and printed
	}
	log, err := cfg.logger(env.stderr)
	if err != nil {
		fmt.Fprintf(env.stderr, "rollstore serve: %v\n", err)
		return errUsage
	}
	if cfg.authTokenFile != "" {
		if cfg.server.AuthTokens, err = readTokens(cfg.authTokenFile); err != nil {
			return err
		}
	}

	store, raw, closeStore, err := openStore(ctx, &cfg.storeConfig)
	if err != nil {
		return err
	}
	defer closeStore()
	cfg.engine.Logger = log
	db, err := engine.Open(store, cfg.engine)
	if err != nil {
		return fmt.Errorf("opening the engine: %w", err)
	}
	cfg.server.Store = raw // the backend itself: readiness uses its Check if it has one
	cfg.server.StorePrefix = cfg.prefix
	cfg.server.Logger = log
	srv, err := server.New(db, cfg.server)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	if env.listening != nil {
		env.listening(ln.Addr())
	}
	log.Info("rollstore starting", "listen", ln.Addr().String(), "store", cfg.store, "data", cfg.data,
		"prefix", cfg.prefix, "role", cfg.role, "shard", cfg.engine.Shard, "auth", len(cfg.server.AuthTokens) > 0)

	// The first SIGTERM or SIGINT drains; once draining, signals are
	// back to their default, so a second one ends the process at once.
	sigCtx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-sigCtx.Done()
		stop()
	}()
	return srv.Serve(sigCtx, ln)
}

// parseServe builds the configuration from defaults, the environment and
// args, in increasing precedence. It prints its own errors and returns
// errUsage for them; a nil config with a nil error means help was printed.
func parseServe(env cmdEnv, args []string) (*serveConfig, error) {
	cfg := defaultServeConfig()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.Usage = func() {}
	cfg.flags(fs)
	withEnvNames(fs, envName)
	if err := applyEnv(fs, envName, env.lookupEnv); err != nil {
		fmt.Fprintf(env.stderr, "rollstore serve: %v\n", err)
		return nil, errUsage
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			serveUsage(env.stdout, fs)
			return nil, nil
		}
		fmt.Fprintln(env.stderr, "Run 'rollstore serve --help' for the flags.")
		return nil, errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.stderr, "rollstore serve: unexpected arguments %q\n", fs.Args())
		return nil, errUsage
	}
	cfg.hostname, _ = env.lookupEnv("HOSTNAME")
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(env.stderr, "rollstore serve: %v\n", err)
		return nil, errUsage
	}
	return &cfg, nil
}

func serveUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "Usage: rollstore serve [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Serves the rollstore HTTP API. With no flags: a local folder ./data, shard local-0,")
	fmt.Fprintln(w, "the merger in-process, on 127.0.0.1:8080.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Every flag may also be set by the environment variable shown in brackets;")
	fmt.Fprintln(w, "the command line wins. Sizes take KiB, MiB, GiB or TiB suffixes.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Flags:")
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// openStore opens the configured object store and returns it under the
// prefix if any, and also bare (for probes the prefix would hide).
func openStore(ctx context.Context, cfg *storeConfig) (store, raw objstore.Bucket, closeFn func(), err error) {
	var b objstore.Bucket
	closeFn = func() {}
	switch cfg.store {
	case "memory":
		b = memory.New()
	case "local":
		lb, err := local.Open(cfg.data)
		if err != nil {
			return nil, nil, nil, err
		}
		b, closeFn = lb, func() { lb.Close() }
	case "azure":
		ab, err := azure.New(ctx, cfg.azure)
		if err != nil {
			return nil, nil, nil, err
		}
		// Fail fast on configuration errors (wrong credentials, no such
		// container); anything transient is left to readiness.
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = ab.Check(cctx)
		cancel()
		if errors.Is(err, objstore.ErrAuth) || errors.Is(err, objstore.ErrContainerNotFound) {
			ab.Close()
			return nil, nil, nil, fmt.Errorf("azure container %s: %w", cfg.azure.Container, err)
		}
		b, closeFn = ab, func() { ab.Close() }
	}
	pb, err := objstore.Prefixed(b, cfg.prefix)
	if err != nil {
		closeFn()
		return nil, nil, nil, fmt.Errorf("--prefix %q: %w", cfg.prefix, err)
	}
	return pb, b, closeFn, nil
}

// readTokens reads bearer tokens, one per line; blank lines and lines
// starting with '#' are skipped, so a file can hold a current and a next
// token during rotation.
func readTokens(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--auth-token-file: %w", err)
	}
	defer f.Close()
	var tokens []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		t := strings.TrimSpace(sc.Text())
		if t != "" && !strings.HasPrefix(t, "#") {
			tokens = append(tokens, t)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--auth-token-file: %w", err)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("--auth-token-file %s: no token in it", path)
	}
	return tokens, nil
}

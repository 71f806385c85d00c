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
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rollstore/rollstore/cmd/rollstore/internal/server"
	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/engine/keyspace"
	"github.com/rollstore/rollstore/internal/version"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/azure"
	"github.com/rollstore/rollstore/objstore/local"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/metered"
)

// serveConfig is everything `rollstore serve` is configured with. Its
// defaults make a fresh checkout work with no flags: a local folder under
// ./data, one writer shard, the merger in-process, listening on localhost.
type serveConfig struct {
	storeConfig
	listen        string
	metricsListen string // "" serves metrics on the API listener only
	role          string // all, writer, reader or merger
	shard         string
	advertiseAddr string // "" derives it (see advertise)

	authTokenFile string
	ui            bool // the status page, GET /ui
	logLevel      string
	logFormat     string
	hostname      string // $HOSTNAME: a StatefulSet writer's default shard
	podIP         string // $POD_IP (Kubernetes downward API): the default advertised host

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
		azure: azure.Config{Auth: azure.AuthDefault, Retry: azure.RetryConfig{MaxElapsed: azure.DefaultMaxElapsed, StallTimeout: azure.DefaultStallTimeout}},
	}
}

func defaultServeConfig() serveConfig {
	return serveConfig{
		storeConfig: defaultStoreConfig(),
		listen:      "127.0.0.1:8080",
		role:        "all",
		shard:       "",
		ui:          true,
		logLevel:    "info",
		logFormat:   "text",
		server:      server.DefaultConfig(),
		engine:      engine.DefaultConfig(),
	}
}

// Sections of --help.
const (
	groupServer = "Server"
	groupStore  = "Store"
	groupAzure  = "Azure (--store azure)"
	groupLimits = "Limits"
	groupMerge  = "Merge and retention"
	groupFeed   = "Feed"
	groupAuth   = "Auth"
)

func (c *storeConfig) flags(fs *flag.FlagSet, g *flagGroups) {
	g.start(groupStore)
	fs.StringVar(&c.store, "store", c.store, "object store: local (a folder), azure, or memory (lost at exit)")
	fs.StringVar(&c.data, "data", c.data, "`folder` of the local store")
	fs.StringVar(&c.prefix, "prefix", c.prefix, "key prefix under which every table lives (a fresh prefix per staging run)")

	g.start(groupAzure)
	fs.StringVar(&c.azure.Container, "azure-container", c.azure.Container, "Azure Blob container")
	fs.StringVar((*string)(&c.azure.Auth), "azure-auth", string(c.azure.Auth), "Azure auth `mode`: connection-string, shared-key, workload-identity or default (DefaultAzureCredential)")
	fs.StringVar(&c.azure.ConnectionString, "azure-connection-string", c.azure.ConnectionString, "Azure connection string (auth connection-string; prefer the environment variable)")
	fs.StringVar(&c.azure.AccountName, "azure-account", c.azure.AccountName, "Azure storage account name")
	fs.StringVar(&c.azure.AccountKey, "azure-account-key", c.azure.AccountKey, "Azure account key (auth shared-key; prefer the environment variable)")
	fs.StringVar(&c.azure.Endpoint, "azure-endpoint", c.azure.Endpoint, "Azure blob endpoint `URL` (default https://<account>.blob.core.windows.net)")
	fs.BoolVar(&c.azure.CreateContainer, "azure-create-container", c.azure.CreateContainer, "create the Azure container if it is missing")
	fs.DurationVar(&c.azure.Retry.MaxElapsed, "azure-retry-budget", c.azure.Retry.MaxElapsed, "how long one Azure request may keep failing (retries, and connecting) before its error is answered: 503 with Retry-After for an unreachable store; negative: the SDK's retry count alone")
	fs.DurationVar(&c.azure.Retry.StallTimeout, "azure-stall-timeout", c.azure.Retry.StallTimeout, "abandon (and retry within --azure-retry-budget) an Azure request the store stops answering: no answer this long after it went out (nor by the budget's end), or a pause this long while a body is sent or read; transfers that progress are never cut. A store that hangs is then answered 503 store_unavailable with Retry-After; negative disables it")
}

// validate checks the store settings without touching the store; errors
// name the flags (and variables) to change.
func (c *storeConfig) validate() error {
	var p problems
	switch c.store {
	case "local":
		p.check(c.data != "", opt("data"), "empty: the local store needs a folder")
	case "memory":
	case "azure":
		c.validateAzure(&p)
	default:
		p.add("%s %q: want local, azure or memory", opt("store"), c.store)
	}
	if pre := strings.Trim(c.prefix, "/"); pre != "" {
		if err := objstore.ValidateKey(pre); err != nil {
			p.add("%s %q: %v", opt("prefix"), c.prefix, err)
		}
	}
	return p.err()
}

// validateAzure mirrors what azure.New accepts (TestAzureValidationMatchesBackend
// keeps them in step), in terms of flags.
func (c *storeConfig) validateAzure(p *problems) {
	a := &c.azure
	if a.Container == "" {
		p.add("--store azure needs %s", opt("azure-container"))
	} else if err := azure.ValidateContainerName(a.Container); err != nil {
		p.add("%s: %s", opt("azure-container"), strings.TrimPrefix(err.Error(), "azure: "))
	}
	mode := opt("azure-auth") + " " + string(a.Auth)
	switch a.Auth {
	case azure.AuthConnectionString:
		p.check(a.ConnectionString != "", mode, "needs %s", opt("azure-connection-string"))
		for _, f := range []struct{ name, v string }{{"azure-account", a.AccountName}, {"azure-account-key", a.AccountKey}, {"azure-endpoint", a.Endpoint}} {
			p.check(f.v == "", mode, "takes the account, key and endpoint from the connection string: unset %s", opt(f.name))
		}
	case azure.AuthSharedKey:
		p.check(a.AccountName != "", mode, "needs %s", opt("azure-account"))
		p.check(a.AccountKey != "", mode, "needs %s", opt("azure-account-key"))
		p.check(a.ConnectionString == "", mode, "does not use %s: unset it", opt("azure-connection-string"))
	case azure.AuthWorkloadIdentity, azure.AuthDefault:
		p.check(a.AccountName != "" || a.Endpoint != "", mode, "needs %s or %s", opt("azure-account"), opt("azure-endpoint"))
		p.check(a.ConnectionString == "", mode, "does not use %s: unset it", opt("azure-connection-string"))
		p.check(a.AccountKey == "", mode, "does not use %s: unset it", opt("azure-account-key"))
	default:
		p.add("%s %q: want connection-string, shared-key, workload-identity or default", opt("azure-auth"), a.Auth)
	}
	if a.Endpoint != "" {
		u, err := url.Parse(a.Endpoint)
		p.check(err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "", opt("azure-endpoint")+" "+strconv.Quote(a.Endpoint),
			"want an http(s) URL such as https://myaccount.blob.core.windows.net")
	}
	if len(*p) == 0 {
		// Whatever slipped through is still refused before anything starts.
		if err := a.Validate(); err != nil {
			p.add("azure settings: %v", err)
		}
	}
}

// describe names the store actually used, for the start log: kind,
// folder or container, endpoint, prefix; never a key or connection string.
func (c *storeConfig) describe() []any {
	switch c.store {
	case "memory":
		return []any{"store", "memory", "prefix", c.prefix}
	case "local":
		folder := c.data
		if abs, err := filepath.Abs(folder); err == nil {
			folder = abs
		}
		return []any{"store", "local", "folder", folder, "prefix", c.prefix}
	}
	attrs := []any{"store", "azure", "container", c.azure.Container, "prefix", c.prefix, "azure_auth", string(c.azure.Auth)}
	if ep := c.azureEndpoint(); ep != "" {
		attrs = append(attrs, "endpoint", ep)
	}
	return attrs
}

// azureEndpoint is the blob endpoint the settings point at, taken from the
// connection string if there is one (never its key).
func (c *storeConfig) azureEndpoint() string {
	if cs := c.azure.ConnectionString; cs != "" {
		kv := map[string]string{}
		for part := range strings.SplitSeq(cs, ";") {
			if k, v, ok := strings.Cut(part, "="); ok {
				kv[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
			}
		}
		if ep := kv["blobendpoint"]; ep != "" {
			return ep
		}
		if acct := kv["accountname"]; acct != "" {
			proto, suffix := kv["defaultendpointsprotocol"], kv["endpointsuffix"]
			if proto == "" {
				proto = "https"
			}
			if suffix == "" {
				suffix = "core.windows.net"
			}
			return proto + "://" + acct + ".blob." + suffix
		}
		return ""
	}
	if c.azure.Endpoint != "" {
		return c.azure.Endpoint
	}
	if c.azure.AccountName != "" {
		return "https://" + c.azure.AccountName + ".blob.core.windows.net"
	}
	return ""
}

// flags defines serve's flags, section by section (see flagGroups): a flag
// belongs to the section started above it.
func (c *serveConfig) flags(fs *flag.FlagSet) *flagGroups {
	g := newFlagGroups(fs)
	g.start(groupServer)
	fs.StringVar(&c.listen, "listen", c.listen, "`address` to listen on (use :8080 to listen on every interface)")
	fs.StringVar(&c.metricsListen, "metrics-listen", c.metricsListen, "`address` of a second listener that serves only GET /metrics, with no token even when --auth-token-file is set (for the cluster's scraper; e.g. :9090); empty: none")
	fs.StringVar(&c.role, "role", c.role, "what this process does: all (write, read, merge), writer (no merger), reader (refuses writes, no merger), merger (refuses writes)")
	fs.StringVar(&c.shard, "shard", c.shard, "this writer's name, unique per writer ([A-Za-z0-9_][A-Za-z0-9._-]*): its member name among the writers, which spread a table's partitions among themselves by name (a writer restarted under the same name takes its partitions back at once); default: local-0 for role all, the pod name ($HOSTNAME, e.g. rollstore-writer-2) for role writer")
	fs.StringVar(&c.advertiseAddr, "advertise-addr", c.advertiseAddr, "`host:port` the other writers reach this one at, to forward the writes of partitions it owns; default: $POD_IP (Kubernetes) with the --listen port, else the --listen address (its host, or $HOSTNAME when it listens on every interface)")
	fs.IntVar(&c.engine.Partitions, "partitions", c.engine.Partitions, fmt.Sprintf("hash partitions of tables created without ?partitions= (1..%d; fixed per table at creation)", engine.MaxPartitions))
	fs.DurationVar(&c.engine.LeaseDuration, "lease-duration", c.engine.LeaseDuration, "shard and merger lease period on stores with leases (15s..60s); keeps two live processes off one shard or one merge (fencing rests on the head's compare-and-swap)")
	fs.DurationVar(&c.server.DrainTimeout, "drain-timeout", c.server.DrainTimeout, "bound on the graceful drain after SIGTERM or SIGINT")
	fs.DurationVar(&c.server.DrainDelay, "drain-delay", c.server.DrainDelay, "after SIGTERM, keep the listener open this long answering 503 while load balancers notice readiness failing")
	fs.DurationVar(&c.server.CloseTimeout, "close-timeout", c.server.CloseTimeout, "after the drain (even one that overran --drain-timeout), time to seal open generations and release the shard's lease")
	fs.DurationVar(&c.server.ReadyTimeout, "ready-timeout", c.server.ReadyTimeout, "/readyz answers within this (503 with the reason if the store or the tables do not answer in time); keep it below the readiness probe's timeout")
	fs.BoolVar(&c.ui, "ui", c.ui, "serve the status page, GET /ui (tables, rows, partitions and owners, pending generations, recent merges; behind --auth-token-file like the API, a browser logging in with a form); --ui=false: 404")
	fs.StringVar(&c.logLevel, "log-level", c.logLevel, "log `level`: debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", c.logFormat, "log `format`: text or json")

	c.storeConfig.flags(fs, g)

	g.start(groupLimits)
	fs.Var(byteSize{&c.server.MaxBodyBytes}, "max-body", "largest payload `size` one PUT may send (413 above)")
	fs.IntVar(&c.server.MaxRecordHeaderBytes, "max-record-header", c.server.MaxRecordHeaderBytes, "largest Rollstore-Record header in `bytes` (431 above)")
	fs.Var(byteSize{&c.server.MaxBatchBytes}, "max-batch-body", fmt.Sprintf("largest batch body `size`, and largest decoded batch; a batch also holds at most %d rows (413 above either)", c.engine.SegmentMaxRows))
	fs.IntVar(&c.server.MaxLookupIDs, "max-lookup-ids", c.server.MaxLookupIDs, "most ids one multi-id get (POST /v1/tables/{table}/lookup) may ask for (413 above); its body may hold that many ids of the longest kind")
	fs.IntVar(&c.server.LookupParallelism, "lookup-parallelism", c.server.LookupParallelism, "lookups one multi-id get runs at once")
	fs.DurationVar(&c.server.UploadIdleTimeout, "upload-idle-timeout", c.server.UploadIdleTimeout, "answer 408 to an upload that sends nothing for this long; 0 disables it and --upload-min-rate")
	fs.Var(byteSize{&c.server.UploadMinRate}, "upload-min-rate", "`size` per second an upload must average after its first --upload-idle-timeout (408 below); 0 disables")
	fs.DurationVar(&c.server.DownloadIdleTimeout, "download-idle-timeout", c.server.DownloadIdleTimeout, "cut off a streamed answer (payload, scan) whose client takes nothing for this long, freeing its slot and payload budget; 0 disables it and --download-min-rate")
	fs.Var(byteSize{&c.server.DownloadMinRate}, "download-min-rate", "`size` per second a client must take a streamed answer at, on average, after its first --download-idle-timeout (cut off below); 0 disables")
	fs.Float64Var(&c.server.MaxClientShare, "max-client-share", c.server.MaxClientShare, "`fraction` (0..1] of the request slots, upload slots and in-flight payload budget one client (its token with auth on, else its address) may hold; 1 disables")
	fs.IntVar(&c.server.MaxConcurrentRequests, "max-concurrent-requests", c.server.MaxConcurrentRequests, "API requests served at once; more get 503 with Retry-After")
	fs.IntVar(&c.server.MaxConcurrentUploads, "max-concurrent-uploads", c.server.MaxConcurrentUploads, "uploads (PUT of a rollout, batches) among them, so the rest always serve reads; default half of --max-concurrent-requests")
	fs.Var(byteSize{&c.engine.MaxPayloadInFlight}, "max-inflight-payload", "payload `size` being read at once; reads beyond it get 503 with Retry-After")
	fs.IntVar(&c.engine.WriteMaxPendingGens, "write-max-pending-per-shard", c.engine.WriteMaxPendingGens, "generations per shard waiting for a merge beyond which appends get 503 with Retry-After (reads are never refused for it)")
	fs.IntVar(&c.engine.WriteMaxPendingTotal, "write-max-pending", c.engine.WriteMaxPendingTotal, "generations in total waiting for a merge beyond which appends get 503 with Retry-After")
	fs.Var(byteSize{&c.engine.CacheBytes}, "cache", "`size` of the caches of immutable indexes, batches and resident snapshots")
	fs.Var(byteSize{&c.engine.PayloadCacheBytes}, "payload-cache", "`size` of the cache of hot payloads; 0 disables it")
	fs.Var(byteSize{&c.engine.PayloadCacheMaxItem}, "payload-cache-max-item", "largest payload `size` the payload cache takes (larger ones always stream from the store)")

	g.start(groupMerge)
	fs.DurationVar(&c.engine.GenMaxAge, "generation-max-age", c.engine.GenMaxAge, "seal a WAL generation this long after its first write, making it mergeable")
	fs.DurationVar(&c.engine.IdleAfter, "writer-idle-after", c.engine.IdleAfter, "a writer with no appends for this long leaves the registry's active set, so readers stop probing its shard")
	fs.DurationVar(&c.server.MergeInterval, "merge-interval", c.server.MergeInterval, "period of the in-process merger (roles all and merger); 0 disables it")
	fs.IntVar(&c.server.SweepEvery, "sweep-every", c.server.SweepEvery, "sweep orphaned objects (and what drops left) every `n` merger passes")
	fs.DurationVar(&c.engine.ReclaimGrace, "reclaim-grace", c.engine.ReclaimGrace, "delay between merging generations and deleting them")
	fs.DurationVar(&c.engine.OrphanGrace, "orphan-grace", c.engine.OrphanGrace, "age at which unreferenced objects are swept; must exceed the longest upload")
	fs.IntVar(&c.engine.RetainVersions, "retain-versions", c.engine.RetainVersions, "newest base versions kept readable for pinned reads")
	fs.DurationVar(&c.engine.RetainAge, "retain-age", c.engine.RetainAge, "base versions younger than this are kept readable too")

	g.start(groupFeed)
	fs.DurationVar(&c.engine.FeedRetention, "feed-retention", c.engine.FeedRetention, "keep every row readable by the feed for at least this long after it was acknowledged (merged generations are kept this long); an older cursor is answered 410 cursor_expired; 0: only until its generation is merged and reclaimed")
	fs.DurationVar(&c.engine.FeedPollInterval, "feed-poll-interval", c.engine.FeedPollInterval, "how often the heads of the partitions that long-polling feed readers wait on are probed (one probe for all of them)")
	fs.DurationVar(&c.engine.GroupSessionTimeout, "group-session-timeout", c.engine.GroupSessionTimeout, "a consumer-group member not heard from (by a feed read) for this long is removed from its group, and its partitions go to the others")
	fs.IntVar(&c.server.FeedMaxRows, "feed-max-rows", c.server.FeedMaxRows, "most rows one feed answer holds (a larger max_rows is lowered to it)")
	fs.Var(byteSize{&c.server.FeedMaxBytes}, "feed-max-bytes", "largest `size` of one feed answer's rows, carried payloads included (a larger max_bytes is lowered to it)")
	fs.DurationVar(&c.server.FeedMaxWait, "feed-max-wait", c.server.FeedMaxWait, "longest wait of a feed long-poll (a longer wait is lowered to it)")
	fs.IntVar(&c.server.FeedMaxWaiting, "feed-max-waiting", c.server.FeedMaxWaiting, "feed long-polls waiting at once; they hold no request slot (--max-concurrent-requests), and one beyond this, or beyond its client's --max-client-share of it, is answered at once")

	g.start(groupAuth)
	fs.StringVar(&c.authTokenFile, "auth-token-file", c.authTokenFile, "`file` of bearer tokens, one per line; when set every request except /healthz and /readyz needs one (including /metrics on --listen; --metrics-listen needs none); the status page /ui logs a browser in with a form instead")
	g.settle()
	return g
}

// validate checks every setting and derives the dependent ones. It touches
// nothing: runServe calls it before it binds a port or opens the store.
func (c *serveConfig) validate() error {
	var p problems
	if err := c.storeConfig.validate(); err != nil {
		p = append(p, err)
	}
	p.checkErr(validListenAddr(c.listen), opt("listen")+" "+strconv.Quote(c.listen))
	if c.metricsListen != "" {
		p.checkErr(validListenAddr(c.metricsListen), opt("metrics-listen")+" "+strconv.Quote(c.metricsListen))
		_, port, _ := net.SplitHostPort(c.metricsListen)
		p.check(c.metricsListen != c.listen || port == "0", opt("metrics-listen"), "must differ from %s", opt("listen"))
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
			p.add("%s %s needs %s (or HOSTNAME)", opt("role"), c.role, opt("shard"))
		} else if err := keyspace.ValidateShard(c.shard); err != nil {
			p.add("%s %q: %v", opt("shard"), c.shard, err)
		}
		c.engine.Shard = c.shard
	case "reader", "merger":
		c.engine.Shard = "" // writes are answered 503 read_only
	default:
		p.add("%s %q: want all, writer, reader or merger", opt("role"), c.role)
	}
	p.checkErr(objstore.ValidateLeaseDuration(c.engine.LeaseDuration), opt("lease-duration"))
	p.check(c.engine.Partitions >= 1 && c.engine.Partitions <= engine.MaxPartitions, opt("partitions"), "want 1..%d, got %d", engine.MaxPartitions, c.engine.Partitions)
	if c.advertiseAddr != "" {
		host, port, err := net.SplitHostPort(c.advertiseAddr)
		n, perr := strconv.Atoi(port)
		p.check(err == nil && host != "" && perr == nil && n > 0 && n <= 65535, opt("advertise-addr")+" "+strconv.Quote(c.advertiseAddr),
			"want host:port that other pods can reach, e.g. 10.0.0.7:8080")
	}

	s, e := &c.server, &c.engine
	positive := func(name string, v int64) { p.check(v > 0, opt(name), "must be positive, got %d", v) }
	positive("max-body", s.MaxBodyBytes)
	positive("max-batch-body", s.MaxBatchBytes)
	positive("max-record-header", int64(s.MaxRecordHeaderBytes))
	positive("max-lookup-ids", int64(s.MaxLookupIDs))
	positive("lookup-parallelism", int64(s.LookupParallelism))
	positive("max-concurrent-requests", int64(s.MaxConcurrentRequests))
	positive("max-inflight-payload", e.MaxPayloadInFlight)
	positive("write-max-pending-per-shard", int64(e.WriteMaxPendingGens))
	positive("write-max-pending", int64(e.WriteMaxPendingTotal))
	// Zero would not disable these: the engine would take its default.
	positive("payload-cache-max-item", e.PayloadCacheMaxItem)
	p.check(s.MaxConcurrentUploads <= s.MaxConcurrentRequests, opt("max-concurrent-uploads"), "%d exceeds %s %d", s.MaxConcurrentUploads, opt("max-concurrent-requests"), s.MaxConcurrentRequests)
	positive("sweep-every", int64(s.SweepEvery))
	positive("retain-versions", int64(e.RetainVersions))
	positive("feed-max-rows", int64(s.FeedMaxRows))
	positive("feed-max-bytes", s.FeedMaxBytes)
	positive("feed-max-waiting", int64(s.FeedMaxWaiting))
	positiveDur := func(name string, d time.Duration) { p.check(d > 0, opt(name), "must be positive, got %v", d) }
	positiveDur("generation-max-age", e.GenMaxAge)
	positiveDur("writer-idle-after", e.IdleAfter)
	positiveDur("drain-timeout", s.DrainTimeout)
	positiveDur("feed-poll-interval", e.FeedPollInterval)
	positiveDur("group-session-timeout", e.GroupSessionTimeout)
	positiveDur("feed-max-wait", s.FeedMaxWait)
	// A zero orphan grace would sweep the payload of an upload in progress.
	positiveDur("orphan-grace", e.OrphanGrace)
	notNegative := func(name string, d time.Duration) { p.check(d >= 0, opt(name), "must not be negative, got %v", d) }
	notNegative("upload-idle-timeout", s.UploadIdleTimeout)
	notNegative("download-idle-timeout", s.DownloadIdleTimeout)
	p.check(s.MaxClientShare > 0 && s.MaxClientShare <= 1, opt("max-client-share"), "must be in (0, 1], got %v", s.MaxClientShare)
	notNegative("merge-interval", s.MergeInterval)
	notNegative("reclaim-grace", e.ReclaimGrace)
	notNegative("retain-age", e.RetainAge)
	notNegative("feed-retention", e.FeedRetention)
	notNegative("drain-delay", s.DrainDelay)
	if s.DrainDelay > 0 && s.DrainTimeout > 0 {
		// The delay counts inside the drain bound: at or above it every drain times out.
		p.check(s.DrainDelay < s.DrainTimeout, opt("drain-delay"), "%v must be below %s %v", s.DrainDelay, opt("drain-timeout"), s.DrainTimeout)
	}
	p.checkErr(validLogSettings(c.logLevel, c.logFormat))
	if len(p) > 0 {
		return p.err()
	}

	if c.role == "writer" || c.role == "reader" || s.MergeInterval == 0 {
		s.MergeInterval = -1
	}
	if s.UploadIdleTimeout == 0 {
		s.UploadIdleTimeout = -1
	}
	if s.UploadMinRate == 0 {
		s.UploadMinRate = -1
	}
	if s.DownloadIdleTimeout == 0 {
		s.DownloadIdleTimeout = -1
	}
	if s.DownloadMinRate == 0 {
		s.DownloadMinRate = -1
	}
	s.DisableUI = !c.ui
	// One payload limit: the engine refuses what the server would.
	e.MaxPayload = s.MaxBodyBytes
	return nil
}

// validListenAddr accepts host:port with a numeric port (0 picks one).
func validListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port, e.g. 127.0.0.1:8080 or :8080 (%v)", err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q: want a number from 0 to 65535", port)
	}
	return nil
}

// problems collects configuration errors, so one run reports all of them.
type problems []error

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Errorf(format, args...)) }

// check adds "what: <format>" unless ok.
func (p *problems) check(ok bool, what, format string, args ...any) {
	if !ok {
		*p = append(*p, fmt.Errorf("%s: %s", what, fmt.Sprintf(format, args...)))
	}
}

// checkErr adds err, prefixed with what if given.
func (p *problems) checkErr(err error, what ...string) {
	if err != nil {
		if len(what) > 0 {
			err = fmt.Errorf("%s: %w", what[0], err)
		}
		*p = append(*p, err)
	}
}

func (p problems) err() error { return errors.Join(p...) }

func validLogSettings(level, format string) error {
	_, err := newLogger(io.Discard, level, format)
	return err
}

func (c *serveConfig) logger(w io.Writer) (*slog.Logger, error) {
	return newLogger(w, c.logLevel, c.logFormat)
}

// newLogger builds the logger of --log-level and --log-format.
func newLogger(w io.Writer, levelName, format string) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(levelName)); err != nil {
		return nil, fmt.Errorf("%s %q: want debug, info, warn or error", opt("log-level"), levelName)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("%s %q: want text or json", opt("log-format"), format)
}

// warnUnknownEnv logs every ROLLSTORE_* variable no command reads: a typo
// would otherwise silently leave the default in place.
func warnUnknownEnv(log *slog.Logger, env cmdEnv) {
	if env.environ == nil {
		return
	}
	names, suggest := unknownEnv(env.environ(), knownEnv())
	for i, name := range names {
		if suggest[i] != "" {
			log.Warn("ignoring unknown environment variable", "name", name, "did_you_mean", suggest[i])
		} else {
			log.Warn("ignoring unknown environment variable", "name", name)
		}
	}
}

func runServe(ctx context.Context, env cmdEnv, args []string) (err error) {
	cfg, err := parseServe(env, args)
	if cfg == nil || err != nil {
		return err // nil, nil: help was asked for and printed
	}
	log, err := cfg.logger(env.stderr)
	if err != nil {
		return err // validated already
	}
	warnUnknownEnv(log, env)
	if cfg.authTokenFile != "" {
		if cfg.server.AuthTokens, err = readTokens(cfg.authTokenFile); err != nil {
			return err
		}
	}

	// Bind the ports before the store is opened (a local store creates its
	// folder): a taken port must leave nothing behind.
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("%s: %w", opt("listen"), err)
	}
	defer ln.Close() // Serve closes it too; closing twice is harmless
	var mln net.Listener
	if cfg.metricsListen != "" {
		if mln, err = net.Listen("tcp", cfg.metricsListen); err != nil {
			return fmt.Errorf("%s: %w", opt("metrics-listen"), err)
		}
		defer mln.Close()
	}

	store, raw, closeStore, err := openStore(ctx, &cfg.storeConfig)
	if err != nil {
		return err
	}
	defer closeStore()
	// The engine's every store call is counted, timed and classified in
	// the rollstore_store_ metrics.
	storeMetrics := metered.NewMetrics()
	store = metered.Wrap(store, metered.Options{Metrics: storeMetrics})
	cfg.engine.Logger = log
	if cfg.engine.Shard != "" {
		cfg.engine.Addr = cfg.advertise(ln.Addr())
	}
	db, err := engine.Open(store, cfg.engine)
	if err != nil {
		return fmt.Errorf("opening the engine: %w", err)
	}
	cfg.server.Store = raw // the backend itself: readiness uses its Check if it has one
	cfg.server.StorePrefix = cfg.prefix
	cfg.server.Logger = log
	cfg.server.Collectors = append(cfg.server.Collectors, storeMetrics)
	srv, err := server.New(db, cfg.server)
	if err != nil {
		return err
	}
	metricsAddr := "off"
	if mln != nil {
		metricsAddr = mln.Addr().String()
		if env.metricsListening != nil {
			env.metricsListening(mln.Addr())
		}
	}
	if env.listening != nil {
		env.listening(ln.Addr()) // last: tests take it as "started"
	}
	bi := version.Get()
	log.Info("rollstore starting", append([]any{"version", bi.Version, "revision", bi.Revision,
		"listen", ln.Addr().String(), "metrics_listen", metricsAddr, "role", cfg.role, "shard", cfg.engine.Shard, "advertise_addr", cfg.engine.Addr, "partitions", cfg.engine.Partitions,
		"auth", len(cfg.server.AuthTokens) > 0}, cfg.describe()...)...)

	// The first SIGTERM or SIGINT drains; once draining, signals are
	// back to their default, so a second one ends the process at once.
	sigCtx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	serveCtx, stopServing := context.WithCancel(sigCtx)
	defer stopServing()
	go func() {
		<-sigCtx.Done()
		stop()
	}()

	// The metrics listener lives as long as the API's, through the drain,
	// so the scraper sees rollstore_draining; if it fails, the process
	// drains and exits with its error.
	var metricsErr error
	metricsDone := make(chan struct{})
	var ms *http.Server
	if mln != nil {
		ms = &http.Server{Handler: srv.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		go func() {
			defer close(metricsDone)
			if err := ms.Serve(mln); !errors.Is(err, http.ErrServerClosed) {
				metricsErr = fmt.Errorf("metrics listener %s: %w", mln.Addr(), err)
				stopServing()
			}
		}()
	} else {
		close(metricsDone)
	}
	err = srv.Serve(serveCtx, ln)
	if ms != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if ms.Shutdown(sctx) != nil {
			ms.Close() // a scrape still running after 5 s is cut short
		}
		cancel()
	}
	<-metricsDone
	return errors.Join(err, metricsErr)
}

// advertise is where the other writers forward writes to this one:
// --advertise-addr, else $POD_IP with the listening port, else the
// listening address (with $HOSTNAME, or loopback, for a listener on every
// interface).
func (c *serveConfig) advertise(listening net.Addr) string {
	if c.advertiseAddr != "" {
		return c.advertiseAddr
	}
	host, port, err := net.SplitHostPort(listening.String())
	if err != nil {
		return listening.String()
	}
	switch ip := net.ParseIP(host); {
	case c.podIP != "":
		host = c.podIP
	case host == "" || (ip != nil && ip.IsUnspecified()):
		host = c.hostname
		if host == "" {
			host = "127.0.0.1"
		}
	}
	return net.JoinHostPort(host, port)
}

// parseServe builds the configuration from defaults, the environment and
// args, in increasing precedence, and validates it. It prints its own
// errors and returns errUsage for them; a nil config with a nil error
// means help was printed.
func parseServe(env cmdEnv, args []string) (*serveConfig, error) {
	cfg := defaultServeConfig()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.Usage = func() {}
	groups := cfg.flags(fs)
	withEnvNames(fs, envName)
	if err := applyEnv(fs, envName, env.lookupEnv); err != nil {
		fmt.Fprintf(env.stderr, "rollstore serve: %v\n", err)
		return nil, errUsage
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			serveUsage(env.stdout, groups)
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
	cfg.podIP, _ = env.lookupEnv("POD_IP")
	if err := cfg.validate(); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(env.stderr, "rollstore serve: %s\n", line)
		}
		return nil, errUsage
	}
	return &cfg, nil
}

func serveUsage(w io.Writer, groups *flagGroups) {
	fmt.Fprintln(w, "Usage: rollstore serve [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Serves the rollstore HTTP API. With no flags: a local folder ./data, shard local-0,")
	fmt.Fprintln(w, "the merger in-process, on 127.0.0.1:8080.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Every flag may also be set by the environment variable shown in brackets;")
	fmt.Fprintln(w, "the command line wins. Sizes take KiB, MiB, GiB or TiB suffixes (or Ki, Mi, Gi, Ti).")
	fmt.Fprintln(w)
	groups.print(w)
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
			return nil, nil, nil, fmt.Errorf("%s %s: %w", opt("data"), cfg.data, err)
		}
		b, closeFn = lb, func() { _ = lb.Close() }
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
			_ = ab.Close()
			return nil, nil, nil, fmt.Errorf("azure container %s: %w", cfg.azure.Container, err)
		}
		b, closeFn = ab, func() { _ = ab.Close() }
	}
	pb, err := objstore.Prefixed(b, cfg.prefix)
	if err != nil {
		closeFn()
		return nil, nil, nil, fmt.Errorf("%s %q: %w", opt("prefix"), cfg.prefix, err)
	}
	return pb, b, closeFn, nil
}

// readTokens reads bearer tokens, one per line; blank lines and lines
// starting with '#' are skipped, so a file can hold a current and a next
// token during rotation.
func readTokens(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", opt("auth-token-file"), err)
	}
	defer f.Close() // read only: nothing to lose on close
	var tokens []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		t := strings.TrimSpace(sc.Text())
		if t != "" && !strings.HasPrefix(t, "#") {
			tokens = append(tokens, t)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", opt("auth-token-file"), err)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("%s %s: no token in it", opt("auth-token-file"), path)
	}
	return tokens, nil
}

package server

import (
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rollstore/rollstore/cache"
	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/internal/version"
)

// metrics live in a registry of their own, so two Servers in one process
// (tests) never collide and nothing global is registered.
type metrics struct {
	reg *prometheus.Registry

	requests *prometheus.HistogramVec
	inflight prometheus.Gauge
	// clientRefusals counts requests refused because their client held
	// its share of the server (MaxClientShare).
	clientRefusals prometheus.Counter
	// payloadBytes counts payload bytes stored (acknowledged writes,
	// identical retries not counted) and served (bodies sent), by
	// direction.
	payloadBytes  *prometheus.CounterVec
	draining      prometheus.Gauge
	merges        *prometheus.CounterVec
	mergeDuration *prometheus.HistogramVec
	sweeps        *prometheus.CounterVec
	swept         *prometheus.CounterVec
	pendingGens   *prometheus.GaugeVec
	pendingRows   *prometheus.GaugeVec
	// forwarded counts appends sent to the owner of their partition, by
	// result; forwardDuration times the forwarded commits.
	forwarded       *prometheus.CounterVec
	forwardDuration *prometheus.HistogramVec
	// The feed's: answers by outcome, rows and payload bytes delivered,
	// long-polls waiting, group commits by result, and the lag of the
	// consumer groups this process serves (refreshed by the lag loop).
	feedRequests       *prometheus.CounterVec
	feedRows           prometheus.Counter
	feedPayloadBytes   prometheus.Counter
	feedWaiting        prometheus.Gauge
	feedCommits        *prometheus.CounterVec
	consumerLagRows    *prometheus.GaugeVec
	consumerLagSeconds *prometheus.GaugeVec
	feedRelays         *prometheus.CounterVec

	mu     sync.Mutex
	tables []string // tables with pending gauges set
}

func newMetrics(db *engine.DB) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rollstore_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route template, method and status.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"route", "method", "status"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rollstore_http_requests_in_flight",
			Help: "API requests being served (bounded by the concurrency limit).",
		}),
		clientRefusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollstore_http_client_share_refusals_total",
			Help: "API requests answered 503 because their client already held its share of the request slots, upload slots or payload budget (--max-client-share).",
		}),
		payloadBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollstore_payload_bytes_total",
			Help: "Payload bytes through the API: direction=\"written\" for rows acknowledged as new (PUT and batches), \"read\" for payload bytes sent to readers (whole or ranged, cut-off answers included).",
		}, []string{"direction"}),
		draining: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rollstore_draining",
			Help: "1 once the server has started draining.",
		}),
		merges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollstore_merge_passes_total",
			Help: "Merge passes run by this server, by trigger (loop or api) and result.",
		}, []string{"trigger", "result"}),
		mergeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rollstore_merge_duration_seconds",
			Help:    "Duration of merge passes (merge, reclaim and version collection).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 12),
		}, []string{"trigger"}),
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollstore_sweep_passes_total",
			Help: "Orphan sweeps run by the merger, by result.",
		}, []string{"result"}),
		swept: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollstore_swept_objects_total",
			Help: "Orphaned objects deleted by sweeps, by kind.",
		}, []string{"kind"}),
		pendingGens: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rollstore_pending_generations",
			Help: "WAL generations not yet merged, per table, as of the last merger pass.",
		}, []string{"table"}),
		pendingRows: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rollstore_pending_rows",
			Help: "Rows in WAL generations not yet merged, per table, as of the last merger pass.",
		}, []string{"table"}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollstore_appends_forwarded_total",
			Help: "Appends this pod staged and sent to the writer owning their partition, by result: committed (stored, or an identical retry), refused (the owner answered 4xx: a conflict, an invalid record), not_owner (the partition had moved), unreachable (not sent: no connection), unknown (sent, no answer), failed (the owner failed).",
		}, []string{"result"}),
		forwardDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rollstore_forward_duration_seconds",
			Help:    "Time of a forwarded commit (one request to the owner, carrying one append or a batch's items of that owner), by result.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"result"}),
		feedRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollstore_feed_requests_total",
			Help: "Feed reads by outcome: rows (rows delivered), empty (none yet), expired (410 cursor_expired), error (any other error).",
		}, []string{"outcome"}),
		feedRows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollstore_feed_rows_total",
			Help: "Rows delivered by the feed.",
		}),
		feedPayloadBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollstore_feed_payload_bytes_total",
			Help: "Payload bytes the feed carried inline in its answers.",
		}),
		feedWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rollstore_feed_long_polls",
			Help: "Feed long-polls being served now, each holding a waiting slot (bounded by --feed-max-waiting) instead of a request slot; rollstore_feed_waiting counts those waiting for a row at this moment.",
		}),
		feedCommits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollstore_feed_commits_total",
			Help: "Consumer-group commits (POST .../commit and feed reads with commit=true), by result: ok, rebalanced (refused: the member's assignment is stale), error.",
		}, []string{"result"}),
		feedRelays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollstore_feed_relays_total",
			Help: "Waits of this process's long-polls relayed to the owners of their partitions, by result: moved (the owner answered that a partition moved, and the readers were woken), idle (the relayed wait passed), error (the owner could not be asked; the readers wake at the next probe).",
		}, []string{"result"}),
		consumerLagRows: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rollstore_feed_consumer_lag_rows",
			Help: "Rows acknowledged after a consumer group's committed positions, for the groups this process served in the last 5 minutes (refreshed every 15s).",
		}, []string{"table", "group"}),
		consumerLagSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rollstore_feed_consumer_lag_seconds",
			Help: "How far behind a consumer group's committed positions are, in seconds of acknowledgement time, for the groups this process served in the last 5 minutes.",
		}, []string{"table", "group"}),
	}
	// The build as a constant 1 with labels, the Prometheus convention for
	// joining a version onto other series.
	bi := version.Get()
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rollstore_build_info",
		Help: "Always 1; the labels name the running build.",
	}, []string{"version", "revision", "goversion"})
	buildInfo.WithLabelValues(bi.Version, bi.Revision, bi.GoVersion).Set(1)
	m.reg.MustRegister(m.requests, m.inflight, m.clientRefusals, m.payloadBytes, m.draining, m.merges, m.mergeDuration, m.sweeps, m.swept,
		m.pendingGens, m.pendingRows, m.forwarded, m.forwardDuration, buildInfo, engineCollector{db},
		m.feedRequests, m.feedRows, m.feedPayloadBytes, m.feedWaiting, m.feedCommits, m.consumerLagRows, m.consumerLagSeconds, m.feedRelays,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerOwnerMetrics(m, db)
	return m
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{ErrorLog: slogPrinter{s}}).ServeHTTP(w, r)
	return nil
}

type slogPrinter struct{ s *Server }

func (p slogPrinter) Println(v ...any) { p.s.log.Error("metrics", "err", v) }

func (m *metrics) observeMerge(trigger string, d time.Duration, res engine.MergeResult, err error) {
	result := "ok"
	switch {
	case err != nil:
		result = "error"
	case res.Version == 0:
		result = "noop"
	}
	m.merges.WithLabelValues(trigger, result).Inc()
	if result != "noop" {
		m.mergeDuration.WithLabelValues(trigger).Observe(d.Seconds())
	}
}

func (m *metrics) observeSweep(res engine.SweepResult, err error) {
	if err != nil {
		m.sweeps.WithLabelValues("error").Inc()
	} else {
		m.sweeps.WithLabelValues("ok").Inc()
	}
	m.swept.WithLabelValues("data_file").Add(float64(res.DataFiles))
	m.swept.WithLabelValues("payload").Add(float64(res.Payloads))
	m.swept.WithLabelValues("segment").Add(float64(res.Segments))
}

func (m *metrics) setPending(table string, st engine.Status) {
	m.pendingGens.WithLabelValues(table).Set(float64(len(st.Pending)))
	m.pendingRows.WithLabelValues(table).Set(float64(st.PendingRows))
}

// keepTables drops the gauges of tables that no longer exist.
func (m *metrics) keepTables(names []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range m.tables {
		if !slices.Contains(names, t) {
			m.pendingGens.DeleteLabelValues(t)
			m.pendingRows.DeleteLabelValues(t)
		}
	}
	m.tables = slices.Clone(names)
}

func (m *metrics) forgetTable(name string) {
	m.pendingGens.DeleteLabelValues(name)
	m.pendingRows.DeleteLabelValues(name)
}

// engineCollector reads the engine's atomic counters at scrape time, so the
// engine needs no Prometheus dependency and the hot path pays nothing.
type engineCollector struct{ db *engine.DB }

var (
	descReads = prometheus.NewDesc("rollstore_reads_total",
		"Point reads by outcome: base_hit, wal_hit, late_base_hit (found in the base after a complete WAL miss), absent, missing_file, overloaded.",
		[]string{"outcome"}, nil)
	descReadRetries = prometheus.NewDesc("rollstore_read_retries_total",
		"Reads retried because a file vanished under them (reclaimed generation or collected version).", nil, nil)
	descRefreshes = prometheus.NewDesc("rollstore_snapshot_refreshes_total",
		"Resident snapshot refreshes performed.", nil, nil)
	descAppends = prometheus.NewDesc("rollstore_appends_total",
		"Appends by result: created, identical_retry, conflict, backpressure.", []string{"result"}, nil)
	descSegments = prometheus.NewDesc("rollstore_wal_segments_written_total",
		"WAL segments written (group commits).", nil, nil)
	descSeals = prometheus.NewDesc("rollstore_generations_sealed_total",
		"WAL generations sealed.", nil, nil)
	descMerges = prometheus.NewDesc("rollstore_merges_committed_total",
		"Base versions committed by this process.", nil, nil)
	descMergeConflicts = prometheus.NewDesc("rollstore_merge_commit_conflicts_total",
		"Merge commits lost to another committer.", nil, nil)
	descMergedRows = prometheus.NewDesc("rollstore_merged_rows_total",
		"Rows folded into base versions.", nil, nil)
	descMergeDups = prometheus.NewDesc("rollstore_merge_duplicates_total",
		"Cross-shard duplicate ids dropped by merges.", nil, nil)
	descMergeSeconds = prometheus.NewDesc("rollstore_merge_seconds_total",
		"Time spent in merge passes by the engine.", nil, nil)
	descReclaimed = prometheus.NewDesc("rollstore_generations_reclaimed_total",
		"Merged WAL generations deleted.", nil, nil)
	descVersionsCollected = prometheus.NewDesc("rollstore_versions_collected_total",
		"Base versions deleted beyond retention.", nil, nil)
	descFilesCollected = prometheus.NewDesc("rollstore_files_collected_total",
		"Base data files deleted with their versions.", nil, nil)
	descOrphans = prometheus.NewDesc("rollstore_orphans_swept_total",
		"Orphaned objects deleted by sweeps (engine count).", nil, nil)
	descCacheHits = prometheus.NewDesc("rollstore_cache_hits_total",
		"Cache lookups that hit, by cache.", []string{"cache"}, nil)
	descCacheMisses = prometheus.NewDesc("rollstore_cache_misses_total",
		"Cache lookups that missed, by cache.", []string{"cache"}, nil)
	descCacheEvictions = prometheus.NewDesc("rollstore_cache_evictions_total",
		"Entries evicted to stay within the byte bound, by cache.", []string{"cache"}, nil)
	descCacheRatio = prometheus.NewDesc("rollstore_cache_hit_ratio",
		"Hits over lookups since start, by cache (for rates use the hit and miss counters).", []string{"cache"}, nil)
	descCacheBytes = prometheus.NewDesc("rollstore_cache_bytes",
		"Bytes held, by cache.", []string{"cache"}, nil)
	descCacheMaxBytes = prometheus.NewDesc("rollstore_cache_max_bytes",
		"Byte bound, by cache.", []string{"cache"}, nil)
	descInFlight = prometheus.NewDesc("rollstore_payload_in_flight_bytes",
		"Payload bytes reserved by reads being served (bounded by the in-flight budget).", nil, nil)
	descInFlightMax = prometheus.NewDesc("rollstore_payload_in_flight_limit_bytes",
		"The in-flight payload byte budget.", nil, nil)
	descFeedWaiting = prometheus.NewDesc("rollstore_feed_waiting",
		"Feed long-polls waiting for a row now.", nil, nil)
	descFeedProbes = prometheus.NewDesc("rollstore_feed_probes_total",
		"Partition heads probed for feed reads (long-polls share one probe per partition and --feed-poll-interval).", nil, nil)
)

func (c engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReads, descReadRetries, descRefreshes, descAppends, descSegments, descSeals,
		descMerges, descMergeConflicts, descMergedRows, descMergeDups, descMergeSeconds, descReclaimed,
		descVersionsCollected, descFilesCollected, descOrphans, descCacheHits, descCacheMisses, descCacheEvictions,
		descCacheRatio, descCacheBytes, descCacheMaxBytes, descInFlight, descInFlightMax, descFeedWaiting, descFeedProbes} {
		ch <- d
	}
}

func (c engineCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.db.Stats()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(descReads, st.ReadBaseHits.Load(), "base_hit")
	counter(descReads, st.ReadWALHits.Load(), "wal_hit")
	counter(descReads, st.ReadLateBaseHits.Load(), "late_base_hit")
	counter(descReads, st.ReadAbsent.Load(), "absent")
	counter(descReads, st.ReadMissingFile.Load(), "missing_file")
	counter(descReads, st.ReadOverloaded.Load(), "overloaded")
	counter(descReadRetries, st.ReadRetries.Load())
	counter(descRefreshes, st.Refreshes.Load())
	counter(descAppends, st.Appends.Load(), "created")
	counter(descAppends, st.AppendRetries.Load(), "identical_retry")
	counter(descAppends, st.AppendConflict.Load(), "conflict")
	counter(descAppends, st.AppendBackpressure.Load(), "backpressure")
	counter(descSegments, st.Segments.Load())
	counter(descSeals, st.Seals.Load())
	counter(descMerges, st.Merges.Load())
	counter(descMergeConflicts, st.MergeConflicts.Load())
	counter(descMergedRows, st.MergedRows.Load())
	counter(descMergeDups, st.MergeDuplicates.Load())
	ch <- prometheus.MustNewConstMetric(descMergeSeconds, prometheus.CounterValue, time.Duration(st.MergeNanos.Load()).Seconds())
	counter(descReclaimed, st.GensReclaimed.Load())
	counter(descVersionsCollected, st.VersionsCollected.Load())
	counter(descFilesCollected, st.FilesCollected.Load())
	counter(descOrphans, st.OrphansSwept.Load())
	counter(descFeedProbes, st.FeedProbes.Load())
	gauge(descFeedWaiting, float64(st.FeedWaiting.Load()))

	layouts, batches, payloads := c.db.CacheStats()
	for _, x := range []struct {
		name string
		st   cache.Stats
	}{{"layouts", layouts}, {"batches", batches}, {"payloads", payloads}} {
		ch <- prometheus.MustNewConstMetric(descCacheHits, prometheus.CounterValue, float64(x.st.Hits), x.name)
		ch <- prometheus.MustNewConstMetric(descCacheMisses, prometheus.CounterValue, float64(x.st.Misses), x.name)
		ch <- prometheus.MustNewConstMetric(descCacheEvictions, prometheus.CounterValue, float64(x.st.Evictions), x.name)
		ratio := 0.0
		if n := x.st.Hits + x.st.Misses; n > 0 {
			ratio = float64(x.st.Hits) / float64(n)
		}
		gauge(descCacheRatio, ratio, x.name)
		gauge(descCacheBytes, float64(x.st.Bytes), x.name)
		gauge(descCacheMaxBytes, float64(x.st.MaxBytes), x.name)
	}
	gauge(descInFlight, float64(c.db.InFlightPayloadBytes()))
	gauge(descInFlightMax, float64(c.db.Config().MaxPayloadInFlight))
}

package server

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/objstore"
)

// Config holds the service's limits and behaviour. Zero fields take the
// defaults of DefaultConfig; cmd/rollstore fills it from flags and the
// environment.
type Config struct {
	// MaxBodyBytes bounds the body of one PUT: the payload, which streams
	// to the store and is never held whole in memory.
	MaxBodyBytes int64
	// MaxRecordHeaderBytes bounds the Rollstore-Record header (431 above).
	MaxRecordHeaderBytes int
	// MaxBatchBytes bounds a batch body, and the batch once decoded (an
	// Arrow stream may be compressed). Batches are decoded in memory
	// (all-or-nothing needs every item before the first is written), so
	// this bounds the memory one batch request takes, to a small multiple
	// of it (see TestBatchMemoryIsBounded).
	MaxBatchBytes int64
	// UploadIdleTimeout: an upload whose body delivers no byte for this long
	// is answered 408 and nothing of it is stored. Negative disables it,
	// and the minimum rate with it.
	UploadIdleTimeout time.Duration
	// UploadMinRate (bytes per second): after a head start of
	// UploadIdleTimeout, an upload must have averaged at least this since
	// it began, or it is answered 408 and nothing of it is stored. Without
	// it a client sending a byte now and then holds its request slot for
	// as long as it likes. Negative disables it.
	UploadMinRate int64
	// DownloadIdleTimeout: a streamed answer (a payload, a scan) whose
	// client takes no byte for this long is cut off, giving back its
	// request slot and payload budget. Negative disables it, and the
	// minimum rate with it.
	DownloadIdleTimeout time.Duration
	// DownloadMinRate (bytes per second): after a head start of
	// DownloadIdleTimeout, a client must have taken a streamed answer at
	// least this fast on average, or it is cut off. Negative disables it.
	DownloadMinRate int64
	// MaxClientShare is the fraction (0 < share < 1) of the request
	// slots, the upload slots and the in-flight payload budget that one
	// client (its bearer token with auth on, else its address) may hold at
	// once; past it the client is answered 503 overloaded while others
	// are still served. A client holding nothing is always admitted. 1
	// disables it.
	MaxClientShare float64
	// MaxConcurrentRequests bounds the API requests served at once; the
	// next is refused with 503 and Retry-After rather than queued. Health
	// and metrics requests are not counted.
	MaxConcurrentRequests int
	// MaxConcurrentUploads bounds the uploads (PUT of a rollout, batches)
	// among them, so uploads, however slow, always leave
	// MaxConcurrentRequests-MaxConcurrentUploads slots to reads. Default:
	// half of MaxConcurrentRequests.
	MaxConcurrentUploads int
	// MergeInterval is the period of the in-process merger. Negative
	// disables it (a separate merger process does the work).
	MergeInterval time.Duration
	// SweepEvery makes every SweepEvery-th merger pass also sweep orphans.
	SweepEvery int
	// DrainTimeout bounds the graceful drain after Serve's context ends.
	DrainTimeout time.Duration
	// CloseTimeout bounds closing the database after the drain: sealing
	// the open generations and releasing the shard's lease, so the next
	// process can take the shard at once. It is time of its own, not what
	// is left of DrainTimeout, which an overrunning upload may have spent.
	CloseTimeout time.Duration
	// DrainDelay keeps the listener open after readiness starts failing, so
	// load balancers notice before connections are refused. During it every
	// API request is answered 503 "draining". Zero (the default) closes the
	// listener at once.
	DrainDelay time.Duration
	// RetryAfter is the Retry-After sent with every 503.
	RetryAfter time.Duration
	// ReadyTimeout bounds /readyz: it answers within this, 503 with the
	// reason if the store or the tables did not answer in time. Keep it
	// below the readiness probe's timeout.
	ReadyTimeout time.Duration
	// MaxBatchRows bounds the rows of one batch; default (and at most) the
	// engine's SegmentMaxRows, since a batch is committed as one segment.
	MaxBatchRows int
	// MaxLookupIDs bounds the ids of one multi-id get (POST .../lookup):
	// more are refused with 413. Default 1000.
	MaxLookupIDs int
	// MaxLookupBytes bounds a multi-id get's body (413 above). Default
	// room for MaxLookupIDs ids of the longest kind, JSON-escaped.
	MaxLookupBytes int64
	// LookupParallelism bounds the lookups one multi-id get runs at once.
	// Default engine.DefaultGetManyParallelism.
	LookupParallelism int
	// FeedMaxRows and FeedMaxBytes bound one feed answer: a request's
	// max_rows and max_bytes are lowered to them. Defaults 10000 and 64 MiB.
	FeedMaxRows  int
	FeedMaxBytes int64
	// FeedMaxWait bounds a feed long-poll's wait (a longer one is lowered
	// to it). Default 60s.
	FeedMaxWait time.Duration
	// FeedMaxWaiting bounds the long-polls waiting at once. They hold no
	// request slot (a reader waiting for rows must not starve the
	// others), so they are bounded by this instead; a long-poll beyond it,
	// or beyond its client's share of it (MaxClientShare), is served as a
	// request that does not wait. Default 1024.
	FeedMaxWaiting int
	// ConsumerLagInterval is the period of the consumer lag gauges'
	// refresh. Default 15s.
	ConsumerLagInterval time.Duration
	// AuthTokens, when not empty, makes every request except /healthz and
	// /readyz require "Authorization: Bearer <token>" with one of them.
	AuthTokens []string
	// DisableUI turns the status page off (GET /ui and the routes it
	// uses answer 404 like any path that is no route).
	DisableUI bool
	// Store, if it offers a Check or Ping method, is probed by /readyz;
	// otherwise readiness lists the tables.
	Store objstore.Bucket
	// StorePrefix is the prefix the engine's store lives under
	// (objstore.Prefixed; cmd/rollstore's --prefix). Records' payload_ref
	// gets it, so that it names the payload's object in the container or
	// folder rather than a key only the engine can resolve.
	StorePrefix string
	// Logger receives request and merger logs; nil discards them.
	Logger *slog.Logger
	// Collectors are registered on the server's metrics registry along
	// with its own metrics (the store's, say).
	Collectors []prometheus.Collector
	// Hooks are called at named points (tests pause or observe there).
	Hooks hook.Func
	// ForwardClient sends forwarded commits to the owners of partitions;
	// nil: a client of the server's own (kept-alive connections, a 3 s
	// connect timeout, 60 s for an answer).
	ForwardClient *http.Client
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		MaxBodyBytes:          1 << 30,
		MaxRecordHeaderBytes:  64 << 10,
		MaxBatchBytes:         64 << 20,
		UploadIdleTimeout:     30 * time.Second,
		UploadMinRate:         64 << 10,
		DownloadIdleTimeout:   30 * time.Second,
		DownloadMinRate:       64 << 10,
		MaxClientShare:        0.5,
		MaxConcurrentRequests: 1024,
		MergeInterval:         30 * time.Second,
		SweepEvery:            10,
		DrainTimeout:          30 * time.Second,
		CloseTimeout:          5 * time.Second,
		RetryAfter:            time.Second,
		ReadyTimeout:          2 * time.Second,
		MaxLookupIDs:          1000,
		LookupParallelism:     engine.DefaultGetManyParallelism,
		FeedMaxRows:           10000,
		FeedMaxBytes:          64 << 20,
		FeedMaxWait:           60 * time.Second,
		FeedMaxWaiting:        1024,
		ConsumerLagInterval:   15 * time.Second,
	}
}

// lookupBytesPerID is the body room MaxLookupBytes gives each id by
// default: the longest id, every byte of it escaped as \u00XX would be
// 6 bytes a byte, but ids hold no control characters, and JSON escapes
// non-ASCII in at most 12 bytes per 3 or 4 of UTF-8 (\uXXXX, or a
// surrogate pair): 4 bytes a byte, plus quotes, a comma and whitespace.
const lookupBytesPerID = 4*rowfile.MaxIDBytes + 16

func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig()
	orDefault(&c.MaxBodyBytes, d.MaxBodyBytes)
	orDefault(&c.MaxRecordHeaderBytes, d.MaxRecordHeaderBytes)
	orDefault(&c.MaxBatchBytes, d.MaxBatchBytes)
	orDefault(&c.UploadIdleTimeout, d.UploadIdleTimeout)
	orDefault(&c.UploadMinRate, d.UploadMinRate)
	c.UploadMinRate = max(c.UploadMinRate, 0) // negative: none
	orDefault(&c.DownloadIdleTimeout, d.DownloadIdleTimeout)
	orDefault(&c.DownloadMinRate, d.DownloadMinRate)
	c.DownloadMinRate = max(c.DownloadMinRate, 0) // negative: none
	orDefault(&c.MaxClientShare, d.MaxClientShare)
	orDefault(&c.MaxConcurrentRequests, d.MaxConcurrentRequests)
	orDefault(&c.MaxConcurrentUploads, max(1, c.MaxConcurrentRequests/2))
	orDefault(&c.MergeInterval, d.MergeInterval)
	orDefault(&c.SweepEvery, d.SweepEvery)
	orDefault(&c.DrainTimeout, d.DrainTimeout)
	orDefault(&c.CloseTimeout, d.CloseTimeout)
	orDefault(&c.RetryAfter, d.RetryAfter)
	orDefault(&c.ReadyTimeout, d.ReadyTimeout)
	orDefault(&c.MaxLookupIDs, d.MaxLookupIDs)
	orDefault(&c.MaxLookupBytes, int64(max(c.MaxLookupIDs, 0))*lookupBytesPerID+1024)
	orDefault(&c.LookupParallelism, d.LookupParallelism)
	orDefault(&c.FeedMaxRows, d.FeedMaxRows)
	orDefault(&c.FeedMaxBytes, d.FeedMaxBytes)
	orDefault(&c.FeedMaxWait, d.FeedMaxWait)
	orDefault(&c.FeedMaxWaiting, d.FeedMaxWaiting)
	orDefault(&c.ConsumerLagInterval, d.ConsumerLagInterval)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.MaxBodyBytes < 0, c.MaxRecordHeaderBytes < 0, c.MaxBatchBytes < 0:
		return c, fmt.Errorf("server: size limits must be positive")
	case c.MaxConcurrentRequests < 0, c.MaxConcurrentUploads < 0, c.MaxBatchRows < 0:
		return c, fmt.Errorf("server: MaxConcurrentRequests, MaxConcurrentUploads and MaxBatchRows must be positive")
	case c.MaxConcurrentUploads > c.MaxConcurrentRequests:
		return c, fmt.Errorf("server: MaxConcurrentUploads %d exceeds MaxConcurrentRequests %d", c.MaxConcurrentUploads, c.MaxConcurrentRequests)
	case c.MaxClientShare < 0 || c.MaxClientShare > 1:
		return c, fmt.Errorf("server: MaxClientShare %v must be in (0, 1] (1: no per-client bound)", c.MaxClientShare)
	case c.MaxLookupIDs < 0, c.MaxLookupBytes < 0, c.LookupParallelism < 0:
		return c, fmt.Errorf("server: MaxLookupIDs, MaxLookupBytes and LookupParallelism must be positive")
	case c.FeedMaxRows < 0, c.FeedMaxBytes < 0, c.FeedMaxWait < 0, c.FeedMaxWaiting < 0, c.ConsumerLagInterval < 0:
		return c, fmt.Errorf("server: FeedMaxRows, FeedMaxBytes, FeedMaxWait, FeedMaxWaiting and ConsumerLagInterval must be positive")
	case c.SweepEvery < 0:
		return c, fmt.Errorf("server: SweepEvery must be positive")
	case c.DrainTimeout < 0, c.DrainDelay < 0, c.CloseTimeout < 0, c.RetryAfter < 0, c.ReadyTimeout < 0:
		return c, fmt.Errorf("server: drain and retry durations must not be negative")
	}
	for _, t := range c.AuthTokens {
		if t == "" {
			return c, fmt.Errorf("server: empty auth token")
		}
	}
	return c, nil
}

// orDefault sets *v to d when it is zero, the value of "not set".
func orDefault[T int | int64 | float64 | time.Duration](v *T, d T) {
	if *v == 0 {
		*v = d
	}
}

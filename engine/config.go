// Config: the knobs of a DB and their defaults.

package engine

import (
	"log/slog"
	"time"

	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/internal/sched"
)

// Config tunes a DB. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// Shard names this process's writer: its member name among the
	// writers of partitioned tables (which spread the partitions among
	// themselves), and its own shard in tables without partitions. Empty
	// for readers and mergers, which then refuse appends with ErrNoWriter.
	// A process restarted under the same name takes its partitions back at
	// once.
	Shard string
	// Addr is where other processes forward appends for the partitions
	// this writer owns (host:port), listed with its name in the members.
	Addr string
	// Partitions is the partition count of tables created without one;
	// negative: tables without partitions.
	Partitions int
	// MembersPollInterval: how often a writer of a partitioned table reads
	// the members (learning of joins and departures: partitions move at
	// most this long after) and how long a cached view serves routing.
	MembersPollInterval time.Duration

	// InlineMax: payloads up to this size go inline into WAL segments;
	// larger ones are streamed to their own objects.
	InlineMax int64
	// MaxPayload bounds one payload.
	MaxPayload int64
	// GroupCommitWindow is how long the committer waits to gather
	// concurrent appends into one segment.
	GroupCommitWindow time.Duration
	// SegmentMaxBytes and SegmentMaxRows cut a group commit; SegmentMaxRows
	// is also the most rows one batch append may carry.
	SegmentMaxBytes int64
	SegmentMaxRows  int
	// A generation is sealed when it reaches GenMaxBytes, GenMaxSegments or
	// GenMaxAge.
	GenMaxBytes    int64
	GenMaxSegments int
	GenMaxAge      time.Duration
	// IdleAfter: a writer with no appends for this long leaves the
	// registry's active set, so readers stop probing its shard.
	IdleAfter time.Duration

	// MergeMaxBytes bounds the WAL bytes one merge pass takes (a single
	// larger generation is still merged whole).
	MergeMaxBytes int64
	// ReclaimGrace delays deleting merged generations after their commit.
	ReclaimGrace time.Duration
	// Retention of base versions: the newest RetainVersions and every
	// version younger than RetainAge are kept readable.
	RetainVersions int
	RetainAge      time.Duration
	// OrphanGrace: unreferenced objects older than this are swept.
	OrphanGrace time.Duration
	// FeedRetention keeps merged generations readable by the feed for this
	// long after they were sealed (so for at least this long after each of
	// their rows was acknowledged); zero reclaims them right after the
	// merge (ReclaimGrace), and the feed answers a cursor into a reclaimed
	// generation with ErrCursorExpired.
	FeedRetention time.Duration
	// FeedPollInterval: how often a process probes the heads of the
	// partitions its long-polling feed readers wait on (one probe for all
	// of them).
	FeedPollInterval time.Duration
	// GroupSessionTimeout: a consumer-group member that has not been heard
	// from for this long is removed from its group (its partitions go to
	// the others).
	GroupSessionTimeout time.Duration
	// Compaction: when a base has more than CompactMaxFiles data files, the
	// smallest are rewritten into the next merge's output, whose files are
	// cut at TargetFileBytes.
	CompactMaxFiles int
	TargetFileBytes int64

	// Back-pressure: an append is refused with ErrBackpressure while its
	// shard has more than WriteMaxPendingGens generations waiting for a
	// merge, or the table more than WriteMaxPendingTotal.
	WriteMaxPendingGens  int
	WriteMaxPendingTotal int
	// MaxPayloadInFlight bounds the payload bytes being read at once.
	MaxPayloadInFlight int64
	// CacheBytes bounds the caches of immutable indexes and batches, and
	// the resident snapshots.
	CacheBytes int64
	// PayloadCacheBytes bounds the cache of hot payloads (0 disables it);
	// payloads larger than PayloadCacheMaxItem are never cached.
	PayloadCacheBytes   int64
	PayloadCacheMaxItem int64
	// MaxManifestBytes bounds metadata reads (manifests, seal records).
	MaxManifestBytes int64
	// LeaseDuration is the shard and merger lease period (15–60 s) on stores
	// with leases; negative disables leases.
	LeaseDuration time.Duration
	// BaseProbeInterval: a refresh checks for a newer base version at
	// least this often even when the registry names none.
	BaseProbeInterval time.Duration
	// ResidentMaxAge bounds how long a read may be served from the
	// resident snapshot without a refresh: a table dropped (or a row
	// merged) by another process is noticed within it, at the cost of one
	// refresh per table per period.
	ResidentMaxAge time.Duration

	// Hooks are called at named points (tests pause or fail there).
	Hooks hook.Func
	// Runtime supplies goroutines, waits and the clock (sched.Real when
	// nil; the simulator supplies its own).
	Runtime sched.Runtime
	Logger  *slog.Logger
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Partitions:           DefaultPartitions,
		MembersPollInterval:  time.Second,
		InlineMax:            1 << 20,
		MaxPayload:           1 << 30,
		GroupCommitWindow:    2 * time.Millisecond,
		SegmentMaxBytes:      16 << 20,
		SegmentMaxRows:       4096,
		GenMaxBytes:          64 << 20,
		GenMaxSegments:       256,
		GenMaxAge:            30 * time.Second,
		IdleAfter:            10 * time.Second,
		MergeMaxBytes:        256 << 20,
		ReclaimGrace:         5 * time.Second,
		RetainVersions:       8,
		RetainAge:            10 * time.Minute,
		OrphanGrace:          time.Hour,
		FeedRetention:        7 * 24 * time.Hour,
		FeedPollInterval:     250 * time.Millisecond,
		GroupSessionTimeout:  2 * time.Minute,
		CompactMaxFiles:      16,
		TargetFileBytes:      128 << 20,
		WriteMaxPendingGens:  32,
		WriteMaxPendingTotal: 256,
		MaxPayloadInFlight:   512 << 20,
		CacheBytes:           256 << 20,
		PayloadCacheBytes:    64 << 20,
		PayloadCacheMaxItem:  1 << 20,
		MaxManifestBytes:     64 << 20,
		LeaseDuration:        30 * time.Second,
		BaseProbeInterval:    2 * time.Second,
		ResidentMaxAge:       time.Second,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	setDefault(&c.MembersPollInterval, d.MembersPollInterval)
	if c.Partitions == 0 {
		c.Partitions = d.Partitions
	}
	setDefault(&c.InlineMax, d.InlineMax)
	setDefault(&c.MaxPayload, d.MaxPayload)
	setDefault(&c.GroupCommitWindow, d.GroupCommitWindow)
	setDefault(&c.SegmentMaxBytes, d.SegmentMaxBytes)
	setDefault(&c.SegmentMaxRows, d.SegmentMaxRows)
	setDefault(&c.GenMaxBytes, d.GenMaxBytes)
	setDefault(&c.GenMaxSegments, d.GenMaxSegments)
	setDefault(&c.GenMaxAge, d.GenMaxAge)
	setDefault(&c.IdleAfter, d.IdleAfter)
	setDefault(&c.MergeMaxBytes, d.MergeMaxBytes)
	setDefault(&c.RetainVersions, d.RetainVersions)
	setDefault(&c.CompactMaxFiles, d.CompactMaxFiles)
	setDefault(&c.TargetFileBytes, d.TargetFileBytes)
	setDefault(&c.WriteMaxPendingGens, d.WriteMaxPendingGens)
	setDefault(&c.WriteMaxPendingTotal, d.WriteMaxPendingTotal)
	setDefault(&c.MaxPayloadInFlight, d.MaxPayloadInFlight)
	setDefault(&c.MaxManifestBytes, d.MaxManifestBytes)
	setDefault(&c.BaseProbeInterval, d.BaseProbeInterval)
	setDefault(&c.ResidentMaxAge, d.ResidentMaxAge)
	setDefault(&c.PayloadCacheMaxItem, d.PayloadCacheMaxItem)
	setDefault(&c.FeedPollInterval, d.FeedPollInterval)
	setDefault(&c.GroupSessionTimeout, d.GroupSessionTimeout)
	c.FeedRetention = max(c.FeedRetention, 0)
	// Zero is meaningful for the grace periods, the retention age and the
	// cache sizes (tests run with zero grace); negative means "default".
	if c.ReclaimGrace < 0 {
		c.ReclaimGrace = d.ReclaimGrace
	}
	if c.RetainAge < 0 {
		c.RetainAge = d.RetainAge
	}
	if c.OrphanGrace < 0 {
		c.OrphanGrace = d.OrphanGrace
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = d.LeaseDuration
	}
	if c.CacheBytes < 0 {
		c.CacheBytes = d.CacheBytes
	}
	if c.PayloadCacheBytes < 0 {
		c.PayloadCacheBytes = d.PayloadCacheBytes
	}
	if c.Runtime == nil {
		c.Runtime = sched.Real
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func setDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

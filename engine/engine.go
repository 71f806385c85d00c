// Package engine implements rollstore's tables on an object store: the write
// path into per-shard WAL generations, the merge that folds sealed
// generations into immutable numbered base versions, reclamation of merged
// generations, retention, and the read path that stays correct while all of
// that runs concurrently.
//
// The invariants it keeps (see DESIGN.md):
//   - A write is acknowledged only once its segment is durable.
//   - Base versions are committed by create-if-absent of the next manifest.
//   - A merge commits base v+1 before it reclaims the generations it merged,
//     so a row is always in the base or in a live generation.
//   - Readers never lock: the resident snapshot is an immutable value swapped
//     atomically, refreshed under deduplication, and a read that loses a
//     WAL file to reclamation retries against a refreshed snapshot a bounded
//     number of times.
//
// Large payloads are stored as their own objects. A merge re-references them
// from the base instead of copying them, so reclaiming a generation deletes
// its segments and seal record but never its payload objects; those are
// deleted only by the payload sweep, once no retained base version and no
// live generation references them.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/rollstore/rollstore/cache"
	"github.com/rollstore/rollstore/engine/layout"
	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/objstore"
)

// Record is a rollout row.
type Record = rowfile.Record

// Errors callers branch on.
var (
	ErrTableNotFound = errors.New("table not found")
	ErrTableExists   = errors.New("table already exists")
	ErrNotFound      = errors.New("row not found")
	ErrConflict      = errors.New("id exists with different content")
	ErrVersionGone   = errors.New("base version was garbage-collected")
	ErrNoVersion     = errors.New("base version does not exist")
	// ErrMissingFile: a file the read needed stayed missing after the
	// bounded retries; never reported as ErrNotFound.
	ErrMissingFile = errors.New("file missing after bounded retries")
	// ErrOverloaded: a cap was hit (read fan-out, in-flight bytes); retry later.
	ErrOverloaded = errors.New("overloaded, retry later")
	// ErrFenced: this writer lost ownership of its shard and stopped.
	ErrFenced = errors.New("writer fenced: shard owned elsewhere")
	// ErrClosed: the table or database is closed or being dropped.
	ErrClosed      = errors.New("closed")
	ErrNoWriter    = errors.New("this process owns no writer shard")
	ErrTooLarge    = errors.New("payload too large")
	ErrInvalid     = rowfile.ErrInvalidRecord
	ErrInvalidName = layout.ErrInvalidName
)

// Config tunes a DB. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// Shard is the writer shard this process owns; empty for readers and
	// mergers, which then refuse appends with ErrNoWriter.
	Shard string

	// InlineMax: payloads up to this size go inline into WAL segments;
	// larger ones are streamed to their own objects.
	InlineMax int64
	// MaxPayload bounds one payload.
	MaxPayload int64
	// GroupCommitWindow is how long the committer waits to gather
	// concurrent appends into one segment.
	GroupCommitWindow time.Duration
	// SegmentMaxBytes and SegmentMaxRows cut a group commit.
	SegmentMaxBytes int64
	SegmentMaxRows  int
	// A generation is sealed when it reaches GenMaxBytes, GenMaxSegments or
	// GenMaxAge.
	GenMaxBytes    int64
	GenMaxSegments int
	GenMaxAge      time.Duration

	// MergeMaxBytes bounds the WAL bytes one merge pass takes (a single
	// larger generation is still merged whole).
	MergeMaxBytes int64
	// ReclaimGrace delays deleting merged generations after their commit.
	ReclaimGrace time.Duration
	// Retention of base versions: the newest RetainVersions and every
	// version younger than RetainAge are kept readable.
	RetainVersions int
	RetainAge      time.Duration
	// OrphanGrace: uncommitted objects older than this are swept.
	OrphanGrace time.Duration
	// Compaction: when a base has more than CompactMaxFiles data files, the
	// smallest are rewritten into the next merge's output, whose files are
	// cut at TargetFileBytes.
	CompactMaxFiles int
	TargetFileBytes int64

	// Read caps: a WAL lookup consults at most this many pending
	// generations per shard and in total, else ErrOverloaded.
	ReadMaxPendingPerShard int
	ReadMaxPendingTotal    int
	// MaxPayloadInFlight bounds the payload bytes being read at once.
	MaxPayloadInFlight int64
	// CacheBytes bounds the cache of immutable indexes and batches.
	CacheBytes int64
	// MaxManifestBytes and MaxSegmentBytes bound metadata reads.
	MaxManifestBytes int64
	// LeaseDuration is the shard and merger lease period (15–60 s) on stores
	// with leases; negative disables leases.
	LeaseDuration time.Duration

	// Hooks are called at named points (tests pause or fail there).
	Hooks hook.Func
	// Now is the clock; tests may replace it.
	Now    func() time.Time
	Logger *slog.Logger
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		InlineMax:              1 << 20,
		MaxPayload:             1 << 30,
		GroupCommitWindow:      2 * time.Millisecond,
		SegmentMaxBytes:        16 << 20,
		SegmentMaxRows:         4096,
		GenMaxBytes:            64 << 20,
		GenMaxSegments:         256,
		GenMaxAge:              30 * time.Second,
		MergeMaxBytes:          256 << 20,
		ReclaimGrace:           5 * time.Second,
		RetainVersions:         8,
		RetainAge:              10 * time.Minute,
		OrphanGrace:            time.Hour,
		CompactMaxFiles:        16,
		TargetFileBytes:        128 << 20,
		ReadMaxPendingPerShard: 64,
		ReadMaxPendingTotal:    256,
		MaxPayloadInFlight:     512 << 20,
		CacheBytes:             256 << 20,
		MaxManifestBytes:       64 << 20,
		LeaseDuration:          30 * time.Second,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	setDefault(&c.InlineMax, d.InlineMax)
	setDefault(&c.MaxPayload, d.MaxPayload)
	setDefault(&c.GroupCommitWindow, d.GroupCommitWindow)
	setDefault(&c.SegmentMaxBytes, d.SegmentMaxBytes)
	setDefault(&c.SegmentMaxRows, d.SegmentMaxRows)
	setDefault(&c.GenMaxBytes, d.GenMaxBytes)
	setDefault(&c.GenMaxSegments, d.GenMaxSegments)
	setDefault(&c.GenMaxAge, d.GenMaxAge)
	setDefault(&c.MergeMaxBytes, d.MergeMaxBytes)
	setDefault(&c.RetainVersions, d.RetainVersions)
	setDefault(&c.CompactMaxFiles, d.CompactMaxFiles)
	setDefault(&c.TargetFileBytes, d.TargetFileBytes)
	setDefault(&c.ReadMaxPendingPerShard, d.ReadMaxPendingPerShard)
	setDefault(&c.ReadMaxPendingTotal, d.ReadMaxPendingTotal)
	setDefault(&c.MaxPayloadInFlight, d.MaxPayloadInFlight)
	setDefault(&c.MaxManifestBytes, d.MaxManifestBytes)
	// Zero is meaningful for the grace periods, the retention age and the
	// cache size (tests run with zero grace); negative means "default".
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
	if c.Now == nil {
		c.Now = time.Now
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

// DB is the engine over one object store.
type DB struct {
	store objstore.Bucket
	cfg   Config
	stats *Stats

	// Immutable things only: layouts of data files, seals and segments
	// (keyed by object key), and decoded batches (key#batch).
	layouts *cache.Cache[string, *rowfile.Layout]
	seals   *cache.Cache[string, *sealRecord]
	batches *cache.Cache[string, []rowfile.Record]
	// resident bounds the tables whose snapshot stays resident: evicting a
	// table drops its snapshot (the next read reloads it). Reads never touch
	// this cache; installing a snapshot marks the table used.
	resident *cache.Cache[*Table, *snapshot]

	budget *budget

	mu     sync.Mutex
	tables map[string]*Table
	closed bool
}

// Open returns a DB over store.
func Open(store objstore.Bucket, cfg Config) (*DB, error) {
	cfg = cfg.withDefaults()
	if cfg.Shard != "" {
		if err := layout.ValidateShard(cfg.Shard); err != nil {
			return nil, err
		}
	}
	if cfg.LeaseDuration > 0 {
		if err := objstore.ValidateLeaseDuration(cfg.LeaseDuration); err != nil {
			return nil, err
		}
	}
	return &DB{
		store:   store,
		cfg:     cfg,
		stats:   &Stats{},
		layouts: cache.New[string, *rowfile.Layout](cfg.CacheBytes / 2),
		seals:   cache.New[string, *sealRecord](cfg.CacheBytes / 4),
		batches: cache.New[string, []rowfile.Record](cfg.CacheBytes / 4),
		resident: cache.New[*Table, *snapshot](max(cfg.CacheBytes/16, 1<<20),
			// Only the evicted snapshot is dropped: a newer one installed
			// meanwhile (which replaced this entry) stays.
			cache.WithOnEvict(func(t *Table, s *snapshot) { t.snap.CompareAndSwap(s, nil) })),
		budget: newBudget(cfg.MaxPayloadInFlight),
		tables: map[string]*Table{},
	}, nil
}

// Config returns the effective configuration.
func (db *DB) Config() Config { return db.cfg }

// Stats returns the engine's counters.
func (db *DB) Stats() *Stats { return db.stats }

// CacheStats reports the layout and batch caches.
func (db *DB) CacheStats() (layouts, batches cache.Stats) {
	return db.layouts.Stats(), db.batches.Stats()
}

// InFlightPayloadBytes reports the payload bytes reserved by open reads.
func (db *DB) InFlightPayloadBytes() int64 { return db.budget.used() }

// Close seals every open generation this process writes and stops writers.
func (db *DB) Close(ctx context.Context) error {
	db.mu.Lock()
	db.closed = true
	tables := make([]*Table, 0, len(db.tables))
	for _, t := range db.tables {
		tables = append(tables, t)
	}
	db.mu.Unlock()
	var errs []error
	for _, t := range tables {
		errs = append(errs, t.close(ctx))
	}
	return errors.Join(errs...)
}

type descriptor struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	Schema    int       `json:"schema"`
}

const schemaVersion = 1

// CreateTable creates an empty table.
func (db *DB) CreateTable(ctx context.Context, name string) error {
	lay, err := layout.ForTable(name)
	if err != nil {
		return err
	}
	body, _ := json.Marshal(descriptor{Name: name, CreatedAt: db.cfg.Now().UTC(), Schema: schemaVersion})
	_, err = db.store.Put(ctx, lay.Descriptor(), strings.NewReader(string(body)),
		objstore.PutOptions{IfNotExists: true, Size: int64(len(body))})
	if errors.Is(err, objstore.ErrPrecondition) {
		return fmt.Errorf("%w: %s", ErrTableExists, name)
	}
	return err
}

// ListTables lists table names in order.
func (db *DB) ListTables(ctx context.Context) ([]string, error) {
	var names []string
	err := db.store.List(ctx, "", objstore.ListOptions{Delimited: true}, func(e objstore.Entry) error {
		if !e.IsPrefix {
			return nil
		}
		name := strings.TrimSuffix(e.Key, "/")
		if layout.ValidateTable(name) != nil {
			return nil
		}
		lay, _ := layout.ForTable(name)
		if _, err := db.store.Head(ctx, lay.Descriptor()); err == nil {
			names = append(names, name)
		} else if !errors.Is(err, objstore.ErrNotFound) {
			return err
		}
		return nil
	})
	return names, err
}

// Table opens a table. The handle is shared by the process and stays valid
// until the table is dropped or the DB closed.
func (db *DB) Table(ctx context.Context, name string) (*Table, error) {
	lay, err := layout.ForTable(name)
	if err != nil {
		return nil, err
	}
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return nil, ErrClosed
	}
	t := db.tables[name]
	db.mu.Unlock()
	if t != nil && !t.dropped.Load() {
		return t, nil
	}
	desc, err := db.store.Head(ctx, lay.Descriptor())
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, fmt.Errorf("%w: %s", ErrTableNotFound, name)
		}
		return nil, err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if t := db.tables[name]; t != nil && !t.dropped.Load() {
		return t, nil
	}
	t = newTable(db, lay, desc.ETag)
	db.tables[name] = t
	return t, nil
}

// DropTable refuses further writes to the table at once, then deletes the
// descriptor (so no process opens it again) and every object of the table.
func (db *DB) DropTable(ctx context.Context, name string) error {
	t, err := db.Table(ctx, name)
	if err != nil {
		return err
	}
	t.dropped.Store(true)
	_ = t.close(ctx)
	db.mu.Lock()
	if db.tables[name] == t {
		delete(db.tables, name)
	}
	db.mu.Unlock()
	if err := db.store.Delete(ctx, t.lay.Descriptor()); err != nil {
		return err
	}
	var keys []string
	err = db.store.List(ctx, t.lay.Root(), objstore.ListOptions{}, func(e objstore.Entry) error {
		keys = append(keys, e.Key)
		if len(keys) >= 1000 {
			err := db.store.DeleteMany(ctx, keys)
			keys = keys[:0]
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return db.store.DeleteMany(ctx, keys)
}

// DB: the engine over one object store, its caches, Open and Close.

package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/rollstore/rollstore/cache"
	"github.com/rollstore/rollstore/engine/keyspace"
	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
)

// Record is a rollout row.
type Record = rowfile.Record

// DB is the engine over one object store.
type DB struct {
	store objstore.Bucket
	cfg   Config
	// proc names this process among the writers of partitioned tables
	// (see memberEntry.Proc).
	proc  string
	rt    sched.Runtime
	stats *Stats

	// Immutable things only, keyed by object key (keys name their table's
	// incarnation, so nothing cached outlives a drop): layouts of data
	// files and segments, seal records, decoded batches.
	layouts *cache.Cache[string, *rowfile.Layout]
	seals   *cache.Cache[string, *sealRecord]
	batches *cache.Cache[string, []rowfile.Record]
	// payloads holds whole hot payloads by checksum and size.
	payloads *cache.Cache[payloadKey, []byte]
	// resident bounds the tables whose snapshot stays resident, charged
	// what each snapshot holds: evicting one drops it (the next read
	// rebuilds it). Reads never touch this cache.
	resident *cache.Cache[*Table, *snapshot]

	budget *budget

	mu     sync.Mutex
	tables map[string]*Table
	// unsure holds, per table name, the incarnation of this process's
	// last CreateTable whose outcome stayed unknown: a retry that finds
	// the descriptor naming it is the same create, and succeeds.
	unsure map[string]string
	closed bool
}

type payloadKey struct {
	sum  [32]byte
	size int64
}

// Open returns a DB over store.
func Open(store objstore.Bucket, cfg Config) (*DB, error) {
	cfg = cfg.withDefaults()
	if cfg.Shard != "" {
		if err := keyspace.ValidateShard(cfg.Shard); err != nil {
			return nil, err
		}
	}
	if cfg.LeaseDuration > 0 {
		if err := objstore.ValidateLeaseDuration(cfg.LeaseDuration); err != nil {
			return nil, err
		}
	}
	rt := cfg.Runtime
	db := &DB{
		store:    store,
		cfg:      cfg,
		rt:       rt,
		stats:    &Stats{},
		layouts:  cache.New(cfg.CacheBytes/4, cache.WithRuntime[string, *rowfile.Layout](rt)),
		seals:    cache.New(cfg.CacheBytes/8, cache.WithRuntime[string, *sealRecord](rt)),
		batches:  cache.New(cfg.CacheBytes/8, cache.WithRuntime[string, []rowfile.Record](rt)),
		payloads: cache.New(cfg.PayloadCacheBytes, cache.WithRuntime[payloadKey, []byte](rt)),
		budget:   newBudget(cfg.MaxPayloadInFlight),
		tables:   map[string]*Table{},
		unsure:   map[string]string{},
	}
	db.proc = db.randomName()[:16]
	db.resident = cache.New(max(cfg.CacheBytes/2, 1<<20),
		cache.WithRuntime[*Table, *snapshot](rt),
		// Only the evicted snapshot is dropped: a newer one installed
		// meanwhile (which replaced this entry) stays.
		cache.WithOnEvict(func(t *Table, s *snapshot) { t.snap.CompareAndSwap(s, nil) }))
	return db, nil
}

// Config returns the effective configuration.
func (db *DB) Config() Config { return db.cfg }

// Stats returns the engine's counters.
func (db *DB) Stats() *Stats { return db.stats }

// CacheStats reports the layout, batch and payload caches.
func (db *DB) CacheStats() (layouts, batches, payloads cache.Stats) {
	return db.layouts.Stats(), db.batches.Stats(), db.payloads.Stats()
}

// InFlightPayloadBytes reports the payload bytes reserved by open reads.
func (db *DB) InFlightPayloadBytes() int64 { return db.budget.used() }

// randomName returns 32 hex characters from the runtime's randomness.
func (db *DB) randomName() string {
	return fmt.Sprintf("%016x%016x", db.rt.Rand(), db.rt.Rand())
}

// Close seals every open generation this process writes and stops its
// writers and lease holders. It returns once they have stopped or ctx is
// done.
func (db *DB) Close(ctx context.Context) error {
	db.mu.Lock()
	db.closed = true
	tables := make([]*Table, 0, len(db.tables))
	for _, name := range sortedKeys(db.tables) {
		tables = append(tables, db.tables[name])
	}
	db.mu.Unlock()
	var errs []error
	for _, t := range tables {
		errs = append(errs, t.closeWriters(ctx))
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// descriptor is a table's one mutable object at the name level: it names

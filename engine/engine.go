package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rollstore/rollstore/cache"
	"github.com/rollstore/rollstore/engine/keyspace"
	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/internal/sched"
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
	// ErrOverloaded: a cap was hit (in-flight bytes, back-pressure); retry later.
	ErrOverloaded = errors.New("overloaded, retry later")
	// ErrBackpressure: appends are refused while too many generations wait
	// for a merge; reads are never refused for it.
	ErrBackpressure = fmt.Errorf("merge backlog: %w", ErrOverloaded)
	// ErrFenced: this writer lost its shard (another writer moved the
	// shard's head) and stopped; what it had not acknowledged was not
	// written.
	ErrFenced = errors.New("writer fenced: shard owned elsewhere")
	// ErrOutcomeUnknown: a write may or may not have become durable (a
	// lost response, a store failure mid-commit); an identical retry is
	// answered from what landed.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrTooSlow: an append (or a create) stalled so long, against
	// OrphanGrace, that committing it could not be made safe; the caller
	// may retry it.
	ErrTooSlow = errors.New("stalled past half the orphan grace")
	// ErrClosed: the database is closed.
	ErrClosed      = errors.New("closed")
	ErrNoWriter    = errors.New("this process owns no writer shard")
	ErrTooLarge    = errors.New("payload too large")
	ErrInvalid     = rowfile.ErrInvalidRecord
	ErrInvalidName = keyspace.ErrInvalidName
	// ErrShardOwned: another live process holds the shard's lease.
	ErrShardOwned = errors.New("shard is owned by another writer")
	// ErrMergerBusy: another merger holds the table's merger lease, or a
	// merge kept losing its commit to concurrent work and gave up; retry.
	ErrMergerBusy = errors.New("another merger is running")
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

// DB is the engine over one object store.
type DB struct {
	store objstore.Bucket
	cfg   Config
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

// point is a named step: tests pause or fail there, and the simulator may
// schedule other work there.
func (db *DB) point(ctx context.Context, name string) error {
	db.rt.Point(name)
	return db.cfg.Hooks.Call(ctx, name)
}

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
		errs = append(errs, t.closeWriter(ctx))
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
// the current incarnation.
type descriptor struct {
	Name        string    `json:"name"`
	Incarnation string    `json:"incarnation"`
	CreatedAt   time.Time `json:"created_at"`
	Schema      int       `json:"schema"`
}

const schemaVersion = 2

func (db *DB) readDescriptor(ctx context.Context, lay keyspace.Table) (descriptor, objstore.Attrs, error) {
	data, attrs, err := objstore.ReadAll(ctx, db.store, lay.Descriptor(), 64<<10)
	if err != nil {
		return descriptor{}, objstore.Attrs{}, err
	}
	var d descriptor
	if err := json.Unmarshal(data, &d); err != nil {
		return descriptor{}, objstore.Attrs{}, fmt.Errorf("descriptor of %s: %w", lay.Name(), err)
	}
	if err := keyspace.ValidateIncarnation(d.Incarnation); err != nil || d.Name != lay.Name() {
		return descriptor{}, objstore.Attrs{}, fmt.Errorf("descriptor of %s names %q/%q", lay.Name(), d.Name, d.Incarnation)
	}
	if d.Schema > schemaVersion {
		return descriptor{}, objstore.Attrs{}, fmt.Errorf("table %s has schema %d; this rollstore knows up to %d", lay.Name(), d.Schema, schemaVersion)
	}
	return d, attrs, nil
}

// CreateTable creates an empty table: a new incarnation, its registry,
// then the descriptor that names it (the commit point). A descriptor whose
// incarnation was dropped without the drop finishing is replaced.
func (db *DB) CreateTable(ctx context.Context, name string) error {
	start := db.rt.Now()
	if err := db.createTable(ctx, name); err != nil {
		return err
	}
	// CollectDropped deletes an incarnation no descriptor names once its
	// objects are older than OrphanGrace: a create that took half of it
	// between its registry and its descriptor may have lost its registry.
	if grace := db.cfg.OrphanGrace; grace > 0 && db.rt.Now().Sub(start) > grace/2 {
		lay, _ := keyspace.ForTable(name)
		desc, _, err := db.readDescriptor(ctx, lay)
		if err != nil {
			return fmt.Errorf("creating %s: checking a slow create: %w", name, err)
		}
		if dropped, err := db.incarnationDropped(ctx, lay, desc.Incarnation); err != nil || dropped {
			return fmt.Errorf("%w: creating %s took more than half the orphan grace (%v), and its registry is gone (%v): create it again",
				ErrTooSlow, name, grace, err)
		}
	}
	return nil
}

func (db *DB) createTable(ctx context.Context, name string) error {
	lay, err := keyspace.ForTable(name)
	if err != nil {
		return err
	}
	now := db.rt.Now().UTC()
	inc, err := lay.Incarnation(keyspace.NewIncarnationName(now, db.rt.Rand()))
	if err != nil {
		return err
	}
	if err := createRegistry(ctx, db, inc); err != nil {
		return err
	}
	body, _ := json.Marshal(descriptor{Name: name, Incarnation: inc.Name(), CreatedAt: now, Schema: schemaVersion})
	put := func(opts objstore.PutOptions) error {
		opts.Size, opts.ContentType = int64(len(body)), "application/json"
		_, err := db.store.Put(ctx, lay.Descriptor(), bytes.NewReader(body), opts)
		return err
	}
	db.mu.Lock()
	earlier := db.unsure[name]
	db.mu.Unlock()
	settle := func(unknown bool) {
		db.mu.Lock()
		defer db.mu.Unlock()
		if unknown {
			db.unsure[name] = inc.Name()
		} else if db.unsure[name] == earlier {
			delete(db.unsure, name)
		}
	}
	err = put(objstore.PutOptions{IfNotExists: true})
	if errors.Is(err, objstore.ErrPrecondition) {
		old, attrs, rerr := db.readDescriptor(ctx, lay)
		if rerr != nil && !errors.Is(rerr, objstore.ErrNotFound) {
			return rerr
		}
		if rerr == nil && old.Incarnation == inc.Name() {
			settle(false)
			return nil // this create's own write, whose answer was lost
		}
		if rerr == nil && earlier != "" && old.Incarnation == earlier {
			// An earlier call of this process whose outcome stayed unknown
			// landed: this is the caller's retry, and that table is the one
			// asked for. This call's registry is an orphan.
			settle(false)
			_ = db.store.Delete(context.WithoutCancel(ctx), inc.Registry())
			return nil
		}
		dropped, derr := db.incarnationDropped(ctx, lay, old.Incarnation)
		switch {
		case errors.Is(rerr, objstore.ErrNotFound):
			// Deleted meanwhile (a drop finishing): try again.
			err = put(objstore.PutOptions{IfNotExists: true})
		case derr != nil:
			return derr
		case dropped:
			err = put(objstore.PutOptions{IfMatch: attrs.ETag})
		}
		if errors.Is(err, objstore.ErrPrecondition) {
			err = fmt.Errorf("%w: %s", ErrTableExists, name)
		}
	}
	if err != nil && !errors.Is(err, ErrTableExists) && !errors.Is(err, objstore.ErrPrecondition) {
		// The outcome may be unknown (a lost answer): the descriptor says.
		old, _, rerr := db.readDescriptor(ctx, lay)
		switch {
		case rerr == nil && old.Incarnation == inc.Name():
			settle(false)
			return nil
		case rerr != nil && !errors.Is(rerr, objstore.ErrNotFound):
			// Still unknown: keep the registry, which the table needs if
			// the descriptor landed (CollectDropped removes an orphan),
			// and remember the incarnation for the caller's retry.
			settle(true)
			return fmt.Errorf("creating %s: %w (checking the outcome: %v)", name, err, rerr)
		}
	}
	settle(false)
	if err != nil {
		// The new incarnation's registry is an orphan now (CollectDropped
		// would remove it later).
		_ = db.store.Delete(context.WithoutCancel(ctx), inc.Registry())
		return err
	}
	return nil
}

// incarnationDropped reports whether a drop tombstoned the incarnation's
// registry (a drop that stopped before removing the descriptor).
func (db *DB) incarnationDropped(ctx context.Context, lay keyspace.Table, inc string) (bool, error) {
	l, err := lay.Incarnation(inc)
	if err != nil {
		return false, nil
	}
	reg, _, err := readRegistry(ctx, db, l)
	if errors.Is(err, objstore.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return reg.Dropped, nil
}

// ListTables lists table names in order.
func (db *DB) ListTables(ctx context.Context) ([]string, error) {
	var names []string
	err := db.store.List(ctx, "", objstore.ListOptions{Delimited: true}, func(e objstore.Entry) error {
		if !e.IsPrefix {
			return nil
		}
		name := strings.TrimSuffix(e.Key, "/")
		if keyspace.ValidateTable(name) != nil {
			return nil
		}
		lay, _ := keyspace.ForTable(name)
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
// until the table is dropped (here or by another process, which the
// handle notices at its next refresh or write) or the DB is closed.
func (db *DB) Table(ctx context.Context, name string) (*Table, error) {
	lay, err := keyspace.ForTable(name)
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
	if t != nil && t.retiredErr() == nil {
		return t, nil
	}
	t, _, err = db.tableNow(ctx, lay)
	return t, err
}

// tableNow returns the handle of the incarnation the descriptor names now,
// retiring a cached handle of another (dropped and created again
// elsewhere), and the descriptor's ETag.
func (db *DB) tableNow(ctx context.Context, lay keyspace.Table) (*Table, string, error) {
	name := lay.Name()
	desc, attrs, err := db.readDescriptor(ctx, lay)
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, "", fmt.Errorf("%w: %s", ErrTableNotFound, name)
		}
		return nil, "", err
	}
	inc, err := lay.Incarnation(desc.Incarnation)
	if err != nil {
		return nil, "", err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed {
		return nil, "", ErrClosed
	}
	if t := db.tables[name]; t != nil && t.retiredErr() == nil {
		if t.keys.Name() == inc.Name() {
			return t, attrs.ETag, nil
		}
		// Dropped and created again elsewhere: this handle is for the
		// old incarnation.
		t.retire(fmt.Errorf("%w: %s was dropped", errDropped, name))
	}
	t := newTable(db, inc, attrs.ETag)
	db.tables[name] = t
	return t, attrs.ETag, nil
}

// forget removes t from the open tables if it is still the one there.
func (db *DB) forget(t *Table) {
	db.mu.Lock()
	if db.tables[t.Name()] == t {
		delete(db.tables, t.Name())
	}
	db.mu.Unlock()
	db.resident.Remove(t)
}

// DropTable drops a table, even while writes to it are running:
//
//  1. Local writers and merges of the table stop at once; appends not yet
//     acknowledged are refused.
//  2. The registry is replaced by a tombstone, and so is every shard's
//     head: any writer of the incarnation, in any process, fails its next
//     compare-and-swap on the head and acknowledges nothing more (a write
//     whose head swap landed before this step happened before the drop).
//  3. The descriptor is deleted if it still names this incarnation (a
//     conditional delete: a table created again meanwhile keeps its own):
//     the name is free, and a new table of that name is a new incarnation
//     sharing no key with this one.
//  4. The incarnation's objects are deleted. What cannot be deleted yet (a
//     lease another process holds, a late write of a stopped process) is
//     left under the dead incarnation for CollectDropped.
func (db *DB) DropTable(ctx context.Context, name string) error {
	lay, err := keyspace.ForTable(name)
	if err != nil {
		return err
	}
	// The incarnation dropped is the one the descriptor names now, not a
	// cached handle's, which may be of one dropped elsewhere already.
	t, etag, err := db.tableNow(ctx, lay)
	if err != nil {
		return err
	}
	t.retire(fmt.Errorf("%w: %s was dropped", errDropped, name))
	_ = t.closeWriter(ctx)
	db.forget(t)
	if err := tombstone(ctx, db, t.keys); err != nil {
		return fmt.Errorf("dropping %s: %w", name, err)
	}
	if err := db.point(ctx, "drop:fenced"); err != nil {
		return err
	}
	// Only the descriptor naming this incarnation is deleted: a create
	// may have replaced it since it was read (the incarnation's registry is
	// a tombstone now, which a create takes for a free name), and that
	// table stays.
	err = db.store.DeleteIfMatch(ctx, t.tableKeys.Descriptor(), etag)
	if err != nil && !errors.Is(err, objstore.ErrPrecondition) {
		return err
	}
	_, err = deleteIncarnation(ctx, db, t.keys, 0, true)
	return err
}

// deleteIncarnation deletes the objects of a dead incarnation older than
// grace (all when grace is 0), keeping the registry and head tombstones
// when keepTombstones is set. Leased objects are skipped.
func deleteIncarnation(ctx context.Context, db *DB, inc keyspace.Inc, grace time.Duration, keepTombstones bool) (int, error) {
	cutoff := db.rt.Now().Add(-grace)
	var keys []string
	err := db.store.List(ctx, inc.Root(), objstore.ListOptions{}, func(e objstore.Entry) error {
		if grace > 0 && e.LastModified.After(cutoff) {
			return nil
		}
		if keepTombstones {
			if k, ok := inc.ParseWAL(e.Key); ok && (k.Registry || k.IsHead) {
				return nil
			}
		}
		keys = append(keys, e.Key)
		return nil
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for start := 0; start < len(keys); start += 256 {
		chunk := keys[start:min(start+256, len(keys))]
		if err := db.store.DeleteMany(ctx, chunk); err != nil {
			// A held lease blob fails the batch on some backends: delete
			// one by one and leave the leased ones.
			for _, k := range chunk {
				if err := db.store.Delete(ctx, k); err != nil && !errors.Is(err, objstore.ErrLeased) {
					return n, err
				}
				n++
			}
			continue
		}
		n += len(chunk)
	}
	return n, nil
}

// CollectDropped deletes what drops left behind: objects of incarnations
// no descriptor names, older than grace (a late write of a stopped process
// cannot land that long after its drop, and a create gives up if it took
// half of it). The descriptor is read again before each incarnation is
// deleted, so one created meanwhile is never taken for a dead one. A grace
// of 0 is for tests with nothing else running.
func (db *DB) CollectDropped(ctx context.Context, grace time.Duration) (int, error) {
	var roots []string
	err := db.store.List(ctx, "", objstore.ListOptions{Delimited: true}, func(e objstore.Entry) error {
		if name := strings.TrimSuffix(e.Key, "/"); e.IsPrefix && keyspace.ValidateTable(name) == nil {
			roots = append(roots, name)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	total := 0
	for _, name := range roots {
		lay, _ := keyspace.ForTable(name)
		current := ""
		if d, _, err := db.readDescriptor(ctx, lay); err == nil {
			current = d.Incarnation
		} else if !errors.Is(err, objstore.ErrNotFound) {
			return total, err
		}
		var incs []string
		err := db.store.List(ctx, lay.Root(), objstore.ListOptions{Delimited: true}, func(e objstore.Entry) error {
			inc := strings.TrimSuffix(strings.TrimPrefix(e.Key, lay.Root()), "/")
			if e.IsPrefix && keyspace.ValidateIncarnation(inc) == nil && inc != current {
				incs = append(incs, inc)
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		for _, name := range incs {
			if d, _, err := db.readDescriptor(ctx, lay); err == nil && d.Incarnation == name {
				continue // created since the listing began
			} else if err != nil && !errors.Is(err, objstore.ErrNotFound) {
				return total, err
			}
			inc, _ := lay.Incarnation(name)
			n, err := deleteIncarnation(ctx, db, inc, grace, false)
			total += n
			if err != nil {
				return total, err
			}
		}
	}
	return total, nil
}

package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollstore/rollstore/cache"
	"github.com/rollstore/rollstore/engine/layout"
)

// Table is a handle on one table, shared by every request of a process.
type Table struct {
	db  *DB
	lay layout.Table
	// inc identifies this incarnation of the table (its descriptor's ETag):
	// a table dropped and created again reuses WAL keys, so everything cached
	// is keyed by incarnation too, and a refresh that finds another
	// descriptor retires the handle.
	inc string

	// snap is the resident snapshot: the newest base this process knows.
	// Base hits are served from it without I/O beyond the row itself.
	snap    atomic.Pointer[snapshot]
	refresh refresher
	// pinned keeps base-only snapshots of explicitly requested versions.
	pinned *cache.Cache[uint64, *snapshot]

	dropped atomic.Bool

	wmu    sync.Mutex
	writer *shardWriter

	// mergeMu serialises merges within the process; across processes the
	// create-if-absent commit (and the merger lease) decide.
	mergeMu sync.Mutex
}

// ck scopes a cache key to this incarnation of the table.
func (t *Table) ck(key string) string { return t.inc + "\x00" + key }

func newTable(db *DB, lay layout.Table, inc string) *Table {
	// Pinned snapshots share their file layouts with the DB's layout cache;
	// what they hold on their own is the manifest.
	return &Table{db: db, lay: lay, inc: inc, pinned: cache.New[uint64, *snapshot](4 << 20)}
}

// Name returns the table name.
func (t *Table) Name() string { return t.lay.Name() }

// install makes s the resident snapshot unless a newer one is already there.
func (t *Table) install(s *snapshot) {
	for {
		cur := t.snap.Load()
		if cur != nil && (cur.version() > s.version() || (cur.version() == s.version() && cur.flight >= s.flight)) {
			return
		}
		if t.snap.CompareAndSwap(cur, s) {
			t.db.resident.Add(t, s, s.manifestSize())
			return
		}
	}
}

const refreshTimeout = 30 * time.Second

// refreshed returns a snapshot built by a refresh that started after ticket.
func (t *Table) refreshed(ctx context.Context, ticket uint64) (*snapshot, error) {
	return t.refresh.after(ctx, ticket, refreshTimeout, func(ctx context.Context, id uint64) (*snapshot, error) {
		s, err := t.refreshSnapshot(ctx, id)
		if err != nil {
			return nil, err
		}
		t.install(s)
		return s, nil
	})
}

// Refresh brings the resident snapshot up to date (used at startup and by
// the status endpoint).
func (t *Table) Refresh(ctx context.Context) error {
	_, err := t.refreshed(ctx, t.refresh.ticket())
	return err
}

func (t *Table) close(ctx context.Context) error {
	t.wmu.Lock()
	w := t.writer
	t.writer = nil
	t.wmu.Unlock()
	if w != nil {
		return w.close(ctx)
	}
	return nil
}

// Status describes a table for operators.
type Status struct {
	Name         string            `json:"name"`
	Version      uint64            `json:"version"`
	Rows         int64             `json:"rows"`
	PayloadBytes int64             `json:"payload_bytes"`
	DataFiles    int               `json:"data_files"`
	Duplicates   int64             `json:"duplicates"`
	Watermarks   map[string]uint64 `json:"watermarks"`
	Pending      []PendingGen      `json:"pending"`
	PendingRows  int64             `json:"pending_rows"`
	Overloaded   string            `json:"overloaded,omitempty"`
}

// PendingGen is a generation not yet merged.
type PendingGen struct {
	Shard    string `json:"shard"`
	Gen      uint64 `json:"generation"`
	Sealed   bool   `json:"sealed"`
	Segments int    `json:"segments"`
	Rows     int64  `json:"rows"`
}

// Status refreshes and reports the table's latest view.
func (t *Table) Status(ctx context.Context) (Status, error) {
	s, err := t.refreshed(ctx, t.refresh.ticket())
	if err != nil {
		return Status{}, err
	}
	st := Status{Name: t.Name(), Version: s.version(), Rows: s.m.Rows, PayloadBytes: s.m.PayloadBytes,
		DataFiles: len(s.m.Files), Duplicates: s.m.Duplicates, Watermarks: s.m.Watermarks, Pending: []PendingGen{}}
	if s.capErr != nil {
		st.Overloaded = s.capErr.Error()
	}
	for _, g := range s.pending {
		p := PendingGen{Shard: g.shard, Gen: g.gen, Sealed: g.sealed, Segments: len(g.segs)}
		for _, seg := range g.segs {
			p.Rows += int64(len(seg.layout.Rows))
		}
		st.PendingRows += p.Rows
		st.Pending = append(st.Pending, p)
	}
	return st, nil
}

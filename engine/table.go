package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rollstore/rollstore/cache"
	"github.com/rollstore/rollstore/engine/keyspace"
	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
)

// Table is a handle on one incarnation of a table, shared by every request
// of a process.
type Table struct {
	db        *DB
	tableKeys keyspace.Table
	keys      keyspace.Inc
	descETag  string

	// snap is the resident snapshot: the newest view this process knows.
	// Reads are served from it without I/O beyond the row itself.
	snap    atomic.Pointer[snapshot]
	refresh refresher
	// flights numbers the refreshes of every refresher of the table.
	flights atomic.Uint64
	// partRefresh refreshes one partition's view at a time (point reads
	// and existence checks of partitioned tables), by partition.
	partMu      sync.Mutex
	partRefresh map[string]*refresher
	// regEtag is the registry ETag a partition refresh last found not
	// dropped; bgRefresh is set while a background whole refresh runs.
	regEtag   atomic.Pointer[string]
	bgRefresh atomic.Bool
	// pinned keeps base-only snapshots of explicitly requested versions.
	pinned *cache.Cache[uint64, *snapshot]

	// retired is set when the incarnation is gone (dropped here or
	// elsewhere): every later call fails with it.
	retired atomic.Pointer[error]

	// partitions is the descriptor's partition count; 0 for a table
	// created before partitions, where each writer process has its own
	// shard.
	partitions int
	membership membership

	wlock   *sched.Lock             // guards starting and replacing writers (which does I/O)
	wmu     sync.Mutex              // guards writers
	writers map[string]*shardWriter // by shard

	// feedw holds the heads feed readers read by (see feedWatch).
	feedOnce sync.Once
	feedw    *feedWatch

	// mergeLock serialises merges and sweeps within the process; across
	// processes the merger lease and the create-if-absent commit decide.
	mergeLock *sched.Lock
}

func newTable(db *DB, inc keyspace.Inc, descETag string, partitions int) *Table {
	lay, _ := keyspace.ForTable(inc.Table())
	t := &Table{db: db, tableKeys: lay, keys: inc, descETag: descETag, partitions: partitions,
		writers:   map[string]*shardWriter{},
		pinned:    cache.New(4<<20, cache.WithRuntime[uint64, *snapshot](db.rt)),
		wlock:     sched.NewLock(db.rt),
		mergeLock: sched.NewLock(db.rt)}
	t.refresh.rt, t.refresh.seq = db.rt, &t.flights
	t.partRefresh = map[string]*refresher{}
	return t
}

// Name returns the table name.
func (t *Table) Name() string { return t.keys.Table() }

// Incarnation names this incarnation of the table.
func (t *Table) Incarnation() string { return t.keys.Name() }

func (t *Table) retiredErr() error {
	if p := t.retired.Load(); p != nil {
		return *p
	}
	return nil
}

// retire marks the handle dead and stops its writer; queued appends fail
// with err.
func (t *Table) retire(err error) {
	if t.retired.CompareAndSwap(nil, &err) {
		for _, w := range t.allWriters() {
			w.fail(nil, err)
		}
	}
}

// allWriters lists the table's writers in this process, stopped ones
// included.
func (t *Table) allWriters() []*shardWriter {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	out := make([]*shardWriter, 0, len(t.writers))
	for _, s := range sortedKeys(t.writers) {
		out = append(out, t.writers[s])
	}
	return out
}

// checkLive returns the error of a retired handle (nil while the handle's
// incarnation is live).
func (t *Table) checkLive() error { return t.retiredErr() }

// successor returns the handle of the table's current incarnation when err
// says t's incarnation was dropped and the table exists again (created
// anew, here or by another process): a request that met the old
// incarnation is then served by the new one instead of answering "no such
// table" for a table that exists.
//
// It returns the new handle, or nil and the error to report: err, or the
// failure to open the table again (a store error is not "no such table").
func (t *Table) successor(ctx context.Context, err error) (*Table, error) {
	if !errors.Is(err, errDropped) {
		return nil, err
	}
	nt, oerr := t.db.Table(ctx, t.Name())
	switch {
	case oerr != nil && !errors.Is(oerr, ErrTableNotFound):
		return nil, oerr
	case oerr != nil || nt.keys.Name() == t.keys.Name():
		// Not created again (yet): the same, dropped, incarnation.
		return nil, err
	}
	return nt, nil
}

// onSuccessor finishes a request that may have met t's dropped
// incarnation: given what the request got on t (v, err), it returns what
// retry answers on the table's current incarnation when err says t was
// dropped and the table exists again (see successor); otherwise v and err,
// or the failure to open the table again.
func onSuccessor[T any](ctx context.Context, t *Table, v T, err error, retry func(nt *Table) (T, error)) (T, error) {
	nt, err := t.successor(ctx, err)
	if nt != nil {
		return retry(nt)
	}
	return v, err
}

// noteGone retires the handle when err says the incarnation is gone.
func (t *Table) noteGone(err error) error {
	if errors.Is(err, errDropped) {
		t.retire(fmt.Errorf("%w: %s was dropped", errDropped, t.Name()))
		t.db.forget(t)
		return t.retiredErr()
	}
	return err
}

// checkDescriptor fails with ErrTableNotFound once the descriptor no
// longer names this incarnation (writers check it with each lease renewal,
// so a writer of a dropped table stops soon even between appends).
func (t *Table) checkDescriptor(ctx context.Context) error {
	err := t.checkIncarnation(ctx)
	if err != nil && !errors.Is(err, errDropped) {
		return nil // a transient failure proves nothing
	}
	return err
}

// missing is the answer for a file still missing after the bounded
// retries: err (ErrMissingFile), unless the incarnation was dropped
// meanwhile. A drop deletes every file of the incarnation after its
// descriptor (doc.go, step 8), so then the drop is the answer, never a
// missing file.
func (t *Table) missing(ctx context.Context, err error) error {
	if ierr := t.checkIncarnation(ctx); errors.Is(ierr, errDropped) {
		return t.noteGone(ierr)
	}
	t.db.stats.ReadMissingFile.Add(1)
	return err
}

// checkIncarnation is checkDescriptor for a caller that must not go on
// without an answer: a failed check is returned as it is.
func (t *Table) checkIncarnation(ctx context.Context) error {
	a, err := t.db.store.Head(ctx, t.tableKeys.Descriptor())
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return fmt.Errorf("%w: %s was dropped", errDropped, t.Name())
	case err != nil:
		return fmt.Errorf("checking the descriptor of %s: %w", t.Name(), err)
	case a.ETag != t.descETag:
		// Replaced: dropped and created again (descriptors are written
		// once per incarnation).
		return fmt.Errorf("%w: %s was dropped and created again", errDropped, t.Name())
	}
	return nil
}

// fresh returns the resident snapshot if it is recent enough to serve a
// read without a refresh (nil otherwise).
func (t *Table) fresh() *snapshot {
	s := t.snap.Load()
	if s == nil || t.db.rt.Now().Sub(s.checkedAt) > t.db.cfg.ResidentMaxAge {
		return nil
	}
	return s
}

// closeWriters leaves the members (so the others take the partitions at
// once), then seals and stops every writer of the table in this process.
func (t *Table) closeWriters(ctx context.Context) error {
	t.leave(ctx)
	t.wmu.Lock()
	ws := t.writers
	t.writers = map[string]*shardWriter{}
	t.wmu.Unlock()
	var errs []error
	for _, s := range sortedKeys(ws) {
		errs = append(errs, ws[s].close(ctx))
	}
	return errors.Join(errs...)
}

// Status describes a table for operators.
type Status struct {
	Name        string `json:"name"`
	Incarnation string `json:"incarnation"`
	Version     uint64 `json:"version"`
	// Partitions is the ids' hash partition count (0: a table created
	// before partitions, whose shards are its writers); Owners names each
	// partition's owner as this process sees the members.
	Partitions int     `json:"partitions"`
	Owners     []Owner `json:"owners,omitempty"`
	// Rows counts every acknowledged row: BaseRows + PendingRows. (An id
	// two shards' writers wrote at once is counted twice until a merge
	// keeps one of them and counts it in Duplicates.)
	Rows int64 `json:"rows"`
	// BaseRows are the rows merged into the base version.
	BaseRows int64 `json:"base_rows"`
	// PayloadBytes, DataFiles and Duplicates describe the base version.
	PayloadBytes int64             `json:"payload_bytes"`
	DataFiles    int               `json:"data_files"`
	Duplicates   int64             `json:"duplicates"`
	Watermarks   map[string]uint64 `json:"watermarks"`
	Pending      []PendingGen      `json:"pending"`
	// PendingRows are the rows of the generations not yet merged.
	PendingRows int64 `json:"pending_rows"`
	// Backpressure is set while appends are refused for the merge backlog.
	Backpressure string `json:"backpressure,omitempty"`
}

// PendingGen is a generation not yet merged.
type PendingGen struct {
	Shard    string `json:"shard"`
	Gen      uint64 `json:"generation"`
	Sealed   bool   `json:"sealed"`
	Segments int    `json:"segments"`
	Rows     int64  `json:"rows"`
}

// Refresh brings the resident snapshot up to date (used at startup and by
// readiness).
func (t *Table) Refresh(ctx context.Context) error {
	_, err := t.refreshed(ctx, t.refresh.ticket(), false)
	return err
}

// Status refreshes and reports the table's latest view.
func (t *Table) Status(ctx context.Context) (Status, error) {
	st, err := t.status(ctx)
	return onSuccessor(ctx, t, st, err, func(nt *Table) (Status, error) { return nt.status(ctx) })
}

func (t *Table) status(ctx context.Context) (Status, error) {
	s, err := t.refreshed(ctx, t.refresh.ticket(), true)
	if err != nil {
		return Status{}, err
	}
	m := s.base.m
	st := Status{Name: t.Name(), Incarnation: t.Incarnation(), Version: m.Version, BaseRows: m.Rows, PayloadBytes: m.PayloadBytes,
		DataFiles: len(m.Files), Duplicates: m.Duplicates, Watermarks: m.Watermarks, Pending: []PendingGen{}}
	if st.Watermarks == nil {
		st.Watermarks = map[string]uint64{}
	}
	st.Partitions = t.partitions
	if t.partitions > 0 {
		if st.Owners, err = t.Owners(ctx); err != nil {
			return Status{}, err
		}
	}
	shards := []string{t.db.cfg.Shard}
	if t.partitions > 0 {
		shards = s.names
	}
	for _, shard := range shards {
		if err := t.backpressure(s, shard); err != nil {
			st.Backpressure = err.Error()
			break
		}
	}
	for _, name := range sortedKeys(s.shards) {
		for _, g := range s.shards[name].gens {
			p := PendingGen{Shard: name, Gen: g.gen, Sealed: g.sealed, Segments: len(g.segs)}
			for _, seg := range g.segs {
				p.Rows += int64(len(seg.layout.Rows))
			}
			st.PendingRows += p.Rows
			st.Pending = append(st.Pending, p)
		}
	}
	st.Rows = st.BaseRows + st.PendingRows
	return st, nil
}

// backpressure reports ErrBackpressure when appends to shard should wait
// for the merge to catch up.
func (t *Table) backpressure(s *snapshot, shard string) error {
	cfg := t.db.cfg
	if sv := s.shards[shard]; sv != nil && len(sv.gens) > cfg.WriteMaxPendingGens {
		return fmt.Errorf("%w: shard %s has %d generations waiting for a merge (bound %d)", ErrBackpressure, shard, len(sv.gens), cfg.WriteMaxPendingGens)
	}
	if s.pendingGens > cfg.WriteMaxPendingTotal {
		return fmt.Errorf("%w: %d generations waiting for a merge (bound %d)", ErrBackpressure, s.pendingGens, cfg.WriteMaxPendingTotal)
	}
	return nil
}

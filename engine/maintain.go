package engine

import (
	"context"
	"errors"
	"time"
)

// MaintainOptions configure a Maintainer.
type MaintainOptions struct {
	// Interval is the period of the passes when Wait is nil: a pass begins
	// at every tick of a time.Ticker, so a pass that overruns the interval
	// delays the next one to the next tick. The first pass begins one
	// interval after Run.
	Interval time.Duration
	// Wait, when set, replaces the ticker: Run calls it before every pass
	// (prev is nil before the first, else the pass just done) and begins
	// the next pass when it returns true; false ends Run.
	Wait func(ctx context.Context, prev *MaintenancePass) bool
	// Stop, when closed, ends Run before its next pass: a pass in progress
	// is finished, not cut short as a cancelled context would cut it.
	Stop <-chan struct{}

	// Tables names the tables to maintain; nil means every table
	// DB.ListTables lists, listed again at each pass.
	Tables []string
	// Merge tunes every table's merge.
	Merge MergeOptions
	// SweepEvery makes every SweepEvery-th pass (counted from 1) also
	// sweep each table's orphans; 0 never sweeps.
	SweepEvery int
	// CollectDropped makes the sweeping passes also collect what drops
	// left behind (DB.CollectDropped), once the tables are done.
	CollectDropped bool
	// OrphanGrace is the grace of sweeps and collections; 0 means the DB's
	// Config.OrphanGrace.
	OrphanGrace time.Duration
	// Status reads each table's Status after its merge and sweep, for
	// gauges of pending work. A table whose merge found another merger
	// busy is skipped for the rest of its pass (no sweep), and its status
	// too unless StatusWhenBusy is set.
	Status         bool
	StatusWhenBusy bool

	// OnStart, when set, is called as a pass begins, before anything of it
	// reaches the store; n counts passes from 1.
	OnStart func(n int, start time.Time)
	// OnPass, when set, is called after every pass with what it did,
	// including a pass cut short by the context (what it did still
	// happened).
	OnPass func(MaintenancePass)
}

// MaintenancePass describes one pass of a Maintainer.
type MaintenancePass struct {
	N        int // passes counted from 1
	Start    time.Time
	Duration time.Duration
	// Swept: this pass swept (SweepEvery).
	Swept bool
	// Listed holds the tables listed when Options.Tables is nil; ListErr
	// is the listing's error, which ends the pass before any table.
	Listed  []string
	ListErr error
	// Tables holds one entry per table the pass reached, in order.
	Tables []TableMaintenance
	// Collected and CollectErr are DB.CollectDropped's result, when the
	// pass collected (Collecting).
	Collecting bool
	Collected  int
	CollectErr error
}

// TableMaintenance is what a pass did to one table. When OpenErr is set
// (ErrTableNotFound for a table dropped since the listing), nothing else
// was done.
type TableMaintenance struct {
	Table   string
	OpenErr error

	Merge         MergeResult
	MergeErr      error
	MergeDuration time.Duration
	// Busy: the merge found another merger holding the table's lease
	// (MergeErr matches ErrMergerBusy).
	Busy bool

	Swept    bool
	Sweep    SweepResult
	SweepErr error

	HasStatus bool
	Status    Status
	StatusErr error
}

// A Maintainer runs the background work of a table's merger on a cadence:
// merges, orphan sweeps and the collection of what drops left behind.
// It flushes nothing: writers seal generations by age, and merging only
// sealed generations keeps a merger from cutting writers' generations
// short.
//
// Several processes may run one against one store: the engine's
// create-if-absent commits make a lost race a retry, not a corruption, and
// the merger lease makes the loser's pass report Busy.
type Maintainer struct {
	db   *DB
	opts MaintainOptions
	n    int
}

// NewMaintainer returns a Maintainer of db's tables. It starts nothing:
// Run does, or the caller drives it with Pass.
func NewMaintainer(db *DB, opts MaintainOptions) *Maintainer {
	return &Maintainer{db: db, opts: opts}
}

// Run runs passes until ctx is done, Options.Stop is closed or
// Options.Wait returns false. Run and Pass are not to be called
// concurrently on one Maintainer (its pass count is not locked); several
// Maintainers may share a DB.
func (m *Maintainer) Run(ctx context.Context) {
	wait := m.opts.Wait
	if wait == nil {
		t := time.NewTicker(m.opts.Interval)
		defer t.Stop()
		wait = func(ctx context.Context, _ *MaintenancePass) bool {
			select {
			case <-ctx.Done():
				return false
			case <-m.opts.Stop:
				return false
			case <-t.C:
				return true
			}
		}
	}
	var prev *MaintenancePass
	for {
		if ctx.Err() != nil || m.stopped() || !wait(ctx, prev) || ctx.Err() != nil || m.stopped() {
			return
		}
		p := m.Pass(ctx)
		prev = &p
	}
}

func (m *Maintainer) stopped() bool {
	select {
	case <-m.opts.Stop:
		return true
	default:
		return false
	}
}

// Pass runs one pass now and returns what it did (which OnPass is also
// given). It is what Run calls at each tick.
func (m *Maintainer) Pass(ctx context.Context) MaintenancePass {
	m.n++
	p := MaintenancePass{N: m.n, Start: time.Now()}
	p.Swept = m.opts.SweepEvery > 0 && p.N%m.opts.SweepEvery == 0
	if m.opts.OnStart != nil {
		m.opts.OnStart(p.N, p.Start)
	}
	m.pass(ctx, &p)
	p.Duration = time.Since(p.Start)
	if m.opts.OnPass != nil {
		m.opts.OnPass(p)
	}
	return p
}

func (m *Maintainer) grace() time.Duration {
	if m.opts.OrphanGrace != 0 {
		return m.opts.OrphanGrace
	}
	return m.db.Config().OrphanGrace
}

func (m *Maintainer) pass(ctx context.Context, p *MaintenancePass) {
	names := m.opts.Tables
	if names == nil {
		names, p.ListErr = m.db.ListTables(ctx)
		if p.ListErr != nil {
			return
		}
		p.Listed = names
	}
	for _, name := range names {
		if ctx.Err() != nil {
			return
		}
		p.Tables = append(p.Tables, m.table(ctx, name, p.Swept))
	}
	if p.Swept && m.opts.CollectDropped && ctx.Err() == nil {
		p.Collecting = true
		p.Collected, p.CollectErr = m.db.CollectDropped(ctx, m.grace())
	}
}

func (m *Maintainer) table(ctx context.Context, name string, sweep bool) TableMaintenance {
	r := TableMaintenance{Table: name}
	tb, err := m.db.Table(ctx, name)
	if err != nil {
		r.OpenErr = err
		return r
	}
	start := time.Now()
	r.Merge, r.MergeErr = tb.Merge(ctx, m.opts.Merge)
	r.MergeDuration = time.Since(start)
	r.Busy = errors.Is(r.MergeErr, ErrMergerBusy)
	if ctx.Err() != nil {
		return r
	}
	if sweep && !r.Busy {
		r.Swept = true
		r.Sweep, r.SweepErr = tb.Sweep(ctx, m.grace())
		if ctx.Err() != nil {
			return r
		}
	}
	if m.opts.Status && (!r.Busy || m.opts.StatusWhenBusy) {
		r.HasStatus = true
		r.Status, r.StatusErr = tb.Status(ctx)
	}
	return r
}

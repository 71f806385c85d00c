// The shard writer's lifetime: starting one (which takes the shard over),
// its loop (group-commit windows, generation age, leaving the active set
// when idle), sealing and rotating generations, Flush, and stopping.

package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
)

// shardWriter owns one shard of one table in this process: it group-commits
// appends into WAL segments of its open generation and seals generations.
// Appends never wait for reads, and reads never wait for it.
type shardWriter struct {
	t     *Table
	shard string
	id    string // this writer's name in the heads it writes
	owner *owner // the shard lease; nil without leases

	mu       sync.Mutex
	queue    []*appendReq
	inflight map[string]*appendReq // ids queued or being committed
	// recent holds rows this writer committed to its open generation, to
	// refuse a conflicting second write of the same id on this shard even
	// when the two race with the existence check.
	recent  map[string]*Record
	gen     uint64 // the open generation, read by payload uploads
	err     error  // sticky: fenced, failed or closed
	wake    sched.Event
	flushes []*flushReq
	quit    bool
	last    time.Time // last append queued
	done    sched.Event

	// Owned by the loop goroutine.
	head     head
	segs     []sealedSegment
	genBytes int64
	genStart time.Time
	active   bool // registered as active in the registry
}

type flushReq struct {
	done sched.Event
	err  error
}

// writerFor returns this process's live writer of shard, starting one
// (which takes the shard over) if there is none or the last one stopped.
// In a partitioned table it starts one only for a partition this process
// owns (NotOwnerError otherwise); partitions are not leased (ownership is
// the members' agreement, fencing the head's chain), so a writer restarted
// under its name takes its partitions back without waiting.
func (t *Table) writerFor(ctx context.Context, shard string) (*shardWriter, error) {
	if t.db.cfg.Shard == "" {
		return nil, ErrNoWriter
	}
	if err := t.checkLive(); err != nil {
		return nil, err
	}
	if w := t.liveWriter(shard); w != nil {
		return w, nil
	}
	if t.partitions > 0 {
		// Taking a partition over is rare and fences whoever holds it: it
		// is decided on the members as they are now, not as cached (a
		// process replaced under its name learns it here). A partition
		// the cached view gives to another is refused without a read.
		for _, fresh := range []bool{false, true} {
			o, err := t.owner(ctx, shard, fresh)
			if err != nil {
				return nil, t.noteGone(err)
			}
			if !o.Self {
				return nil, &NotOwnerError{Owner: o}
			}
		}
	}
	if err := t.wlock.Lock(ctx); err != nil {
		return nil, err
	}
	defer t.wlock.Unlock()
	if w := t.liveWriter(shard); w != nil {
		return w, nil
	}
	t.wmu.Lock()
	old := t.writers[shard]
	delete(t.writers, shard)
	t.wmu.Unlock()
	if old != nil {
		// Let the stopped writer finish (release its lease) first.
		old.stop()
		if _, err := t.db.rt.Wait(ctx, old.done); err != nil {
			return nil, err
		}
	}
	rt := t.db.rt
	w := &shardWriter{t: t, shard: shard, id: t.db.randomName()[:12],
		inflight: map[string]*appendReq{}, recent: map[string]*Record{},
		wake: rt.NewEvent(), done: rt.NewEvent(), last: rt.Now()}
	if t.partitions == 0 {
		o, err := t.db.acquire(ctx, t.keys.ShardLease(w.shard), t.checkDescriptor)
		if errors.Is(err, objstore.ErrLeased) {
			// The lease is held, but perhaps by no live writer: a drop
			// under way tombstones the registry first, and a writer it
			// fenced (of a handle of this incarnation, here or elsewhere)
			// may hold the lease a moment longer. Then the table is gone,
			// which is the answer; an invitation to retry would reach its
			// next incarnation.
			if _, rerr := t.liveRegistry(ctx); errors.Is(rerr, ErrTableNotFound) {
				return nil, rerr
			}
			return nil, fmt.Errorf("%w: %s/%s", ErrShardOwned, t.Name(), w.shard)
		}
		if err != nil {
			return nil, fmt.Errorf("acquiring shard %s: %w", w.shard, err)
		}
		w.owner = o
	}
	if err := t.db.point(ctx, hookBeforeTakeOver); err != nil {
		return nil, err
	}
	if err := w.takeOver(ctx); err != nil {
		w.owner.release(ctx)
		return nil, t.noteGone(err)
	}
	if err := t.checkLive(); err != nil { // dropped while starting
		w.owner.release(ctx)
		return nil, err
	}
	t.wmu.Lock()
	t.writers[shard] = w
	t.wmu.Unlock()
	rt.Go(w.loop)
	return w, nil
}

func (t *Table) liveWriter(shard string) *shardWriter {
	t.wmu.Lock()
	w := t.writers[shard]
	t.wmu.Unlock()
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || w.quit {
		return nil
	}
	return w
}

// runningWriters lists the table's live writers in this process.
func (t *Table) runningWriters() []*shardWriter {
	var out []*shardWriter
	for _, w := range t.allWriters() {
		if lw := t.liveWriter(w.shard); lw == w {
			out = append(out, w)
		}
	}
	return out
}

func (w *shardWriter) open(h head) {
	w.head = h
	w.segs, w.genBytes = nil, 0
	w.mu.Lock()
	w.gen = h.Gen
	w.mu.Unlock()
}

func (w *shardWriter) loop() {
	defer w.done.Fire()
	ctx := context.Background()
	rt := w.t.db.rt
	cfg := w.t.db.cfg
	for {
		w.mu.Lock()
		if w.wake.Fired() {
			w.wake = rt.NewEvent()
		}
		wake := w.wake
		work, flushing, quit, stopped, last := len(w.queue) > 0, len(w.flushes) > 0, w.quit, w.err != nil, w.last
		w.mu.Unlock()
		switch {
		case stopped:
			w.finish(ctx, false)
			return
		case quit:
			w.finish(ctx, true)
			return
		case flushing:
			w.mu.Lock()
			flushes := w.flushes
			w.flushes = nil
			w.mu.Unlock()
			for w.commitNext(ctx) {
			}
			var err error
			if len(w.segs) > 0 {
				err = w.rotate(ctx, true)
				w.fail(nil, err)
			}
			for _, f := range flushes {
				f.err = err
				f.done.Fire()
			}
			continue
		case work:
			// Let concurrent appends gather into one segment.
			if _, err := rt.Wait(ctx, rt.After(cfg.GroupCommitWindow)); err != nil {
				return
			}
			for w.commitNext(ctx) {
			}
			continue
		}
		// Idle: wait for work, the generation's age limit, or the time to
		// leave the registry's active set.
		now := rt.Now()
		next, timed := time.Duration(0), false
		if len(w.segs) > 0 {
			next, timed = w.genStart.Add(cfg.GenMaxAge).Sub(now), true
		}
		if w.active {
			if d := last.Add(cfg.IdleAfter).Sub(now); !timed || d < next {
				next, timed = d, true
			}
		}
		if !timed {
			if _, err := rt.Wait(ctx, wake); err != nil {
				return // the runtime stopped (a halted simulation)
			}
			continue
		}
		if next > 0 {
			timer := rt.After(next)
			i, err := rt.Wait(ctx, wake, timer)
			sched.Stop(timer)
			if err != nil {
				return
			}
			if i == 0 {
				continue
			}
		}
		now = rt.Now()
		if len(w.segs) > 0 && !now.Before(w.genStart.Add(cfg.GenMaxAge)) {
			w.fail(nil, w.rotate(ctx, true))
			continue
		}
		w.mu.Lock()
		idle := len(w.queue) == 0 && !now.Before(w.last.Add(cfg.IdleAfter))
		w.mu.Unlock()
		if w.active && idle {
			if err := setActive(ctx, w.t.db, w.t.keys, w.shard, w.id, 0, false, false); err != nil {
				w.fail(nil, err)
				continue
			}
			w.active = false
		}
	}
}

// finish ends the loop: on a clean close it commits what is queued and
// seals the open generation; then it fails what is left, leaves the active
// set and gives the lease up.
func (w *shardWriter) finish(ctx context.Context, clean bool) {
	if clean {
		for w.commitNext(ctx) {
		}
		if w.errOrNil() == nil && len(w.segs) > 0 {
			w.fail(nil, w.rotate(ctx, false))
		}
		if w.active && w.errOrNil() == nil {
			if err := setActive(ctx, w.t.db, w.t.keys, w.shard, w.id, 0, false, false); err == nil {
				w.active = false
			}
		}
	}
	w.fail(nil, fmt.Errorf("%w: writer of %s/%s", ErrClosed, w.t.Name(), w.shard))
	w.mu.Lock()
	flushes := w.flushes
	w.flushes = nil
	w.mu.Unlock()
	for _, f := range flushes {
		f.err = ErrClosed
		f.done.Fire()
	}
	w.owner.release(ctx)
}

func (w *shardWriter) errOrNil() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// fail stops the writer with a sticky error (nil err: no-op) and fails every
// queued append except those in skip (which the caller completes).
func (w *shardWriter) fail(skip []*appendReq, err error) {
	if err == nil {
		return
	}
	inSkip := map[*appendReq]bool{}
	for _, r := range skip {
		inSkip[r] = true
	}
	w.mu.Lock()
	if w.err == nil {
		w.err = err
		switch {
		case errors.Is(err, ErrClosed):
		case errors.Is(err, ErrTableNotFound), errors.Is(err, ErrFenced):
			// A drop, or another writer taking the shard over (a rolling
			// restart): the protocol working, nothing for an operator.
			w.t.db.cfg.Logger.Info("shard writer stopped", "table", w.t.Name(), "shard", w.shard, "reason", err)
		default:
			w.t.db.cfg.Logger.Error("shard writer stopped", "table", w.t.Name(), "shard", w.shard, "err", err)
		}
	}
	var done []*appendReq
	for _, req := range w.queue {
		if !inSkip[req] {
			req.err = w.err
			for _, rec := range req.recs {
				delete(w.inflight, rec.ID)
			}
			done = append(done, req)
		}
	}
	w.queue = nil
	wake := w.wake
	w.mu.Unlock()
	for _, req := range done {
		req.done.Fire()
	}
	wake.Fire() // the loop sees the error and finishes
}

// rotate seals the open generation: the head first (from then on nothing
// more can join it), then the seal record; then, with next, it claims the
// following generation.
func (w *shardWriter) rotate(ctx context.Context, next bool) error {
	t := w.t
	if err := t.db.point(ctx, hookBeforeRotate); err != nil {
		return err
	}
	h := w.head
	if !h.Sealed {
		hs, err := casHead(ctx, t.db, t.keys, w.shard, h, h.sealedBy(w.id))
		if errors.Is(err, errHeadMoved) {
			err = fmt.Errorf("%w: %w", ErrFenced, err)
		}
		if err != nil {
			return t.noteGone(err)
		}
		h = hs
		w.head = h
	}
	if _, err := t.writeSeal(ctx, w.shard, h, w.segs); err != nil {
		return err
	}
	w.mu.Lock()
	// Rows of sealed generations are visible to every fresh read through
	// the seal record, so the in-memory guard can start over.
	clear(w.recent)
	w.mu.Unlock()
	w.segs, w.genBytes = nil, 0
	if !next {
		return nil
	}
	nh, err := casHead(ctx, t.db, t.keys, w.shard, h, h.claim(w.id))
	if errors.Is(err, errHeadMoved) {
		err = fmt.Errorf("%w: %w", ErrFenced, err)
	}
	if err != nil {
		return t.noteGone(err)
	}
	w.open(nh)
	return nil
}

// Flush seals the open generations of this process's writers now, making
// them mergeable (tests, and the merge endpoint's "merge everything" mode).
func (t *Table) Flush(ctx context.Context) error {
	var errs []error
	for _, w := range t.runningWriters() {
		errs = append(errs, w.flush(ctx))
	}
	return errors.Join(errs...)
}

func (w *shardWriter) flush(ctx context.Context) error {
	rt := w.t.db.rt
	f := &flushReq{done: rt.NewEvent()}
	w.mu.Lock()
	if w.err != nil || w.quit {
		w.mu.Unlock()
		return nil
	}
	w.flushes = append(w.flushes, f)
	wake := w.wake
	w.mu.Unlock()
	wake.Fire()
	if _, err := rt.Wait(ctx, f.done); err != nil {
		return err
	}
	return f.err
}

// stop asks the loop to finish without waiting for it.
func (w *shardWriter) stop() {
	w.mu.Lock()
	w.quit = true
	wake := w.wake
	w.mu.Unlock()
	wake.Fire()
}

func (w *shardWriter) close(ctx context.Context) error {
	w.stop()
	_, err := w.t.db.rt.Wait(ctx, w.done)
	return err
}

package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rollstore/rollstore/engine/rowfile"
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

// appendReq is one unit of commit: its rows go into one segment together.
type appendReq struct {
	recs []*Record
	// uploaded is when its payload uploads began: rows whose payload
	// objects are old enough for the orphan sweep to take are not
	// committed (see commitNext and writeSegment).
	uploaded time.Time
	done     sched.Event
	err      error
	// Set by the commit's check (checkBatch): what each row's append
	// answers, the rows to write (those not visible yet), and whether the
	// request was refused before anything of it was written.
	results []AppendResult
	write   []*Record
	refused bool
}

type flushReq struct {
	done sched.Event
	err  error
}

func (r *appendReq) bytes() int64 {
	var n int64
	for _, rec := range r.recs {
		n += int64(len(rec.Payload)) + 512
	}
	return n
}

// shardWriter returns this process's live writer of the table, starting
// one (which takes the shard) if there is none or the last one stopped.
func (t *Table) shardWriter(ctx context.Context) (*shardWriter, error) {
	if t.db.cfg.Shard == "" {
		return nil, ErrNoWriter
	}
	if err := t.live(); err != nil {
		return nil, err
	}
	if w := t.liveWriter(); w != nil {
		return w, nil
	}
	if err := t.wlock.Lock(ctx); err != nil {
		return nil, err
	}
	defer t.wlock.Unlock()
	if w := t.liveWriter(); w != nil {
		return w, nil
	}
	t.wmu.Lock()
	old := t.writer
	t.writer = nil
	t.wmu.Unlock()
	if old != nil {
		// Let the stopped writer finish (release its lease) first.
		old.stop()
		if _, err := t.db.rt.Wait(ctx, old.done); err != nil {
			return nil, err
		}
	}
	rt := t.db.rt
	w := &shardWriter{t: t, shard: t.db.cfg.Shard, id: t.db.randomName()[:12],
		inflight: map[string]*appendReq{}, recent: map[string]*Record{},
		wake: rt.NewEvent(), done: rt.NewEvent(), last: rt.Now()}
	o, err := t.db.acquire(ctx, t.keys.ShardLease(w.shard), t.checkDescriptor)
	if errors.Is(err, objstore.ErrLeased) {
		return nil, fmt.Errorf("%w: %s/%s", ErrShardOwned, t.Name(), w.shard)
	}
	if err != nil {
		return nil, fmt.Errorf("acquiring shard %s: %w", w.shard, err)
	}
	w.owner = o
	if err := w.recover(ctx); err != nil {
		o.release(ctx)
		return nil, t.noteGone(err)
	}
	if err := t.live(); err != nil { // dropped while starting
		o.release(ctx)
		return nil, err
	}
	t.wmu.Lock()
	t.writer = w
	t.wmu.Unlock()
	rt.Go(w.loop)
	return w, nil
}

func (t *Table) liveWriter() *shardWriter {
	t.wmu.Lock()
	w := t.writer
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

// recover takes the shard's head: it registers the shard as active, seals
// the generation the previous owner left (so nothing that writer still
// sends can become part of it) and claims the next generation, all by
// compare-and-swap on the head. A generation therefore has exactly one
// writer.
func (w *shardWriter) recover(ctx context.Context) error {
	t := w.t
	if err := setActive(ctx, t.db, t.keys, w.shard, w.id, 0, true, false); err != nil {
		return err
	}
	w.active = true
	for attempt := 0; attempt < 20; attempt++ {
		h, err := readHead(ctx, t.db, t.keys, w.shard)
		if errors.Is(err, errNoHead) {
			nh, err := casHead(ctx, t.db, t.keys, w.shard, head{}, head{Gen: 1, Owner: w.id})
			if errors.Is(err, errHeadMoved) {
				continue
			}
			if err != nil {
				return err
			}
			w.open(nh)
			return setActive(ctx, t.db, t.keys, w.shard, w.id, nh.Gen, true, true)
		}
		if err != nil {
			return err
		}
		if !h.Sealed {
			if err := t.db.point(ctx, "write:before-fence"); err != nil {
				return err
			}
			hs, err := casHead(ctx, t.db, t.keys, w.shard, h, head{Gen: h.Gen, Segs: h.Segs, Sealed: true, Owner: h.Owner})
			if errors.Is(err, errHeadMoved) {
				continue
			}
			if err != nil {
				return err
			}
			h = hs
		}
		if err := t.ensureSeal(ctx, w.shard, h); err != nil {
			return err
		}
		nh, err := casHead(ctx, t.db, t.keys, w.shard, h, head{Gen: h.Gen + 1, Owner: w.id})
		if errors.Is(err, errHeadMoved) {
			continue
		}
		if err != nil {
			return err
		}
		w.open(nh)
		// The writers before this one can commit nothing more: they leave
		// the registry.
		return setActive(ctx, t.db, t.keys, w.shard, w.id, nh.Gen, true, true)
	}
	return fmt.Errorf("%w: %s/%s: the head kept moving", ErrShardOwned, t.Name(), w.shard)
}

// ensureSeal makes sure the seal record of a head sealed at h.Gen exists,
// unless the generation was merged already.
//
// A segment missing while the seal record is built means the generation was
// merged and reclaimed meanwhile (the newest base says so), or the table was
// dropped (then that is the answer); otherwise the file is missing, which
// is reported as ErrMissingFile, never as a bare not-found.
func (t *Table) ensureSeal(ctx context.Context, shard string, h head) error {
	_, err := t.sealOf(ctx, shard, h.Gen, h.Segs)
	if !errors.Is(err, objstore.ErrNotFound) {
		return err
	}
	causes := []error{err}
	for attempt := 0; attempt <= maxRetries; attempt++ {
		latest, _, lerr := t.newestVersion(ctx, t.snap.Load().version())
		if lerr != nil {
			return t.noteGone(lerr)
		}
		if latest == 0 {
			break
		}
		m, merr := t.loadManifest(ctx, latest)
		if errors.Is(merr, objstore.ErrNotFound) {
			causes = append(causes, merr) // collected since: a newer one exists
			continue
		}
		if merr != nil {
			return merr
		}
		if m.watermark(shard) >= h.Gen {
			return nil // merged and reclaimed
		}
		break
	}
	return t.missing(ctx, fmt.Errorf("%w: sealing generation %d of %s/%s: %w", ErrMissingFile, h.Gen, t.Name(), shard, errors.Join(causes...)))
}

func (w *shardWriter) open(h head) {
	w.head = h
	w.segs, w.genBytes = nil, 0
	w.mu.Lock()
	w.gen = h.Gen
	w.mu.Unlock()
}

func (w *shardWriter) currentGen() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen
}

// submit queues rows (one append, or one all-or-nothing batch, which is
// committed in a single segment) and waits until they are durable. Another
// append of the same id in flight here is waited for, then compared: an
// identical retry succeeds without a second row, different content is a
// conflict. Rows already visible anywhere are found by the commit's check
// (see checkBatch). recs must be free of duplicate ids.
//
// queued reports whether the rows may have been written. After that a
// failure may leave their outcome unknown, so the caller must leave their
// payload objects to the orphan sweep, which checks references.
func (w *shardWriter) submit(ctx context.Context, recs []*Record, uploaded time.Time) (results []AppendResult, queued bool, err error) {
	results = make([]AppendResult, len(recs))
	rt := w.t.db.rt
	for {
		w.mu.Lock()
		if w.err != nil {
			err := w.err
			w.mu.Unlock()
			return nil, false, err
		}
		var wait *appendReq
		var fresh []*Record
		var freshIdx []int
		for i, rec := range recs {
			if results[i].Record != nil {
				continue // answered on an earlier round
			}
			if prev := w.recent[rec.ID]; prev != nil {
				r, err := w.compare(prev, rec)
				if err != nil {
					w.mu.Unlock()
					return nil, false, &BatchError{Index: i, Err: err}
				}
				results[i] = r
				continue
			}
			if prev := w.inflight[rec.ID]; prev != nil {
				wait = prev
				break
			}
			fresh = append(fresh, rec)
			freshIdx = append(freshIdx, i)
		}
		if wait != nil {
			w.mu.Unlock()
			if _, err := rt.Wait(ctx, wait.done); err != nil {
				return nil, false, err
			}
			continue
		}
		if len(fresh) == 0 {
			w.mu.Unlock()
			return results, false, nil
		}
		req := &appendReq{recs: fresh, uploaded: uploaded, done: rt.NewEvent()}
		for _, rec := range fresh {
			w.inflight[rec.ID] = req
		}
		w.queue = append(w.queue, req)
		w.last = rt.Now()
		wake := w.wake
		w.mu.Unlock()
		wake.Fire()
		if _, err := rt.Wait(ctx, req.done); err != nil {
			// Not acknowledged; it may still become durable, which an
			// identical retry then finds.
			return nil, true, err
		}
		if req.err != nil {
			var be *BatchError
			if errors.As(req.err, &be) {
				return nil, !req.refused, &BatchError{Index: freshIdx[be.Index], Err: be.Err}
			}
			return nil, !req.refused, req.err
		}
		created := 0
		for j, r := range req.results {
			results[freshIdx[j]] = r
			if r.Created {
				created++
			}
		}
		w.t.db.stats.Appends.Add(int64(created))
		return results, true, nil
	}
}

func (w *shardWriter) compare(existing, rec *Record) (AppendResult, error) {
	if rowfile.SameContent(existing, rec) {
		w.t.db.stats.AppendRetries.Add(1)
		return AppendResult{Record: existing, Created: false}, nil
	}
	w.t.db.stats.AppendConflict.Add(1)
	return AppendResult{}, fmt.Errorf("%w: %q", ErrConflict, rec.ID)
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

// commitNext writes one segment from the queue; false when the queue is
// empty or the writer stopped.
func (w *shardWriter) commitNext(ctx context.Context) bool {
	cfg := w.t.db.cfg
	w.mu.Lock()
	if w.err != nil || len(w.queue) == 0 {
		w.mu.Unlock()
		return false
	}
	var batch []*appendReq
	var size int64
	rows := 0
	for len(w.queue) > 0 {
		n := w.queue[0].bytes()
		if len(batch) > 0 && (size+n > cfg.SegmentMaxBytes || rows+len(w.queue[0].recs) > cfg.SegmentMaxRows) {
			break
		}
		rows += len(w.queue[0].recs)
		size += n
		batch = append(batch, w.queue[0])
		w.queue = w.queue[1:]
	}
	w.mu.Unlock()

	// The orphan sweep deletes unreferenced payload objects older than
	// OrphanGrace, and gives up a pass that runs longer than a quarter of
	// it; a row whose payload upload began more than half of it ago (its
	// process stalled) is not committed: its payload may be gone.
	var stale []*appendReq
	if cfg.OrphanGrace > 0 {
		cutoff := w.t.db.rt.Now().Add(-cfg.OrphanGrace / 2)
		keep := batch[:0]
		for _, req := range batch {
			if req.uploaded.Before(cutoff) && hasExternal(req.recs) {
				stale = append(stale, req)
			} else {
				keep = append(keep, req)
			}
		}
		batch = keep
	}
	answered := w.checkBatch(ctx, batch)
	var writes []*appendReq
	for _, req := range answered {
		if req.err == nil && len(req.write) > 0 {
			writes = append(writes, req)
		}
	}
	var err error
	if len(writes) > 0 {
		err = w.writeSegment(ctx, writes)
	}
	w.mu.Lock()
	for _, req := range stale {
		req.err = fmt.Errorf("%w: its payload upload began more than half the orphan grace ago; retry the append", ErrTooSlow)
		for _, rec := range req.recs {
			delete(w.inflight, rec.ID)
		}
		req.done.Fire()
	}
	for _, req := range answered {
		if req.err == nil && len(req.write) > 0 {
			req.err = err
		}
		for _, rec := range req.write {
			if req.err == nil {
				kept := *rec
				kept.Payload = nil // compared by checksum; do not pin the bytes
				w.recent[rec.ID] = &kept
			}
		}
		for _, rec := range req.recs {
			delete(w.inflight, rec.ID)
		}
		req.done.Fire()
	}
	w.mu.Unlock()
	if err == nil && (w.genBytes >= cfg.GenMaxBytes || len(w.segs) >= cfg.GenMaxSegments) {
		w.fail(nil, w.rotate(ctx, true))
	}
	return true
}

// checkBatch decides, for the requests of one commit, what is already
// visible: one lookup, whose refresh (when the resident view does not
// answer) begins after every request was queued, so it sees every row
// acknowledged anywhere before each append began. A row visible with the
// same content is an identical retry (answered, not written again); with
// other content it is a conflict, which refuses its whole request. The
// merge backlog is checked on the same view. Requests refused here wrote
// nothing (refused is set). One check per commit, not per append: group
// commit shares it like the segment and the head swap.
func (w *shardWriter) checkBatch(ctx context.Context, batch []*appendReq) []*appendReq {
	var all []*Record
	for _, req := range batch {
		all = append(all, req.recs...)
	}
	if len(all) == 0 {
		return batch
	}
	existing, snap, err := w.t.lookupMany(ctx, all)
	if err == nil {
		err = w.t.db.point(ctx, "write:checked")
	}
	if err == nil {
		if err = w.t.backpressure(snap, w.shard); err != nil {
			w.t.db.stats.AppendBackpressure.Add(int64(len(batch)))
		}
	}
	i := 0
	for _, req := range batch {
		found := existing
		if found != nil {
			found = existing[i : i+len(req.recs)]
		}
		i += len(req.recs)
		if err != nil {
			req.err, req.refused = err, true
			continue
		}
		req.results = make([]AppendResult, len(req.recs))
		req.write = nil
		for j, rec := range req.recs {
			if found[j] == nil {
				req.results[j] = AppendResult{Record: rec, Created: true}
				req.write = append(req.write, rec)
				continue
			}
			r, cerr := w.compare(found[j], rec)
			if cerr != nil {
				req.err, req.refused = &BatchError{Index: j, Err: cerr}, true
				break
			}
			req.results[j] = r
		}
	}
	return batch
}

// writeSegment commits one segment: it writes the segment (create-if-absent,
// at the next number of the open generation), then swaps the head to count
// it. Only the swap makes the segment part of the generation; a writer that
// lost the head (it was fenced) has written an object nothing will read.
func (w *shardWriter) writeSegment(ctx context.Context, batch []*appendReq) error {
	t := w.t
	var rows []rowfile.Record
	for _, req := range batch {
		for _, rec := range req.write {
			rows = append(rows, *rec)
		}
	}
	data, lay, err := rowfile.Encode(rows, rowfile.Options{EmbedLayout: true})
	if err != nil {
		return err
	}
	if !w.active {
		// Readers must probe this shard before this append is acknowledged.
		if err := setActive(ctx, t.db, t.keys, w.shard, w.id, w.head.Gen, true, false); err != nil {
			w.fail(batch, err)
			return t.noteGone(err)
		}
		w.active = true
	}
	if err := t.db.point(ctx, "write:before-segment"); err != nil {
		return err
	}
	if err := w.owner.valid(); err != nil {
		w.fail(batch, err)
		return err
	}
	seq := w.head.Segs + 1
	key := t.keys.Segment(w.shard, w.head.Gen, seq)
	if err := w.putSegment(ctx, key, data); err != nil {
		w.fail(batch, err)
		return err
	}
	if err := t.db.point(ctx, "write:after-segment"); err != nil {
		w.fail(batch, err)
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	// Checked again once the segment has landed: from then on a sweep
	// sees it (an uncounted segment of the open generation) and keeps its
	// payloads; one that listed before cannot still be running (it gives
	// up after a quarter of the grace).
	if grace := t.db.cfg.OrphanGrace; grace > 0 {
		cutoff := t.db.rt.Now().Add(-grace / 2)
		for _, req := range batch {
			if req.uploaded.Before(cutoff) && hasExternal(req.recs) {
				// The slot is spent: this writer stops, and the next one
				// seals the generation without it.
				err := fmt.Errorf("%w: the segment landed more than half the orphan grace after its payloads began uploading", ErrTooSlow)
				w.fail(batch, err)
				return err
			}
		}
	}
	nh, err := casHead(ctx, t.db, t.keys, w.shard, w.head, head{Gen: w.head.Gen, Segs: seq, Owner: w.id, layout: headLayout(lay)})
	if errors.Is(err, ErrOutcomeUnknown) {
		// Whether the swap landed is in the counts: only this writer
		// counts segments of its generation, and a new owner seals it at
		// the count the head had.
		switch counted, cur, rerr := t.counted(ctx, w.shard, w.head.Gen, seq); {
		case rerr == nil && counted:
			if cur.Gen == w.head.Gen && cur.Owner == w.id && !cur.Sealed && cur.Segs == seq {
				nh, err = cur, nil // landed, and still this writer's to go on with
			} else {
				// Landed, but the generation is sealed: acknowledged, and
				// this writer stops (it can count nothing more).
				w.head.Segs = seq
				w.segs = append(w.segs, sealedSegment{Seq: seq, Size: int64(len(data)), Layout: lay})
				w.fail(batch, fmt.Errorf("%w: %s/%s: the generation was sealed after this writer's last segment", ErrFenced, t.Name(), w.shard))
				return nil
			}
		case rerr == nil:
			err = fmt.Errorf("%w: %w", errHeadMoved, err) // not counted: fenced
		case errors.Is(rerr, ErrTableNotFound):
			err = rerr
		}
	}
	if err != nil {
		if errors.Is(err, errHeadMoved) {
			err = fmt.Errorf("%w: %w", ErrFenced, err)
		}
		w.fail(batch, err)
		return t.noteGone(err)
	}
	nh.layout = "" // kept once, in the layouts cache
	w.head = nh
	t.db.layouts.Add(key, lay, lay.MemSize())
	if len(w.segs) == 0 {
		w.genStart = t.db.rt.Now()
	}
	w.segs = append(w.segs, sealedSegment{Seq: seq, Size: int64(len(data)), Layout: lay})
	w.genBytes += int64(len(data))
	t.db.stats.Segments.Add(1)
	return nil
}

// counted reports whether segment seq of gen is counted: by the head, while
// gen is its generation, or by gen's seal record once a new owner moved on.
// An error means it cannot tell (gen merged and reclaimed, a failing read).
// It returns the head it read.
func (t *Table) counted(ctx context.Context, shard string, gen, seq uint64) (bool, head, error) {
	h, err := readHead(ctx, t.db, t.keys, shard)
	switch {
	case err != nil:
		return false, h, err
	case h.Dropped:
		return false, h, fmt.Errorf("%w: %s", errDropped, t.Name())
	case h.Gen == gen:
		return h.Segs >= seq, h, nil
	case h.Gen < gen:
		return false, h, fmt.Errorf("the head of %s/%s is at generation %d, below %d", t.Name(), shard, h.Gen, gen)
	}
	rec, err := t.loadSeal(ctx, shard, gen)
	if err != nil {
		return false, h, err // reclaimed (merged): which segments it had is in the base only
	}
	return uint64(len(rec.Segments)) >= seq, h, nil
}

// putSegment creates the segment object, retrying transient failures. An
// existing object is this writer's own earlier attempt (a lost response)
// when it carries this writer's name and size; anything else there means
// the slot is not this writer's, which cannot happen to the owner of a
// generation.
func (w *shardWriter) putSegment(ctx context.Context, key string, data []byte) error {
	store := w.t.db.store
	var err error
	for attempt := 0; attempt < 4; attempt++ {
		_, err = store.Put(ctx, key, bytes.NewReader(data), objstore.PutOptions{IfNotExists: true, Size: int64(len(data)),
			Metadata: map[string]string{"writer": w.id}, ContentType: "application/vnd.apache.arrow.file"})
		if err == nil {
			return nil
		}
		if errors.Is(err, objstore.ErrPrecondition) {
			a, herr := store.Head(ctx, key)
			if herr == nil && a.Metadata["writer"] == w.id && a.Size == int64(len(data)) {
				return nil
			}
			return fmt.Errorf("%w: segment %s was written by another writer", ErrFenced, key)
		}
		if !retryable(err) {
			break
		}
	}
	return fmt.Errorf("writing segment %s: %w", key, err)
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
		if !errors.Is(err, ErrClosed) {
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
	if err := t.db.point(ctx, "write:before-rotate"); err != nil {
		return err
	}
	h := w.head
	if !h.Sealed {
		hs, err := casHead(ctx, t.db, t.keys, w.shard, h, head{Gen: h.Gen, Segs: h.Segs, Sealed: true, Owner: w.id})
		if errors.Is(err, errHeadMoved) {
			err = fmt.Errorf("%w: %w", ErrFenced, err)
		}
		if err != nil {
			return t.noteGone(err)
		}
		h = hs
		w.head = h
	}
	if _, err := t.writeSeal(ctx, w.shard, h.Gen, w.segs); err != nil {
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
	nh, err := casHead(ctx, t.db, t.keys, w.shard, h, head{Gen: h.Gen + 1, Owner: w.id})
	if errors.Is(err, errHeadMoved) {
		err = fmt.Errorf("%w: %w", ErrFenced, err)
	}
	if err != nil {
		return t.noteGone(err)
	}
	w.open(nh)
	return nil
}

// Flush seals the open generation now, making it mergeable (tests, and the
// merge endpoint's "merge everything" mode).
func (t *Table) Flush(ctx context.Context) error {
	w := t.liveWriter()
	if w == nil {
		return nil
	}
	rt := t.db.rt
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

func hasExternal(recs []*Record) bool {
	for _, r := range recs {
		if r.PayloadRef != "" {
			return true
		}
	}
	return false
}

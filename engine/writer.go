package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/objstore"
)

// shardWriter owns one shard of one table in this process: it group-commits
// appends into WAL segments of the open generation and seals generations.
// Appends never wait for reads, and reads never wait for it.
type shardWriter struct {
	t     *Table
	shard string
	owner *owner // the shard lease; nil without leases

	mu       sync.Mutex
	queue    []*appendReq
	inflight map[string]*appendReq // ids queued or being committed
	// recent holds rows this writer committed that a fresh read might not
	// see yet as base rows, to refuse a conflicting second write of the same
	// id on this shard even when the two race.
	recent map[string]*Record
	gen    uint64 // the open generation, read by payload uploads
	// sealed counts seals; a submit whose existence check predates a seal
	// (which clears recent) checks again.
	sealed uint64
	err    error // sticky: fenced or closed
	kick   chan struct{}
	flush  chan chan error
	quit   chan struct{}
	stop   sync.Once // closes quit
	done   chan struct{}

	// Owned by the loop goroutine.
	nextSeg  uint64
	segs     []sealedSegment
	genBytes int64
	genStart time.Time
}

// appendReq is one unit of commit: its rows go into one segment together.
type appendReq struct {
	recs []*Record
	done chan struct{}
	err  error
}

func (r *appendReq) bytes() int64 {
	var n int64
	for _, rec := range r.recs {
		n += int64(len(rec.Payload)) + 512
	}
	return n
}

func (t *Table) shardWriter(ctx context.Context) (*shardWriter, error) {
	if t.db.cfg.Shard == "" {
		return nil, ErrNoWriter
	}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if t.dropped.Load() {
		return nil, fmt.Errorf("%w: %s", ErrTableNotFound, t.Name())
	}
	if w := t.writer; w != nil {
		w.mu.Lock()
		err := w.err
		w.mu.Unlock()
		if err == nil {
			return w, nil
		}
		// The writer stopped: fenced, or a store error it could not get
		// past. Replace it once it has exited: the new one takes the lease
		// again (refused while another process owns the shard) and seals
		// what the old one left open.
		select {
		case <-w.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		t.writer = nil
	}
	w := &shardWriter{t: t, shard: t.db.cfg.Shard, inflight: map[string]*appendReq{}, recent: map[string]*Record{},
		kick: make(chan struct{}, 1), flush: make(chan chan error), quit: make(chan struct{}), done: make(chan struct{})}
	o, err := t.db.acquire(ctx, t.lay.ShardLease(w.shard))
	if errors.Is(err, objstore.ErrLeased) {
		return nil, fmt.Errorf("%w: %s/%s", ErrShardOwned, t.Name(), w.shard)
	}
	if err != nil {
		return nil, fmt.Errorf("acquiring shard %s: %w", w.shard, err)
	}
	w.owner = o
	if err := w.recover(ctx); err != nil {
		o.release(context.WithoutCancel(ctx))
		return nil, err
	}
	t.writer = w
	go w.loop()
	return w, nil
}

// recover picks the generation to open: above every generation of the shard
// that exists or was merged (reclaimed numbers are never reused), after
// sealing any generation a previous owner left open.
func (w *shardWriter) recover(ctx context.Context) error {
	t := w.t
	latest, err := t.latestVersion(ctx, 0)
	if err != nil {
		return err
	}
	base, err := t.loadBase(ctx, latest)
	if err != nil {
		return err
	}
	wm := base.m.watermark(w.shard)
	gens, err := t.listWAL(ctx)
	if err != nil {
		return err
	}
	top := wm
	for _, g := range gens {
		if g.shard != w.shard {
			continue
		}
		top = max(top, g.gen)
		if g.gen > wm && !g.sealed && len(g.segs) > 0 {
			err := t.sealGeneration(ctx, w.shard, g.gen, nil)
			if errors.Is(err, ErrFenced) {
				err = nil // its last owner sealed it after all
			}
			if err != nil {
				return fmt.Errorf("sealing abandoned generation %s/%d: %w", w.shard, g.gen, err)
			}
		}
	}
	w.gen = top + 1
	return nil
}

func (w *shardWriter) currentGen() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen
}

// submit queues rows (one append, or one all-or-nothing batch, which is
// committed in a single segment) and waits until they are durable. Another
// append of the same id in flight is waited for, then compared: an
// identical retry succeeds without a second row, different content is a
// conflict. recs must be free of duplicate ids.
//
// queued reports whether the rows reached the commit queue. After that a
// failure leaves their outcome unknown (the segment may have landed; a
// cancelled caller's rows are still committed), so the caller must leave
// their payload objects to the orphan sweep, which checks references.
func (w *shardWriter) submit(ctx context.Context, recs []*Record) (results []AppendResult, queued bool, err error) {
	results = make([]AppendResult, len(recs))
	for {
		w.mu.Lock()
		epoch := w.sealed
		w.mu.Unlock()
		// Rows visible to a fresh read: the base or any shard's WAL.
		existing, err := w.t.lookupMany(ctx, recs)
		if err != nil {
			return nil, false, err
		}
		var todo []*Record
		var idx []int
		for i, rec := range recs {
			if existing[i] == nil {
				todo = append(todo, rec)
				idx = append(idx, i)
				continue
			}
			r, err := w.compare(existing[i], rec)
			if err != nil {
				return nil, false, &BatchError{Index: i, Err: err}
			}
			results[i] = r
		}
		if len(todo) == 0 {
			return results, false, nil
		}
		w.mu.Lock()
		if w.err != nil {
			err := w.err
			w.mu.Unlock()
			return nil, false, err
		}
		if w.sealed != epoch {
			w.mu.Unlock()
			continue // recent was cleared after our check: check again
		}
		var wait *appendReq
		var fresh []*Record
		var freshIdx []int
		for j, rec := range todo {
			if prev := w.recent[rec.ID]; prev != nil {
				r, err := w.compare(prev, rec)
				if err != nil {
					w.mu.Unlock()
					return nil, false, &BatchError{Index: idx[j], Err: err}
				}
				results[idx[j]] = r
				continue
			}
			if prev := w.inflight[rec.ID]; prev != nil {
				wait = prev
				break
			}
			fresh = append(fresh, rec)
			freshIdx = append(freshIdx, idx[j])
		}
		if wait != nil {
			w.mu.Unlock()
			select {
			case <-wait.done:
			case <-ctx.Done():
				return nil, false, ctx.Err()
			}
			continue
		}
		if len(fresh) == 0 {
			w.mu.Unlock()
			return results, false, nil
		}
		req := &appendReq{recs: fresh, done: make(chan struct{})}
		for _, rec := range fresh {
			w.inflight[rec.ID] = req
		}
		w.queue = append(w.queue, req)
		w.mu.Unlock()
		select {
		case w.kick <- struct{}{}:
		default:
		}
		select {
		case <-req.done:
		case <-ctx.Done():
			// Not acknowledged; it may still become durable, which an
			// identical retry then finds.
			return nil, true, ctx.Err()
		}
		if req.err != nil {
			return nil, true, req.err
		}
		for j, rec := range fresh {
			results[freshIdx[j]] = AppendResult{Record: rec, Created: true}
		}
		w.t.db.stats.Appends.Add(int64(len(fresh)))
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
	defer close(w.done)
	cfg := w.t.db.cfg
	tick := time.NewTicker(max(cfg.GenMaxAge/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		quitting := false
		select {
		case <-w.kick:
			// Let concurrent appends gather into one segment.
			timer := time.NewTimer(cfg.GroupCommitWindow)
			select {
			case <-timer.C:
			case <-w.quit:
				quitting = true
			}
			timer.Stop()
		case <-tick.C:
			if len(w.segs) > 0 && cfg.Now().Sub(w.genStart) >= cfg.GenMaxAge {
				w.fail(nil, w.seal(context.Background()))
			}
			continue
		case reply := <-w.flush:
			for w.commitNext() {
			}
			var err error
			if len(w.segs) > 0 {
				err = w.seal(context.Background())
				w.fail(nil, err)
			}
			reply <- err
			continue
		case <-w.quit:
			quitting = true
		}
		for w.commitNext() {
		}
		if quitting {
			if len(w.segs) > 0 {
				w.fail(nil, w.seal(context.Background()))
			}
			w.mu.Lock()
			if w.err == nil {
				w.err = fmt.Errorf("%w: writer of %s/%s", ErrClosed, w.t.Name(), w.shard)
			}
			w.mu.Unlock()
			w.fail(nil, ErrClosed)
			w.owner.release(context.Background())
			return
		}
	}
}

// commitNext writes one segment from the queue; false when the queue is
// empty or the writer stopped.
func (w *shardWriter) commitNext() bool {
	cfg := w.t.db.cfg
	w.mu.Lock()
	if w.err != nil || len(w.queue) == 0 {
		w.mu.Unlock()
		return false
	}
	var batch []*appendReq
	var bytes int64
	rows := 0
	for len(w.queue) > 0 {
		n := w.queue[0].bytes()
		if len(batch) > 0 && (bytes+n > cfg.SegmentMaxBytes || rows+len(w.queue[0].recs) > cfg.SegmentMaxRows) {
			break
		}
		rows += len(w.queue[0].recs)
		bytes += n
		batch = append(batch, w.queue[0])
		w.queue = w.queue[1:]
	}
	gen := w.gen
	w.mu.Unlock()

	err := w.writeSegment(gen, batch)
	w.mu.Lock()
	for _, req := range batch {
		req.err = err
		for _, rec := range req.recs {
			if err == nil {
				kept := *rec
				kept.Payload = nil // compared by checksum; do not pin the bytes
				w.recent[rec.ID] = &kept
			}
			delete(w.inflight, rec.ID)
		}
		close(req.done)
	}
	w.mu.Unlock()
	if err == nil && (w.genBytes >= cfg.GenMaxBytes || len(w.segs) >= cfg.GenMaxSegments) {
		w.fail(nil, w.seal(context.Background()))
	}
	return true
}

func (w *shardWriter) writeSegment(gen uint64, batch []*appendReq) error {
	t := w.t
	var rows []rowfile.Record
	for _, req := range batch {
		for _, rec := range req.recs {
			rows = append(rows, *rec)
		}
	}
	data, lay, err := rowfile.Encode(rows, rowfile.Options{})
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := t.db.cfg.Hooks.Call(ctx, "write:before-segment"); err != nil {
		return err
	}
	if err := w.owner.valid(); err != nil {
		w.fail(batch, err)
		return err
	}
	seq := w.nextSeg
	// A segment number is used once, whatever the outcome: a put whose
	// response was lost may still have landed.
	w.nextSeg++
	key := t.lay.Segment(w.shard, gen, seq)
	_, err = t.db.store.Put(ctx, key, bytes.NewReader(data), objstore.PutOptions{IfNotExists: true, Size: int64(len(data))})
	if errors.Is(err, objstore.ErrPrecondition) {
		err = errFenced(key, err)
		w.fail(batch, err)
		return err
	}
	if err != nil {
		return fmt.Errorf("writing segment %s: %w", key, err)
	}
	if lapsed := w.owner.valid(); lapsed != nil {
		// Landed, but the lease lapsed meanwhile: a new owner may have
		// sealed the generation before or after it landed. Decide by the
		// seal record, writing it ourselves if nobody has: the segment is
		// committed exactly when the seal lists it, and the answer says so.
		// Either way this writer stops.
		in, err := t.segmentSealed(ctx, w.shard, gen, seq, append(w.segs, sealedSegment{Seq: seq, Size: int64(len(data)), Layout: lay}))
		if err != nil || !in {
			w.fail(batch, lapsed)
			return lapsed
		}
		defer w.fail(batch, lapsed) // acknowledge this batch, then stop
	}
	t.db.layouts.Add(t.ck(key), lay, lay.MemSize())
	if len(w.segs) == 0 {
		w.genStart = t.db.cfg.Now()
	}
	w.segs = append(w.segs, sealedSegment{Seq: seq, Size: int64(len(data)), Layout: lay})
	w.genBytes += int64(len(data))
	t.db.stats.Segments.Add(1)
	return nil
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
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
		if !errors.Is(err, ErrClosed) {
			w.t.db.cfg.Logger.Error("shard writer stopped", "table", w.t.Name(), "shard", w.shard, "err", err)
		}
		// Stop the loop (and give the lease up); the next append starts a
		// new writer, which takes the shard again or learns who owns it.
		w.stop.Do(func() { close(w.quit) })
	}
	for _, req := range w.queue {
		if !inSkip[req] {
			req.err = w.err
			for _, rec := range req.recs {
				delete(w.inflight, rec.ID)
			}
			close(req.done)
		}
	}
	w.queue = nil
}

// seal closes the open generation and opens the next.
func (w *shardWriter) seal(ctx context.Context) error {
	if err := w.owner.valid(); err != nil {
		return err
	}
	w.mu.Lock()
	gen := w.gen
	w.mu.Unlock()
	if err := w.t.sealGeneration(ctx, w.shard, gen, w.segs); err != nil {
		return err
	}
	w.mu.Lock()
	w.gen++
	// Rows of sealed generations are visible to every fresh read through
	// the seal record, so the in-memory guard can start over.
	clear(w.recent)
	w.sealed++
	w.mu.Unlock()
	w.nextSeg, w.segs, w.genBytes = 0, nil, 0
	return nil
}

// sealGeneration writes the seal record of a generation. known holds the
// layouts the writer has; every segment present in the store is included
// (a segment whose put reported failure may have landed, and its rows may
// have been read), so a seal never hides a visible row.
func (t *Table) sealGeneration(ctx context.Context, shard string, gen uint64, known []sealedSegment) error {
	have := map[uint64]sealedSegment{}
	for _, s := range known {
		have[s.Seq] = s
	}
	rec := sealRecord{Shard: shard, Gen: gen, SealedAt: t.db.cfg.Now().UTC()}
	err := t.db.store.List(ctx, t.lay.GenerationPrefix(shard, gen), objstore.ListOptions{}, func(e objstore.Entry) error {
		k, ok := t.lay.ParseWAL(e.Key)
		if !ok || k.IsSeal || k.IsOther {
			return nil
		}
		if s, ok := have[k.Seg]; ok {
			rec.Segments = append(rec.Segments, s)
			return nil
		}
		lay, err := t.segmentLayout(ctx, e.Key)
		if err != nil {
			return err
		}
		rec.Segments = append(rec.Segments, sealedSegment{Seq: k.Seg, Size: e.Size, Layout: lay})
		return nil
	})
	if err != nil {
		return err
	}
	if err := t.db.cfg.Hooks.Call(ctx, "write:before-seal"); err != nil {
		return err
	}
	body, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	key := t.lay.Seal(shard, gen)
	if _, err := t.db.store.Put(ctx, key, bytes.NewReader(body), objstore.PutOptions{IfNotExists: true, Size: int64(len(body))}); err != nil {
		if errors.Is(err, objstore.ErrPrecondition) {
			return errFenced(key, err)
		}
		return fmt.Errorf("writing seal %s: %w", key, err)
	}
	t.db.seals.Add(t.ck(key), &rec, int64(len(body)))
	t.db.stats.Seals.Add(1)
	return nil
}

// Flush seals the open generation now, making it mergeable (tests, and the
// merge endpoint's "merge everything" mode).
func (t *Table) Flush(ctx context.Context) error {
	t.wmu.Lock()
	w := t.writer
	t.wmu.Unlock()
	if w == nil {
		return nil
	}
	done := make(chan error, 1)
	select {
	case w.flush <- done:
	case <-w.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *shardWriter) close(ctx context.Context) error {
	w.stop.Do(func() { close(w.quit) })
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// segmentSealed reports whether segment seq of a generation is part of it:
// it seals the generation itself (listing what is present, seq included)
// unless a seal record already exists, in which case that record decides.
func (t *Table) segmentSealed(ctx context.Context, shard string, gen, seq uint64, known []sealedSegment) (bool, error) {
	err := t.sealGeneration(ctx, shard, gen, known)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, ErrFenced) {
		return false, err
	}
	seal, err := t.loadSeal(ctx, shard, gen)
	if err != nil {
		return false, err
	}
	for _, s := range seal.Segments {
		if s.Seq == seq {
			return true, nil
		}
	}
	return false, nil
}

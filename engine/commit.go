// The group commit (doc.go, step 3): the queue of appends, the existence
// check a commit makes against the visible rows, and the segment write
// followed by the head swap that counts it.

package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
)

// appendReq is one unit of commit: its rows go into one segment together.
type appendReq struct {
	recs []*Record
	// givenAt reports, for each of recs, whether its created_at was given
	// by the caller (not stamped by this process): see compare.
	givenAt []bool
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

func (r *appendReq) bytes() int64 {
	var n int64
	for _, rec := range r.recs {
		n += int64(len(rec.Payload)) + 512
	}
	return n
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
func (w *shardWriter) submit(ctx context.Context, recs []*Record, givenAt []bool, uploaded time.Time) (results []AppendResult, queued bool, err error) {
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
		var freshGiven []bool
		var freshIdx []int
		for i, rec := range recs {
			if results[i].Record != nil {
				continue // answered on an earlier round
			}
			if prev := w.recent[rec.ID]; prev != nil {
				r, err := w.compare(prev, rec, givenAt[i])
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
			freshGiven = append(freshGiven, givenAt[i])
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
		req := &appendReq{recs: fresh, givenAt: freshGiven, uploaded: uploaded, done: rt.NewEvent()}
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

// compare answers an append of rec whose id exists: an identical retry is
// answered with the existing row, anything else is a conflict. Identical
// means the same content (rowfile.SameContent: the same fields, metadata
// that is the same JSON value, the same payload) and, when the caller gave
// a created_at (givenAt), the same created_at as the existing row's, to
// the microsecond it is stored at: a retry that gives another one would
// otherwise be acknowledged while its created_at is dropped. A retry that
// gives none matches whatever created_at the row has.
func (w *shardWriter) compare(existing, rec *Record, givenAt bool) (AppendResult, error) {
	if !rowfile.SameContent(existing, rec) {
		w.t.db.stats.AppendConflict.Add(1)
		return AppendResult{}, fmt.Errorf("%w: %q", ErrConflict, rec.ID)
	}
	if givenAt && !existing.CreatedAt.Equal(rec.CreatedAt) {
		w.t.db.stats.AppendConflict.Add(1)
		return AppendResult{}, fmt.Errorf("%w: %q exists with created_at %s, not %s", ErrConflict,
			rec.ID, formatAt(existing.CreatedAt), formatAt(rec.CreatedAt))
	}
	w.t.db.stats.AppendRetries.Add(1)
	return AppendResult{Record: existing, Created: false}, nil
}

func formatAt(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

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
	existing, snap, err := w.lookupOwned(ctx, all)
	if err == nil {
		err = w.t.db.point(ctx, hookChecked)
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
			r, cerr := w.compare(found[j], rec, req.givenAt[j])
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
	if err := t.db.point(ctx, hookBeforeSegment); err != nil {
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
	if err := t.db.point(ctx, hookAfterSegment); err != nil {
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
	swapAt := t.db.rt.Now()
	nh, err := casHead(ctx, t.db, t.keys, w.shard, w.head, head{Gen: w.head.Gen, Segs: seq, Owner: w.id, layout: headLayout(lay),
		Rows: w.head.Rows + uint64(len(rows)), GenStart: w.head.GenStart})
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
	prev := w.head
	w.head = nh
	t.db.layouts.Add(key, lay, lay.MemSize())
	if len(w.segs) == 0 {
		w.genStart = t.db.rt.Now()
	}
	w.segs = append(w.segs, sealedSegment{Seq: seq, Size: int64(len(data)), Layout: lay})
	w.genBytes += int64(len(data))
	t.db.stats.Segments.Add(1)
	w.publish(prev, segView{seq: seq, key: key, layout: lay})
	t.feedNotify(w.shard, nh, swapAt)
	return nil
}

// publish adds the segment this writer just counted to the resident
// snapshot's view of its partition, when that view was at the head the
// swap replaced (prev): the view then stays at the writer's head, and the
// next commit's existence check needs no probe (see checkBatch).
func (w *shardWriter) publish(prev head, seg segView) {
	t := w.t
	if t.partitions == 0 {
		return
	}
	cur := t.snap.Load()
	if cur == nil {
		return
	}
	pv := cur.shards[w.shard]
	if pv == nil || pv.head.etag == "" || pv.head.etag != prev.etag {
		return
	}
	h := w.head
	gens := append([]*genView(nil), pv.gens...)
	var open []segView
	if n := len(gens); n > 0 && gens[n-1].gen == h.Gen && !gens[n-1].sealed {
		open = append(open, gens[n-1].segs...)
		gens = gens[:n-1]
	}
	open = append(open, seg)
	if uint64(len(open)) != h.Segs {
		return // the view is not what the writer counted: leave it to a probe
	}
	gens = append(gens, newGenView(w.shard, h.Gen, false, open))
	t.installPartition(cur, w.shard, &shardView{head: h, gens: gens}, time.Time{})
}

// lookupOwned is lookupMany for the rows of the writer's own partition:
// when the resident snapshot's view of it is at the writer's head, that
// view holds every row of the partition (the base up to its watermark,
// every generation since), and no probe is needed. A writer fenced
// meanwhile may miss a row there, but cannot commit: its head swap fails.
func (w *shardWriter) lookupOwned(ctx context.Context, recs []*Record) ([]*Record, *snapshot, error) {
	t := w.t
	s := t.snap.Load()
	if t.partitions == 0 || s == nil || s.shards[w.shard] == nil || w.head.etag == "" || s.shards[w.shard].head.etag != w.head.etag {
		return t.lookupMany(ctx, recs)
	}
	out := make([]*Record, len(recs))
	for i, r := range recs {
		loc, ok := s.find(r.ID)
		if !ok {
			continue
		}
		rec, err := t.readRow(ctx, loc)
		if errors.Is(err, objstore.ErrNotFound) {
			return t.lookupMany(ctx, recs) // reclaimed: the recovering path
		}
		if err != nil {
			return nil, nil, err
		}
		out[i] = rec
	}
	t.db.stats.OwnedChecks.Add(1)
	return out, s, nil
}

// lookupMany returns, for each record's id, the row a read beginning now
// would return (nil when absent), sharing one refresh among all of them: a
// batch append checks its ids in one round, not one refresh per row. It
// also returns the snapshot it consulted last.
func (t *Table) lookupMany(ctx context.Context, recs []*Record) ([]*Record, *snapshot, error) {
	if err := t.checkLive(); err != nil {
		return nil, nil, err
	}
	out := make([]*Record, len(recs))
	ticket := t.refresh.ticket()
	var rest []int
	resident := t.fresh()
	for i, r := range recs {
		if resident != nil {
			if loc, ok := resident.find(r.ID); ok {
				rec, err := t.readRow(ctx, loc)
				if err == nil {
					out[i] = rec
					continue
				}
				if !errors.Is(err, objstore.ErrNotFound) {
					return nil, nil, err
				}
			}
		}
		rest = append(rest, i)
	}
	if len(rest) == 0 {
		return out, resident, nil
	}
	// In a partitioned table only the partitions of the ids not found are
	// refreshed (a group commit's are one partition: one HEAD).
	snaps := map[string]*snapshot{}
	var s *snapshot
	var err error
	if t.partitions == 0 {
		if s, err = t.refreshed(ctx, ticket, false); err != nil {
			return nil, nil, err
		}
	} else {
		var parts []string
		for _, i := range rest {
			if p := t.PartitionOf(recs[i].ID); snaps[p] == nil {
				snaps[p] = &snapshot{}
				parts = append(parts, p)
			}
		}
		got := make([]*snapshot, len(parts))
		if err := sched.Parallel(ctx, t.db.rt, len(parts), 16, func(ctx context.Context, i int) error {
			var err error
			got[i], err = t.refreshedPartition(ctx, parts[i], ticket)
			return err
		}); err != nil {
			return nil, nil, err
		}
		for i, p := range parts {
			snaps[p] = got[i]
		}
	}
	for _, i := range rest {
		id := recs[i].ID
		if t.partitions > 0 {
			s = snaps[t.PartitionOf(id)]
		}
		loc, ok := s.find(id)
		if !ok {
			continue
		}
		rec, err := t.readRow(ctx, loc)
		if errors.Is(err, objstore.ErrNotFound) {
			// Reclaimed since the refresh: the recovering path finds it.
			rec, err = t.Get(ctx, id, ReadOptions{})
			if errors.Is(err, ErrNotFound) {
				continue
			}
		}
		if err != nil {
			return nil, nil, err
		}
		out[i] = rec
	}
	return out, s, nil
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

func hasExternal(recs []*Record) bool {
	for _, r := range recs {
		if r.PayloadRef != "" {
			return true
		}
	}
	return false
}

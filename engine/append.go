package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
)

// AppendResult describes an acknowledged append.
type AppendResult struct {
	Record *Record
	// Created is false when the append was an identical retry of a row that
	// already existed; nothing new was written.
	Created bool
}

// Append writes one row. The payload streams from r: up to InlineMax bytes
// are kept in memory and go inline into the WAL segment, anything larger
// streams to its own object, so memory per append is bounded whatever the
// payload size. size is the declared payload length, or -1 if unknown.
// Append returns once the row's segment is durable.
//
// A zero rec.CreatedAt is stamped with the current time; any is kept to the
// microsecond. An append of an existing id is an identical retry (Created
// false, the existing row returned) when its content is the same (see
// compare: metadata as a JSON value, an explicit created_at equal to the
// stored one), and ErrConflict otherwise.
//
// In a partitioned table, an append whose partition another process owns
// fails with a NotOwnerError before its body is read; a caller that
// forwards appends uses Stage and Commit instead.
func (t *Table) Append(ctx context.Context, rec Record, r io.Reader, size int64) (AppendResult, error) {
	if err := t.checkLive(); err != nil {
		return AppendResult{}, err
	}
	// Take the partition (or find it owned elsewhere) before the body is
	// read: the append can still move to the table's new incarnation.
	if _, err := t.writerFor(ctx, t.PartitionOf(rec.ID)); err != nil {
		return onSuccessor(ctx, t, AppendResult{}, err, func(nt *Table) (AppendResult, error) {
			return nt.Append(ctx, rec, r, size)
		})
	}
	st, nt, err := t.Stage(ctx, rec, r, size)
	if err != nil {
		return AppendResult{}, err
	}
	res, err := nt.Commit(ctx, []*Staged{st})
	var be *BatchError
	if errors.As(err, &be) {
		err = be.Err
	}
	if err != nil {
		return AppendResult{}, err
	}
	return res[0], nil
}

// Staged is an append whose payload is stored (inline in Record.Payload,
// or its own object named by Record.PayloadRef) and whose row awaits its
// commit by the owner of its partition: in this process, or in the one a
// process that does not own the partition forwards it to. Only the record
// travels; the payload is never sent twice.
type Staged struct {
	Record Record
	// GivenAt: the caller gave Record.CreatedAt (see compare).
	GivenAt bool
	// Uploaded is when its payload upload began: a row whose payload
	// object is old enough for the orphan sweep is not committed.
	Uploaded time.Time
}

// Stage validates an append and stores its payload (see Append), ready for
// Commit on the returned handle: the table's current incarnation, which is
// t unless t was dropped and the table created again (then the append
// moves there before its body is read).
func (t *Table) Stage(ctx context.Context, rec Record, r io.Reader, size int64) (*Staged, *Table, error) {
	cfg := t.db.cfg
	if err := t.checkLive(); err != nil {
		return nil, nil, err
	}
	givenAt := rec.CreatedAt
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = t.db.rt.Now()
	}
	rec.CreatedAt = rec.CreatedAt.UTC().Truncate(time.Microsecond)
	if rec.ContentType == "" {
		rec.ContentType = "application/octet-stream"
	}
	rec.Payload, rec.PayloadRef = nil, ""
	if err := rec.Validate(); err != nil {
		return nil, nil, err
	}
	if size > cfg.MaxPayload {
		return nil, nil, fmt.Errorf("%w: %d bytes exceeds %d", ErrTooLarge, size, cfg.MaxPayload)
	}
	var err error
	if t.fresh() == nil {
		// Learn of a drop elsewhere before the body is read, while the
		// append can still move to the table's new incarnation (in a
		// partitioned table, the id's partition refresh checks the
		// registry with its head).
		if t.partitions > 0 {
			_, err = t.refreshedPartition(ctx, t.PartitionOf(rec.ID), t.refresh.ticket())
		} else {
			_, err = t.refreshed(ctx, t.refresh.ticket(), false)
		}
	}
	moved := false
	var st *Staged
	nt, err := onSuccessor(ctx, t, t, err, func(nt *Table) (*Table, error) {
		moved = true
		rec.CreatedAt = givenAt // stamped there, if it was not given
		var err error
		st, nt, err = nt.Stage(ctx, rec, r, size)
		return nt, err
	})
	if moved || err != nil {
		return st, nt, err
	}
	st = &Staged{Record: rec, GivenAt: !givenAt.IsZero(), Uploaded: t.db.rt.Now()}
	if err := t.stream(ctx, &st.Record, r, size); err != nil {
		return nil, nil, err
	}
	if err := t.db.point(ctx, hookAfterPayload); err != nil {
		return nil, nil, err // a crash here leaves an orphan payload
	}
	return st, t, nil
}

// Commit commits staged appends (of Stage, here or in a process that
// forwarded them) through the writers of their partitions, which must be
// this process's: it answers NotOwnerError (in a BatchError) otherwise. The
// rows of one partition commit together, all or none; rows of different
// partitions commit independently, so a failed Commit may have committed
// other partitions' rows (an identical retry of the whole is answered from
// them). A payload object of an append refused before anything was
// written is deleted.
func (t *Table) Commit(ctx context.Context, items []*Staged) ([]AppendResult, error) {
	if err := t.checkLive(); err != nil {
		return nil, err
	}
	if len(items) > t.db.cfg.SegmentMaxRows {
		return nil, fmt.Errorf("%w: %d rows exceeds %d", ErrTooLarge, len(items), t.db.cfg.SegmentMaxRows)
	}
	for i, st := range items {
		if inc, ok := t.tableKeys.ParseIncarnation(st.Record.PayloadRef); ok && inc != t.keys.Name() {
			// Staged in another incarnation of the table: one of the two
			// processes has not noticed a drop yet. If this handle is the
			// stale one, the append belongs to the current incarnation.
			nt, _, err := t.db.tableNow(ctx, t.tableKeys)
			if err == nil && nt.keys.Name() == inc {
				return nt.Commit(ctx, items)
			}
			if err != nil && !errors.Is(err, ErrTableNotFound) {
				return nil, err
			}
			return nil, &BatchError{Index: i, Err: fmt.Errorf("%w: %s was dropped while the append was forwarded", ErrTableNotFound, t.Name())}
		}
		if err := t.checkStaged(ctx, st); err != nil {
			return nil, &BatchError{Index: i, Err: err}
		}
	}
	var shards []string
	groups := map[string][]int{}
	for i, st := range items {
		s := t.PartitionOf(st.Record.ID)
		if _, ok := groups[s]; !ok {
			shards = append(shards, s)
		}
		groups[s] = append(groups[s], i)
	}
	if len(shards) > 1 {
		// Checked as a whole first, so a conflict with a stored row, or a
		// partition's merge backlog, refuses the whole batch; only an
		// append racing it can leave one partition's rows committed and
		// another's refused.
		if err := t.Check(ctx, items); err != nil {
			t.discard(ctx, items)
			return nil, err
		}
	}
	out := make([]AppendResult, len(items))
	errs := make([]error, len(shards))
	_ = sched.Parallel(ctx, t.db.rt, len(shards), 16, func(ctx context.Context, gi int) error {
		errs[gi] = t.commitGroup(ctx, shards[gi], items, groups[shards[gi]], out)
		return nil
	})
	// The first failing item's error (with its index) is the answer.
	var first *BatchError
	for _, err := range errs {
		var be *BatchError
		if err != nil && errors.As(err, &be) && (first == nil || be.Index < first.Index) {
			first = be
		}
	}
	if first != nil {
		return nil, first
	}
	return out, nil
}

// Check answers what committing items would answer for the rows already
// visible and for the merge backlog, without writing: a conflict with a
// stored row (a BatchError naming the item) or ErrBackpressure. A process
// that splits a batch among partition owners checks it whole first.
func (t *Table) Check(ctx context.Context, items []*Staged) error {
	recs := make([]*Record, len(items))
	for i, st := range items {
		recs[i] = &st.Record
	}
	existing, snap, err := t.lookupMany(ctx, recs)
	if err != nil {
		return err
	}
	for i, st := range items {
		if existing[i] == nil {
			continue
		}
		if !rowfile.SameContent(existing[i], &st.Record) {
			return &BatchError{Index: i, Err: fmt.Errorf("%w: %q", ErrConflict, st.Record.ID)}
		}
		if st.GivenAt && !existing[i].CreatedAt.Equal(st.Record.CreatedAt) {
			return &BatchError{Index: i, Err: fmt.Errorf("%w: %q exists with created_at %s, not %s", ErrConflict,
				st.Record.ID, formatAt(existing[i].CreatedAt), formatAt(st.Record.CreatedAt))}
		}
	}
	for i, st := range items {
		if err := t.backpressure(snap, t.PartitionOf(st.Record.ID)); err != nil {
			return &BatchError{Index: i, Err: err}
		}
	}
	return nil
}

// commitGroup commits the items at idx, all of partition shard, as one
// request of its writer: deduplicated (an id twice in the batch is one
// row, or a conflict), checked and written in one segment.
func (t *Table) commitGroup(ctx context.Context, shard string, items []*Staged, idx []int, out []AppendResult) error {
	var recs []*Record
	var given []bool
	var pos []int // index in recs of each of idx
	first := map[string]int{}
	uploaded := t.db.rt.Now()
	for _, i := range idx {
		st := items[i]
		rec := &st.Record
		if j, ok := first[rec.ID]; ok {
			prev := recs[j]
			if !rowfile.SameContent(prev, rec) {
				t.discard(ctx, itemsAt(items, idx))
				return &BatchError{Index: i, Err: fmt.Errorf("%w: %q repeated in the batch", ErrConflict, rec.ID)}
			}
			if st.GivenAt && !rec.CreatedAt.Equal(prev.CreatedAt) {
				t.discard(ctx, itemsAt(items, idx))
				return &BatchError{Index: i, Err: fmt.Errorf("%w: %q repeated in the batch with created_at %s, not %s", ErrConflict,
					rec.ID, formatAt(rec.CreatedAt), formatAt(prev.CreatedAt))}
			}
			pos = append(pos, j)
			continue
		}
		first[rec.ID] = len(recs)
		pos = append(pos, len(recs))
		recs = append(recs, rec)
		given = append(given, st.GivenAt)
		if st.Uploaded.Before(uploaded) {
			uploaded = st.Uploaded
		}
	}
	var res []AppendResult
	var queued bool
	var err error
	for attempt := 0; ; attempt++ {
		var w *shardWriter
		if w, err = t.writerFor(ctx, shard); err != nil {
			t.discard(ctx, itemsAt(items, idx))
			return &BatchError{Index: idx[0], Err: err}
		}
		res, queued, err = w.submit(ctx, recs, given, uploaded)
		// A writer handed over (or closed) before it took the rows: they
		// go to the partition's writer now, here or, NotOwnerError, not.
		if err != nil && !queued && errors.Is(err, ErrClosed) && attempt < 2 && t.partitions > 0 {
			continue
		}
		break
	}
	if err != nil {
		if !queued {
			t.discard(ctx, itemsAt(items, idx))
		}
		var be *BatchError
		if errors.As(err, &be) {
			for k, p := range pos {
				if p == be.Index {
					return &BatchError{Index: idx[k], Err: be.Err}
				}
			}
		}
		return &BatchError{Index: idx[0], Err: err}
	}
	for k, i := range idx {
		j := pos[k]
		if recs[j] != &items[i].Record {
			// The batch's second copy of an id: its payload is unused.
			out[i] = AppendResult{Record: res[j].Record, Created: false}
			t.discardPayload(ctx, &items[i].Record)
			continue
		}
		out[i] = res[j]
		if !res[j].Created {
			t.discardPayload(ctx, &items[i].Record) // the existing row has its own payload
		}
	}
	return nil
}

func itemsAt(items []*Staged, idx []int) []*Staged {
	out := make([]*Staged, len(idx))
	for k, i := range idx {
		out[k] = items[i]
	}
	return out
}

// checkStaged validates a staged append before it is committed: it may
// come from another process, so its payload must be what it claims, and
// its object one of this incarnation's payloads.
func (t *Table) checkStaged(ctx context.Context, st *Staged) error {
	rec := &st.Record
	if err := rec.Validate(); err != nil {
		return err
	}
	if rec.PayloadRef != "" {
		if !t.keys.IsPayload(rec.PayloadRef) {
			return fmt.Errorf("%w: payload object %q is not one of %s's", ErrInvalid, rec.PayloadRef, t.Name())
		}
		if rec.Payload != nil {
			return fmt.Errorf("%w: a payload both inline and an object", ErrInvalid)
		}
		// A row must never name a payload that is not there (it was large:
		// one HEAD is little next to its upload).
		a, err := t.db.store.Head(ctx, rec.PayloadRef)
		if errors.Is(err, objstore.ErrNotFound) {
			// A drop deletes its incarnation's objects: then that is
			// the answer, not the staged record.
			if _, rerr := t.liveRegistry(ctx); rerr != nil {
				return rerr
			}
			return fmt.Errorf("%w: payload object %q does not exist", ErrInvalid, rec.PayloadRef)
		}
		if err != nil {
			return err
		}
		if a.Size != rec.PayloadSize {
			return fmt.Errorf("%w: payload object %q has %d bytes, the record says %d", ErrInvalid, rec.PayloadRef, a.Size, rec.PayloadSize)
		}
		return nil
	}
	if int64(len(rec.Payload)) != rec.PayloadSize || sha256.Sum256(rec.Payload) != rec.PayloadSHA256 {
		return fmt.Errorf("%w: inline payload does not match its size and checksum", ErrInvalid)
	}
	if rec.PayloadSize > t.db.cfg.InlineMax {
		return fmt.Errorf("%w: inline payload of %d bytes exceeds %d", ErrInvalid, rec.PayloadSize, t.db.cfg.InlineMax)
	}
	return nil
}

// BatchItem is one row of a batch append, its payload in memory (batches
// arrive as NDJSON or Arrow, so the caller holds them anyway).
type BatchItem struct {
	Record  Record
	Payload []byte
}

// BatchError names the item that failed a batch.
type BatchError struct {
	Index int
	Err   error
}

func (e *BatchError) Error() string { return fmt.Sprintf("item %d: %v", e.Index, e.Err) }
func (e *BatchError) Unwrap() error { return e.Err }

// AppendBatch writes items: validated first (nothing is written if one is
// invalid), then committed per partition, all or none within a partition
// (a table without partitions is one: the whole batch, in one segment). An
// identical retry of an item reports Created=false for it. In a
// partitioned table every item's partition must be this process's (see
// Commit).
func (t *Table) AppendBatch(ctx context.Context, items []BatchItem) ([]AppendResult, error) {
	cfg := t.db.cfg
	if err := t.checkLive(); err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, nil
	}
	if len(items) > cfg.SegmentMaxRows {
		return nil, fmt.Errorf("%w: batch of %d rows exceeds %d", ErrTooLarge, len(items), cfg.SegmentMaxRows)
	}
	first := map[string]int{}
	prev := make([]Record, 0, len(items))
	for i := range items {
		rec := items[i].Record
		if rec.ContentType == "" {
			rec.ContentType = "application/octet-stream"
		}
		rec.Payload, rec.PayloadRef = nil, ""
		rec.PayloadSize = int64(len(items[i].Payload))
		if rec.CreatedAt.IsZero() {
			rec.CreatedAt = t.db.rt.Now()
		}
		rec.CreatedAt = rec.CreatedAt.UTC().Truncate(time.Microsecond)
		if err := rec.Validate(); err != nil {
			return nil, &BatchError{Index: i, Err: err}
		}
		if rec.PayloadSize > cfg.MaxPayload {
			return nil, &BatchError{Index: i, Err: fmt.Errorf("%w: %d bytes", ErrTooLarge, rec.PayloadSize)}
		}
		rec.PayloadSHA256 = sha256.Sum256(items[i].Payload)
		if j, ok := first[rec.ID]; ok {
			if !rowfile.SameContent(&prev[j], &rec) {
				return nil, &BatchError{Index: i, Err: fmt.Errorf("%w: %q repeated in the batch", ErrConflict, rec.ID)}
			}
			if !items[i].Record.CreatedAt.IsZero() && !rec.CreatedAt.Equal(prev[j].CreatedAt) {
				return nil, &BatchError{Index: i, Err: fmt.Errorf("%w: %q repeated in the batch with created_at %s, not %s", ErrConflict,
					rec.ID, formatAt(rec.CreatedAt), formatAt(prev[j].CreatedAt))}
			}
		} else {
			first[rec.ID] = i
		}
		prev = append(prev, rec)
		if t.partitions > 0 {
			if o, err := t.Owner(ctx, rec.ID); err != nil || !o.Self {
				if err == nil {
					err = &NotOwnerError{Owner: o}
				}
				return nil, &BatchError{Index: i, Err: t.noteGone(err)}
			}
		}
	}
	staged := make([]*Staged, len(items))
	nt := t
	for i := range items {
		st, at, err := nt.Stage(ctx, items[i].Record, bytes.NewReader(items[i].Payload), int64(len(items[i].Payload)))
		if err == nil && at != nt {
			if i > 0 {
				// Dropped and created again while staging: start over there.
				t.discard(ctx, staged[:i])
				return at.AppendBatch(ctx, items)
			}
			nt = at
		}
		if err != nil {
			nt.discard(ctx, staged[:i])
			return nil, &BatchError{Index: i, Err: err}
		}
		staged[i] = st
	}
	return nt.Commit(ctx, staged)
}

// discard deletes the payload objects of staged appends that were not
// committed (best effort: the orphan sweep removes what this misses).
func (t *Table) discard(ctx context.Context, items []*Staged) {
	for _, st := range items {
		if st != nil {
			t.discardPayload(ctx, &st.Record)
		}
	}
}

// stream reads the payload, inline or into its own object, and fills in
// size and checksum.
func (t *Table) stream(ctx context.Context, rec *Record, r io.Reader, size int64) error {
	cfg := t.db.cfg
	if r == nil {
		r = bytes.NewReader(nil)
	}
	h := sha256.New()
	limited := &maxReader{r: r, left: cfg.MaxPayload}
	head := make([]byte, 0, min(max(size, 0), cfg.InlineMax)+1)
	head, err := readUpTo(limited, head, cfg.InlineMax+1)
	if err != nil {
		return err
	}
	if int64(len(head)) <= cfg.InlineMax {
		h.Write(head)
		rec.Payload, rec.PayloadSize = head, int64(len(head))
	} else {
		key, err := t.keys.Payload(t.PartitionOf(rec.ID), 0, t.db.randomName())
		if err != nil {
			return err
		}
		counted := &countingReader{r: io.TeeReader(io.MultiReader(bytes.NewReader(head), limited), h)}
		if _, err := t.db.store.Put(ctx, key, counted, objstore.PutOptions{Size: size, ContentType: rec.ContentType}); err != nil {
			_ = t.db.store.Delete(context.WithoutCancel(ctx), key)
			if limited.over {
				return fmt.Errorf("%w: exceeds %d bytes", ErrTooLarge, cfg.MaxPayload)
			}
			return fmt.Errorf("uploading payload: %w", err)
		}
		rec.PayloadRef, rec.PayloadSize = key, counted.n
	}
	if size >= 0 && rec.PayloadSize != size {
		t.discardPayload(ctx, rec)
		return fmt.Errorf("%w: payload is %d bytes, %d declared", ErrInvalid, rec.PayloadSize, size)
	}
	copy(rec.PayloadSHA256[:], h.Sum(nil))
	return nil
}

func (t *Table) discardPayload(ctx context.Context, rec *Record) {
	if rec.PayloadRef != "" {
		ctx, cancel := t.db.rt.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		// Best effort; the orphan sweep removes what this misses.
		_ = t.db.store.Delete(ctx, rec.PayloadRef)
	}
}

func readUpTo(r io.Reader, buf []byte, n int64) ([]byte, error) {
	for int64(len(buf)) < n {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m, err := r.Read(buf[len(buf):min(int64(cap(buf)), n)])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
	return buf, nil
}

// maxReader fails once more than left bytes were read.
type maxReader struct {
	r    io.Reader
	left int64
	over bool
}

func (m *maxReader) Read(p []byte) (int, error) {
	if m.left < 0 {
		m.over = true
		return 0, fmt.Errorf("%w", ErrTooLarge)
	}
	if int64(len(p)) > m.left+1 {
		p = p[:m.left+1]
	}
	n, err := m.r.Read(p)
	m.left -= int64(n)
	if m.left < 0 {
		m.over = true
		return n, fmt.Errorf("%w: payload exceeds the limit", ErrTooLarge)
	}
	return n, err
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

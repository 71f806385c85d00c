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
func (t *Table) Append(ctx context.Context, rec Record, r io.Reader, size int64) (AppendResult, error) {
	cfg := t.db.cfg
	if err := t.checkLive(); err != nil {
		return AppendResult{}, err
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
		return AppendResult{}, err
	}
	if size > cfg.MaxPayload {
		return AppendResult{}, fmt.Errorf("%w: %d bytes exceeds %d", ErrTooLarge, size, cfg.MaxPayload)
	}
	w, err := t.shardWriter(ctx)
	if err == nil && t.fresh() == nil {
		// Learn of a drop elsewhere before the body is read, while the
		// append can still move to the table's new incarnation.
		_, err = t.refreshed(ctx, t.refresh.ticket(), false)
	}
	// On the table's new incarnation the append starts over: nothing of the
	// body was read yet.
	moved := false
	if res, err := onSuccessor(ctx, t, AppendResult{}, err, func(nt *Table) (AppendResult, error) {
		moved = true
		rec.CreatedAt = givenAt // stamped there, if it was not given
		return nt.Append(ctx, rec, r, size)
	}); moved || err != nil {
		return res, err
	}
	started := t.db.rt.Now()
	if err := w.stream(ctx, &rec, r, size); err != nil {
		return AppendResult{}, err
	}
	if err := t.db.point(ctx, hookAfterPayload); err != nil {
		return AppendResult{}, err // a crash here leaves an orphan payload
	}
	res, queued, err := w.submit(ctx, []*Record{&rec}, []bool{!givenAt.IsZero()}, started)
	var be *BatchError
	if errors.As(err, &be) {
		err = be.Err
	}
	if err != nil {
		if !queued {
			w.discardPayload(&rec)
		}
		return AppendResult{}, err
	}
	if !res[0].Created {
		w.discardPayload(&rec) // the existing row has its own payload
	}
	return res[0], nil
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

// AppendBatch writes all items or none: they are validated and checked
// against existing rows first, then committed in one segment, one atomic
// put. An identical retry of an item reports Created=false for it.
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
	recs := make([]*Record, len(items))
	givenAt := make([]bool, len(items))
	first := map[string]int{}
	var dupOf []int // index in recs of the first item with the same id, or -1
	for i := range items {
		rec := items[i].Record
		givenAt[i] = !rec.CreatedAt.IsZero()
		if rec.CreatedAt.IsZero() {
			rec.CreatedAt = t.db.rt.Now()
		}
		rec.CreatedAt = rec.CreatedAt.UTC().Truncate(time.Microsecond)
		if rec.ContentType == "" {
			rec.ContentType = "application/octet-stream"
		}
		rec.Payload, rec.PayloadRef = nil, ""
		rec.PayloadSize = int64(len(items[i].Payload))
		rec.PayloadSHA256 = sha256.Sum256(items[i].Payload)
		if err := rec.Validate(); err != nil {
			return nil, &BatchError{Index: i, Err: err}
		}
		if rec.PayloadSize > cfg.MaxPayload {
			return nil, &BatchError{Index: i, Err: fmt.Errorf("%w: %d bytes", ErrTooLarge, rec.PayloadSize)}
		}
		recs[i] = &rec
		if j, ok := first[rec.ID]; ok {
			if !rowfile.SameContent(recs[j], &rec) {
				return nil, &BatchError{Index: i, Err: fmt.Errorf("%w: %q repeated in the batch", ErrConflict, rec.ID)}
			}
			if givenAt[i] && !rec.CreatedAt.Equal(recs[j].CreatedAt) {
				return nil, &BatchError{Index: i, Err: fmt.Errorf("%w: %q repeated in the batch with created_at %s, not %s", ErrConflict,
					rec.ID, formatAt(rec.CreatedAt), formatAt(recs[j].CreatedAt))}
			}
			dupOf = append(dupOf, j)
			continue
		}
		first[rec.ID] = i
		dupOf = append(dupOf, -1)
	}
	w, err := t.shardWriter(ctx)
	moved := false
	if res, err := onSuccessor(ctx, t, nil, err, func(nt *Table) ([]AppendResult, error) {
		moved = true
		return nt.AppendBatch(ctx, items)
	}); moved || err != nil {
		return res, err
	}
	var unique []*Record
	var uniqueGiven []bool
	var pos []int
	started := t.db.rt.Now()
	for i, rec := range recs {
		if dupOf[i] >= 0 {
			continue
		}
		if err := w.stream(ctx, rec, bytes.NewReader(items[i].Payload), int64(len(items[i].Payload))); err != nil {
			w.discardAll(unique)
			return nil, &BatchError{Index: i, Err: err}
		}
		unique = append(unique, rec)
		uniqueGiven = append(uniqueGiven, givenAt[i])
		pos = append(pos, i)
	}
	res, queued, err := w.submit(ctx, unique, uniqueGiven, started)
	if err != nil {
		if !queued {
			w.discardAll(unique)
		}
		var be *BatchError
		if errors.As(err, &be) {
			be.Index = pos[be.Index]
		}
		return nil, err
	}
	out := make([]AppendResult, len(items))
	for j, r := range res {
		out[pos[j]] = r
		if !r.Created {
			w.discardPayload(unique[j])
		}
	}
	for i, j := range dupOf {
		if j >= 0 {
			out[i] = AppendResult{Record: out[j].Record, Created: false}
		}
	}
	return out, nil
}

func (w *shardWriter) discardAll(recs []*Record) {
	for _, r := range recs {
		w.discardPayload(r)
	}
}

// stream reads the payload, inline or into its own object, and fills in
// size and checksum.
func (w *shardWriter) stream(ctx context.Context, rec *Record, r io.Reader, size int64) error {
	cfg := w.t.db.cfg
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
		key, err := w.t.keys.Payload(w.shard, w.currentGen(), w.t.db.randomName())
		if err != nil {
			return err
		}
		counted := &countingReader{r: io.TeeReader(io.MultiReader(bytes.NewReader(head), limited), h)}
		if _, err := w.t.db.store.Put(ctx, key, counted, objstore.PutOptions{Size: size, ContentType: rec.ContentType}); err != nil {
			_ = w.t.db.store.Delete(context.WithoutCancel(ctx), key)
			if limited.over {
				return fmt.Errorf("%w: exceeds %d bytes", ErrTooLarge, cfg.MaxPayload)
			}
			return fmt.Errorf("uploading payload: %w", err)
		}
		rec.PayloadRef, rec.PayloadSize = key, counted.n
	}
	if size >= 0 && rec.PayloadSize != size {
		w.discardPayload(rec)
		return fmt.Errorf("%w: payload is %d bytes, %d declared", ErrInvalid, rec.PayloadSize, size)
	}
	copy(rec.PayloadSHA256[:], h.Sum(nil))
	return nil
}

func (w *shardWriter) discardPayload(rec *Record) {
	if rec.PayloadRef != "" {
		ctx, cancel := w.t.db.rt.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Best effort; the orphan sweep removes what this misses.
		_ = w.t.db.store.Delete(ctx, rec.PayloadRef)
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

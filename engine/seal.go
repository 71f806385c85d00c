package engine

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rollstore/rollstore/engine/keyspace"
	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
)

// sealRecord describes a sealed generation: its segments (1..n, n being
// the count its head was sealed at) and their row layouts, so that readers
// and the merge need one GET for the whole generation. It is derived data:
// the head decided the membership; anyone can rebuild the record from the
// segments, and any two builds are equivalent.
type sealRecord struct {
	Shard    string    `json:"shard"`
	Gen      uint64    `json:"generation"`
	SealedAt time.Time `json:"sealed_at"`
	// FirstRow is the offset of the generation's first row in the
	// partition's feed (the head's GenStart).
	FirstRow uint64          `json:"first_row"`
	Segments []sealedSegment `json:"segments"`
}

type sealedSegment struct {
	Seq    uint64
	Size   int64
	Layout *rowfile.Layout
}

type sealedSegmentJSON struct {
	Seq    uint64 `json:"seq"`
	Size   int64  `json:"size"`
	Layout string `json:"layout"` // base64 of the rowfile index format
}

func (s sealedSegment) MarshalJSON() ([]byte, error) {
	return json.Marshal(sealedSegmentJSON{Seq: s.Seq, Size: s.Size, Layout: base64.StdEncoding.EncodeToString(rowfile.MarshalLayout(s.Layout))})
}

func (s *sealedSegment) UnmarshalJSON(b []byte) error {
	var j sealedSegmentJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	raw, err := base64.StdEncoding.DecodeString(j.Layout)
	if err != nil {
		return fmt.Errorf("segment %d layout: %w", j.Seq, err)
	}
	lay, err := rowfile.UnmarshalLayout(raw)
	if err != nil {
		return fmt.Errorf("segment %d layout: %w", j.Seq, err)
	}
	*s = sealedSegment{Seq: j.Seq, Size: j.Size, Layout: lay}
	return nil
}

func (r *sealRecord) bytes() int64 {
	var n int64
	for _, s := range r.Segments {
		n += s.Size
	}
	return n
}

func (r *sealRecord) memSize() int64 {
	n := int64(128)
	for _, s := range r.Segments {
		n += s.Layout.MemSize() + 32
	}
	return n
}

// writeSeal stores the seal record of a generation whose head is sealed
// with len(segs) segments. An existing record is the same generation's
// (the head fixed its membership), so losing the create is success.
func (t *Table) writeSeal(ctx context.Context, shard string, h head, segs []sealedSegment) (*sealRecord, error) {
	gen := h.Gen
	rec := &sealRecord{Shard: shard, Gen: gen, SealedAt: t.db.rt.Now().UTC(), FirstRow: h.GenStart, Segments: segs}
	if rec.Segments == nil {
		rec.Segments = []sealedSegment{}
	}
	if err := t.db.point(ctx, hookBeforeSeal); err != nil {
		return nil, err
	}
	body, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	key := t.keys.Seal(shard, gen)
	for attempt := 0; ; attempt++ {
		_, err = t.db.store.Put(ctx, key, bytes.NewReader(body),
			objstore.PutOptions{IfNotExists: true, Size: int64(len(body)), ContentType: "application/json"})
		if err == nil || errors.Is(err, objstore.ErrPrecondition) {
			break
		}
		if !retryable(err) || attempt == 3 {
			return nil, fmt.Errorf("writing seal record %s: %w", key, err)
		}
	}
	if err == nil {
		t.db.seals.Add(key, rec, rec.memSize())
		t.db.stats.Seals.Add(1)
		return rec, nil
	}
	// Another writer of the record (a new owner, the merger) was first.
	// Any record of a sealed generation is equivalent: derived from the
	// head's count. Gone again means the generation was merged and
	// reclaimed meanwhile, which completes the seal just as well.
	got, err := t.loadSeal(ctx, shard, gen)
	if errors.Is(err, objstore.ErrNotFound) {
		return rec, nil
	}
	return got, err
}

func (t *Table) loadSeal(ctx context.Context, shard string, gen uint64) (*sealRecord, error) {
	key := t.keys.Seal(shard, gen)
	return t.db.seals.GetOrLoad(ctx, key, func(ctx context.Context) (*sealRecord, int64, error) {
		data, _, err := objstore.ReadAll(ctx, t.db.store, key, t.db.cfg.MaxManifestBytes)
		if err != nil {
			return nil, 0, err
		}
		var s sealRecord
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, 0, fmt.Errorf("%w: %s: %v", ErrCorruptObject, key, err)
		}
		if s.Shard != shard || s.Gen != gen {
			return nil, 0, fmt.Errorf("%w: %s names %s/%d", ErrCorruptObject, key, s.Shard, s.Gen)
		}
		for i, seg := range s.Segments {
			if seg.Seq != uint64(i+1) {
				return nil, 0, fmt.Errorf("%w: %s: segment %d listed at position %d", ErrCorruptObject, key, seg.Seq, i)
			}
		}
		return &s, s.memSize(), nil
	})
}

// sealOf returns the seal record of the generation a sealed head h
// counts, writing it from the segments' own headers if nobody has yet (a
// writer that stopped between sealing its head and writing the record).
func (t *Table) sealOf(ctx context.Context, shard string, h head) (*sealRecord, error) {
	rec, err := t.loadSeal(ctx, shard, h.Gen)
	if !errors.Is(err, objstore.ErrNotFound) {
		return rec, err
	}
	segs, err := t.segmentLayouts(ctx, shard, h.Gen, 1, h.Segs)
	if err != nil {
		return nil, err
	}
	return t.writeSeal(ctx, shard, h, segs)
}

// segmentLayouts reads the layouts of segments from..to of a generation
// from their headers, in parallel.
func (t *Table) segmentLayouts(ctx context.Context, shard string, gen, from, to uint64) ([]sealedSegment, error) {
	if to < from {
		return nil, nil
	}
	out := make([]sealedSegment, to-from+1)
	err := sched.Parallel(ctx, t.db.rt, len(out), 32, func(ctx context.Context, i int) error {
		seq := from + uint64(i)
		lay, err := t.segmentLayout(ctx, t.keys.Segment(shard, gen, seq))
		if err != nil {
			return err
		}
		out[i] = sealedSegment{Seq: seq, Size: lay.Size, Layout: lay}
		return nil
	})
	return out, err
}

// segmentLayout reads a segment's layout from the start of the file: one
// ranged GET, two for a header larger than the prefetch. The size is an
// upper estimate from the last batch and the header's length; the merge
// reads the whole file anyway.
func (t *Table) segmentLayout(ctx context.Context, key string) (*rowfile.Layout, error) {
	return t.db.layouts.GetOrLoad(ctx, key, func(ctx context.Context) (*rowfile.Layout, int64, error) {
		prefix, err := readRange(ctx, t.db.store, key, 0, rowfile.HeaderPrefetch)
		if err != nil {
			return nil, 0, err
		}
		need, err := rowfile.HeaderSize(prefix)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", key, err)
		}
		if need > int64(len(prefix)) {
			if need > t.db.cfg.SegmentMaxBytes+(1<<20) {
				return nil, 0, fmt.Errorf("%w: %s: header of %d bytes", ErrCorruptObject, key, need)
			}
			rest, err := readRange(ctx, t.db.store, key, int64(len(prefix)), need-int64(len(prefix)))
			if err != nil {
				return nil, 0, err
			}
			prefix = append(prefix, rest...)
		}
		lay, err := rowfile.ReadHeader(prefix, 0)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", key, err)
		}
		var end int64
		for _, b := range lay.Batches {
			end = max(end, b.Offset+b.Length)
		}
		// The footer repeats the schema, embedded layout included.
		lay.Size = end + need + 4096
		return lay, lay.MemSize(), nil
	})
}

// readRange reads up to n bytes from off. A short read from a body cut off
// by its object's deletion keeps ErrNotFound visible.
func readRange(ctx context.Context, store objstore.Bucket, key string, off, n int64) ([]byte, error) {
	rc, err := store.GetRange(ctx, key, off, n)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, n))
	if err != nil {
		return nil, readErr(key, err)
	}
	return data, nil
}

// readErr keeps ErrNotFound visible through a short read: a body cut off
// because its object vanished is the retryable case, not corruption.
func readErr(key string, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: short read: %w", key, err)
	}
	return err
}

// segmentKeys lists every segment key of a generation sealed at n segments.
func segmentKeys(lay keyspace.Inc, shard string, gen, n uint64) []string {
	keys := make([]string, 0, n)
	for seq := uint64(1); seq <= n; seq++ {
		keys = append(keys, lay.Segment(shard, gen, seq))
	}
	return keys
}

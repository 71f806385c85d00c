package engine

import (
	"container/heap"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/objstore"
)

// rowIter walks a snapshot's rows in id order: a k-way merge over the
// base files' and pending segments' layouts (each sorted by id). An id
// present in several places is yielded once, from the place reads use:
// the base first, then the WAL in (shard, generation, segment) order.
type rowIter struct {
	h    cursorHeap
	last string
	any  bool
}

type cursor struct {
	rows    []rowfile.Loc
	i       int
	prio    int
	key     string
	lay     *rowfile.Layout
	base    bool
	version uint64
	shard   string
	gen     uint64
}

type cursorHeap []*cursor

func (h cursorHeap) Len() int { return len(h) }
func (h cursorHeap) Less(i, j int) bool {
	a, b := h[i].rows[h[i].i].ID, h[j].rows[h[j].i].ID
	if a != b {
		return a < b
	}
	return h[i].prio < h[j].prio
}
func (h cursorHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *cursorHeap) Push(x any)   { *h = append(*h, x.(*cursor)) }
func (h *cursorHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func newRowIter(s *snapshot, after string, withWAL bool) *rowIter {
	return newRowIterFrom(s, after, "", withWAL)
}

// newRowIterFrom starts at the first id greater than after and not less
// than from: one binary search per file or segment.
func newRowIterFrom(s *snapshot, after, from string, withWAL bool) *rowIter {
	it := &rowIter{}
	add := func(c *cursor) {
		c.rows = c.lay.Rows
		c.i = sort.Search(len(c.rows), func(i int) bool { return c.rows[i].ID > after && c.rows[i].ID >= from })
		if c.i < len(c.rows) {
			it.h = append(it.h, c)
		}
	}
	prio := 0
	for _, f := range s.base.files {
		add(&cursor{prio: prio, key: f.key, lay: f.layout, base: true, version: s.base.m.Version})
		prio++
	}
	if withWAL {
		for _, name := range s.names {
			for _, g := range s.shards[name].gens {
				for _, seg := range g.segs {
					add(&cursor{prio: prio, key: seg.key, lay: seg.layout, shard: name, gen: g.gen})
					prio++
				}
			}
		}
	}
	heap.Init(&it.h)
	return it
}

// next returns the next row's location, or false at the end.
func (it *rowIter) next() (location, bool) {
	for it.h.Len() > 0 {
		c := it.h[0]
		l := c.rows[c.i]
		c.i++
		if c.i < len(c.rows) {
			heap.Fix(&it.h, 0)
		} else {
			heap.Pop(&it.h)
		}
		if it.any && l.ID == it.last {
			continue // a duplicate from a lower-priority place
		}
		it.last, it.any = l.ID, true
		return location{key: c.key, batch: c.lay.Batches[l.Batch], loc: l, inBase: c.base, version: c.version, shard: c.shard, gen: c.gen}, true
	}
	return location{}, false
}

// ListOptions filter and page a listing.
type ListOptions struct {
	RolloutID     string
	ProblemID     string
	PolicyVersion string
	// Limit is the page size (default 100; larger than 1000 is lowered to
	// 1000).
	Limit int
	// PageToken continues a previous listing.
	PageToken string
	// Version pins the listing to a base version.
	Version uint64
	// Prefix keeps the ids that start with it. The listing seeks to the
	// prefix and ends where the ids pass it, so its cost is that of the
	// rows under the prefix, not of the table.
	Prefix string
	// StartAfter keeps the ids greater than it (byte-wise, the listing's
	// order): the listing seeks there.
	StartAfter string
}

// ListPage is one page; an empty NextPageToken means the end.
type ListPage struct {
	Records       []*Record `json:"records"`
	NextPageToken string    `json:"next_page_token,omitempty"`
}

// maxExamined bounds the rows one page may look at, so a selective filter
// over a large table returns short pages instead of scanning it all.
const maxExamined = 10000

// List returns rows in id order, filtered, one page at a time. The page
// token is the last id examined, so pages are stable under concurrent
// appends and merges: rows are immutable and ordered by id.
func (t *Table) List(ctx context.Context, opts ListOptions) (ListPage, error) {
	page, err := t.list(ctx, opts)
	return onSuccessor(ctx, t, page, err, func(nt *Table) (ListPage, error) { return nt.list(ctx, opts) })
}

func (t *Table) list(ctx context.Context, opts ListOptions) (ListPage, error) {
	if opts.Limit <= 0 {
		opts.Limit = 100
	}
	if opts.Limit > 1000 {
		opts.Limit = 1000
	}
	after, err := decodePageToken(opts.PageToken)
	if err != nil {
		return ListPage{}, err
	}
	after = max(after, opts.StartAfter)
	var causes []error // every attempt's failure, reported together
	for attempt := 0; ; attempt++ {
		s, withWAL, err := t.listSnapshot(ctx, opts.Version, attempt > 0)
		if err != nil {
			return ListPage{}, err
		}
		if err := t.db.point(ctx, hookListSnapshot); err != nil {
			return ListPage{}, err
		}
		page, err := t.listPage(ctx, s, after, withWAL, opts)
		if errors.Is(err, objstore.ErrNotFound) && opts.Version > 0 {
			return ListPage{}, fmt.Errorf("%w: version %d: %w", ErrVersionGone, opts.Version, err)
		}
		if !errors.Is(err, objstore.ErrNotFound) {
			return page, err
		}
		// A generation was reclaimed under us: its rows are in a newer
		// base, which the next attempt loads. Bounded, as every read.
		causes = append(causes, err)
		if attempt >= maxRetries {
			return ListPage{}, t.missing(ctx, fmt.Errorf("%w: listing %s after %d attempts: %w", ErrMissingFile, t.Name(), attempt+1, errors.Join(causes...)))
		}
		t.db.stats.ReadRetries.Add(1)
	}
}

func (t *Table) listSnapshot(ctx context.Context, version uint64, probe bool) (*snapshot, bool, error) {
	if err := t.checkLive(); err != nil {
		return nil, false, err
	}
	if version > 0 {
		s, err := t.pinnedSnapshot(ctx, version)
		return s, false, err
	}
	s, err := t.refreshed(ctx, t.refresh.ticket(), probe)
	return s, true, err
}

func (t *Table) listPage(ctx context.Context, s *snapshot, after string, withWAL bool, opts ListOptions) (ListPage, error) {
	page := ListPage{Records: []*Record{}}
	it := newRowIterFrom(s, after, opts.Prefix, withWAL)
	// next is the next row under the prefix: the ids come in order from
	// the prefix on, so the first that does not start with it ends the
	// listing.
	next := func() (location, bool) {
		loc, ok := it.next()
		if !ok || !strings.HasPrefix(loc.loc.ID, opts.Prefix) {
			return location{}, false
		}
		return loc, true
	}
	for examined := 0; ; examined++ {
		loc, ok := next()
		if !ok {
			return page, nil
		}
		if examined == maxExamined {
			page.NextPageToken = encodePageToken(after)
			return page, nil
		}
		rec, err := t.readRow(ctx, loc)
		if err != nil {
			return ListPage{}, err
		}
		after = rec.ID
		if (opts.RolloutID == "" || rec.RolloutID == opts.RolloutID) &&
			(opts.ProblemID == "" || rec.ProblemID == opts.ProblemID) &&
			(opts.PolicyVersion == "" || rec.PolicyVersion == opts.PolicyVersion) {
			page.Records = append(page.Records, rec)
			if len(page.Records) == opts.Limit {
				if _, more := next(); more {
					page.NextPageToken = encodePageToken(after)
				}
				return page, nil
			}
		}
	}
}

func encodePageToken(after string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("a:" + after))
}

func decodePageToken(tok string) (string, error) {
	if tok == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) < 2 || string(b[:2]) != "a:" {
		return "", fmt.Errorf("%w: malformed page token", ErrInvalid)
	}
	return string(b[2:]), nil
}

// ScanOptions select a scan.
type ScanOptions struct {
	// Version pins the scan to a base version; 0 scans the latest view
	// (base and pending generations).
	Version uint64
	// WithPayloads includes payload bytes. External payloads larger than
	// MaxScanPayload are left out (payload null, payload_ref set): fetch
	// them by id.
	WithPayloads bool
}

// MaxScanPayload bounds one external payload inlined into a scan.
const MaxScanPayload = 64 << 20

// scanBatchRows is the number of rows per exported record batch;
// scanBatchReserve what a scan reserves from the in-flight budget for them.
const (
	scanBatchRows    = 1024
	scanBatchReserve = 8 << 20
)

// Scan writes the table's rows as an Arrow IPC stream (schema
// rowfile.Schema), in id order.
func (t *Table) Scan(ctx context.Context, w io.Writer, opts ScanOptions) error {
	cw := &countingWriter{w: w}
	err := t.scan(ctx, cw, opts)
	if cw.n > 0 {
		return err // part of the stream is written: no other incarnation can finish it
	}
	_, err = onSuccessor(ctx, t, struct{}{}, err, func(nt *Table) (struct{}, error) {
		return struct{}{}, nt.scan(ctx, w, opts)
	})
	return err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (t *Table) scan(ctx context.Context, w io.Writer, opts ScanOptions) error {
	// A scan holds up to one output batch and one batch of input in memory;
	// with payloads that is up to 64 MiB of batch plus one external payload.
	need := int64(scanBatchReserve)
	if opts.WithPayloads {
		need = 2*MaxScanPayload + scanBatchReserve
	}
	release, err := t.db.budget.reserve(need)
	if err != nil {
		t.db.stats.ReadOverloaded.Add(1)
		return err
	}
	defer release()
	s, withWAL, err := t.listSnapshot(ctx, opts.Version, false)
	if err != nil {
		return err
	}
	if err := t.db.point(ctx, hookScanSnapshot); err != nil {
		return err
	}
	sw := rowfile.NewStreamWriter(w, opts.WithPayloads)
	var buf []rowfile.Record
	var bufBytes int64
	flush := func() error {
		err := sw.Write(buf)
		buf, bufBytes = buf[:0], 0
		return err
	}
	it := newRowIter(s, "", withWAL)
	var memo scanMemo
	for {
		loc, ok := it.next()
		if !ok {
			break
		}
		rec, err := t.scanRow(ctx, loc, opts, &memo)
		if err != nil {
			if opts.Version > 0 && errors.Is(err, objstore.ErrNotFound) {
				err = fmt.Errorf("%w: version %d: %w", ErrVersionGone, opts.Version, err)
			}
			return err
		}
		buf = append(buf, *rec)
		bufBytes += int64(len(rec.Payload))
		if len(buf) == scanBatchRows || bufBytes >= 64<<20 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	return sw.Close()
}

// scanMemo keeps the last batch a scan decoded with its payloads: rows come
// in id order, so runs of them share a batch, fetched once.
type scanMemo struct {
	key  string
	off  int64
	rows []rowfile.Record
}

func (m *scanMemo) row(ctx context.Context, t *Table, loc location) (*Record, error) {
	if m.key != loc.key || m.off != loc.batch.Offset {
		rows, err := t.fetchBatch(ctx, loc, true)
		if err != nil {
			return nil, err
		}
		m.key, m.off, m.rows = loc.key, loc.batch.Offset, rows
	}
	if int(loc.loc.Row) >= len(m.rows) || m.rows[loc.loc.Row].ID != loc.loc.ID {
		return nil, fmt.Errorf("%w: %s: batch does not hold %q", rowfile.ErrCorrupt, loc.key, loc.loc.ID)
	}
	rec := m.rows[loc.loc.Row]
	return &rec, nil
}

// scanRow reads one row for a scan. A row whose file vanished under the
// scan (a generation reclaimed, a data file collected) is found again
// through the recovering read path, and its batch and payload are then
// both read from its new home.
func (t *Table) scanRow(ctx context.Context, loc location, opts ScanOptions, memo *scanMemo) (*Record, error) {
	rec, err := t.scanRowAt(ctx, loc, opts, memo)
	if !errors.Is(err, objstore.ErrNotFound) || opts.Version > 0 {
		return rec, err
	}
	var attempts int
	err = t.withRow(ctx, loc.loc.ID, ReadOptions{}, &attempts, func(ctx context.Context, l location) error {
		r, err := t.scanRowAt(ctx, l, opts, nil)
		if err == nil {
			rec = r
		}
		return err
	})
	return rec, err
}

func (t *Table) scanRowAt(ctx context.Context, loc location, opts ScanOptions, memo *scanMemo) (*Record, error) {
	if opts.WithPayloads && loc.loc.Ref == "" {
		if memo != nil {
			return memo.row(ctx, t, loc)
		}
		rows, err := t.fetchBatch(ctx, loc, true)
		if err != nil {
			return nil, err
		}
		if int(loc.loc.Row) >= len(rows) || rows[loc.loc.Row].ID != loc.loc.ID {
			return nil, fmt.Errorf("%w: %s: batch does not hold %q", rowfile.ErrCorrupt, loc.key, loc.loc.ID)
		}
		rec := rows[loc.loc.Row]
		return &rec, nil
	}
	rec, err := t.readRow(ctx, loc)
	if err != nil || !opts.WithPayloads || rec.PayloadSize > MaxScanPayload {
		return rec, err // without payloads, or too large to inline: payload null
	}
	rc, err := t.openSpan(ctx, spanOf(loc), 0, rec.PayloadSize)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	rec.Payload = make([]byte, rec.PayloadSize)
	if _, err := io.ReadFull(rc, rec.Payload); err != nil {
		return nil, readErr(loc.key, err)
	}
	return rec, nil
}

// VersionInfo summarises a retained base version.
type VersionInfo struct {
	Version      uint64    `json:"version"`
	Parent       uint64    `json:"parent"`
	CreatedAt    time.Time `json:"created_at"`
	Rows         int64     `json:"rows"`
	PayloadBytes int64     `json:"payload_bytes"`
	DataFiles    int       `json:"data_files"`
}

// Versions lists the retained base versions, oldest first.
func (t *Table) Versions(ctx context.Context) ([]VersionInfo, error) {
	vs, err := t.versions(ctx)
	return onSuccessor(ctx, t, vs, err, func(nt *Table) ([]VersionInfo, error) { return nt.versions(ctx) })
}

func (t *Table) versions(ctx context.Context) ([]VersionInfo, error) {
	if err := t.checkLive(); err != nil {
		return nil, err
	}
	_, vs, err := t.listVersions(ctx)
	if err != nil {
		return nil, err
	}
	// Below the collection floor (read after the listing) a key may hold a
	// late merger's object: not one of the table's versions.
	reg, err := t.liveRegistry(ctx)
	if err != nil {
		return nil, err
	}
	out := []VersionInfo{}
	for _, v := range vs {
		if v < reg.Floor {
			continue
		}
		m, err := t.loadManifest(ctx, v)
		if errors.Is(err, objstore.ErrNotFound) {
			continue // collected since the listing
		}
		if err != nil {
			return nil, err
		}
		out = append(out, VersionInfo{Version: v, Parent: m.Parent, CreatedAt: m.CreatedAt, Rows: m.Rows,
			PayloadBytes: m.PayloadBytes, DataFiles: len(m.Files)})
	}
	return out, nil
}

// The change feed: a partition's acknowledged rows in acknowledgement
// order, read from its WAL generations by position, and the cursors that
// name positions.

package engine

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"time"

	"github.com/rollstore/rollstore/engine/keyspace"
	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
)

// Position is where a reader stands in one partition: the next row to
// deliver is row Row (in file order) of segment Seg (from 1) of generation
// Gen. A partition's commits are one chain of head swaps, each counting one
// segment, so (Gen, Seg, Row) orders its rows exactly as they were
// acknowledged. Offset is the partition's sequence number of that row
// (how many rows the partition acknowledged before it), and At the
// acknowledgement time of the row delivered just before (zero if none).
type Position struct {
	Gen    uint64
	Seg    uint64
	Row    int
	Offset uint64
	At     time.Time
}

// Before reports whether p comes before q in the partition's order.
func (p Position) Before(q Position) bool {
	if p.Gen != q.Gen {
		return p.Gen < q.Gen
	}
	if p.Seg != q.Seg {
		return p.Seg < q.Seg
	}
	return p.Row < q.Row
}

// Cursor is a reader's position in some partitions of one incarnation of a
// table. Group and Epoch are set on the cursors a consumer-group member is
// given: its assignment's epoch.
type Cursor struct {
	Incarnation string
	Partitions  int // the table's partition count
	Pos         map[int]Position
	Group       string
	Epoch       uint64
}

// ErrBadCursor: a cursor that does not decode, or names partitions the
// table does not have.
var ErrBadCursor = errors.New("malformed cursor")

// ErrCursorExpired: a cursor older than the feed's retention (or of an
// incarnation since dropped); a CursorExpiredError carries the oldest
// valid one.
var ErrCursorExpired = errors.New("cursor expired")

// ErrNoFeed: the table was created before partitions and has no feed.
var ErrNoFeed = errors.New("table has no partitions, so no feed")

// CursorExpiredError is ErrCursorExpired with the oldest cursor that is
// still valid for the same partitions.
type CursorExpiredError struct {
	Oldest Cursor
	Reason string
}

func (e *CursorExpiredError) Error() string { return fmt.Sprintf("%v: %s", ErrCursorExpired, e.Reason) }
func (e *CursorExpiredError) Unwrap() error { return ErrCursorExpired }

// FeedFilter keeps rows whose fields equal the ones set.
type FeedFilter struct {
	RolloutID, ProblemID, PolicyVersion string
}

// FeedOptions is one feed read.
type FeedOptions struct {
	// Cursor to resume from; nil starts every partition at its oldest
	// retained row. Partitions the cursor lacks start there too.
	Cursor *Cursor
	// Latest starts the partitions the cursor lacks at their newest
	// position instead (nothing acknowledged so far is delivered).
	Latest bool
	// Partitions to read; nil: the cursor's, or every partition.
	Partitions []int
	// MaxRows and MaxBytes bound the answer (0: the defaults,
	// DefaultFeedRows and DefaultFeedBytes). MaxBytes counts the rows'
	// metadata and the payload bytes carried.
	MaxRows  int
	MaxBytes int64
	// PayloadBytes is a budget of payload bytes to carry: a row whose
	// payload fits what is left carries it (Payload set, external ones
	// fetched), the others do not.
	PayloadBytes int64
	// Wait is how long to wait for a row when none is there yet (long
	// poll); 0 answers at once.
	Wait   time.Duration
	Filter FeedFilter
}

// Default bounds of one feed answer.
const (
	DefaultFeedRows  = 1000
	DefaultFeedBytes = 16 << 20
)

// FeedRow is one delivered row.
type FeedRow struct {
	Partition int
	Offset    uint64
	// AckedAt is when the row's segment was committed (its head swap, as
	// the store's clock saw the segment's write).
	AckedAt time.Time
	Record  Record
	// Carried: Record.Payload holds the payload bytes.
	Carried bool
}

// FeedPage is the answer to one feed read.
type FeedPage struct {
	Rows []FeedRow
	// Next resumes after the last row delivered (after the rows filtered
	// out too), also when Rows is empty.
	Next Cursor
	// Acked is, per partition read, how many rows it had acknowledged as
	// of this read (the offset after its newest row): Acked[p] minus
	// Next.Pos[p].Offset is how far behind the reader is.
	Acked map[int]uint64
	// Latest is, per partition read, when its newest row was acknowledged.
	Latest map[int]time.Time
}

// Feed reads the rows acknowledged after a cursor (see FeedOptions), in
// each partition's acknowledgement order. A cursor of an incarnation since
// dropped is answered with a CursorExpiredError naming the current one's
// oldest position.
func (t *Table) Feed(ctx context.Context, opts FeedOptions) (*FeedPage, error) {
	page, err := t.feed(ctx, opts)
	return onSuccessor(ctx, t, page, err, func(nt *Table) (*FeedPage, error) { return nt.feed(ctx, opts) })
}

func (t *Table) feed(ctx context.Context, opts FeedOptions) (*FeedPage, error) {
	if err := t.retiredErr(); err != nil {
		return nil, err
	}
	if t.partitions == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoFeed, t.Name())
	}
	parts, err := t.feedParts(opts)
	if err != nil {
		return nil, err
	}
	if opts.MaxRows <= 0 {
		opts.MaxRows = DefaultFeedRows
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultFeedBytes
	}
	// Every head this read uses was observed after it began, so it counts
	// every segment acknowledged before: read-after-ack.
	since := t.db.rt.Now()
	var deadline sched.Event
	if opts.Wait > 0 {
		deadline = t.db.rt.After(opts.Wait)
		defer sched.Stop(deadline)
	}
	var pos map[int]Position
	// A long poll starts from the heads the process knows, however old,
	// so that many readers polling an idle table cost no probe each: what
	// they miss, the probe loop's next look wakes them for, and an empty
	// answer is given only on heads observed after the read began.
	loose := opts.Wait > 0
	// strict: check cursors against what the feed retains before reading
	// (after a generation was found gone); otherwise a missing generation
	// tells.
	strict := false
	for reclaimed := 0; ; {
		heads, fresh := t.knownHeads(parts, since)
		if !loose || heads == nil {
			var err error
			if heads, err = t.feedHeads(ctx, parts, since); err != nil {
				return nil, t.noteGone(err)
			}
			fresh = true
		}
		if pos == nil {
			var err error
			pos, err = t.feedStart(ctx, opts, parts, heads, strict)
			if errors.Is(err, ErrBadCursor) && !fresh {
				loose = false // the cursor is of heads newer than the ones known
				continue
			}
			if err != nil {
				return nil, t.noteGone(err)
			}
		}
		page, err := t.readFeed(ctx, opts, parts, heads, pos)
		var exp *CursorExpiredError
		if errors.As(err, &exp) && exp.Oldest.Incarnation == "" && reclaimed < maxRetries {
			// A generation was reclaimed under the read: start over from
			// the positions, checked against what the feed retains, which
			// tells an expired cursor (with the oldest valid one) from one
			// the reclaim skipped no row of.
			reclaimed++
			pos, strict = nil, true
			continue
		}
		if err != nil {
			return nil, t.noteGone(err)
		}
		if len(page.Rows) > 0 {
			return page, nil
		}
		pos = page.Next.Pos
		opts.Cursor = &page.Next
		if deadline == nil || deadline.Fired() {
			if !fresh {
				loose = false // empty: look again on heads observed since the read began
				continue
			}
			return page, nil
		}
		if err := t.feedWait(ctx, parts, heads, pos, deadline); err != nil {
			return page, err
		}
	}
}

// feedParts returns the partitions a read covers, sorted.
func (t *Table) feedParts(opts FeedOptions) ([]int, error) {
	if c := opts.Cursor; c != nil && c.Partitions != t.partitions && c.Incarnation == t.Incarnation() {
		return nil, fmt.Errorf("%w: it is for %d partitions, the table has %d", ErrBadCursor, c.Partitions, t.partitions)
	}
	var parts []int
	switch {
	case opts.Partitions != nil:
		parts = append(parts, opts.Partitions...)
	case opts.Cursor != nil && len(opts.Cursor.Pos) > 0:
		for p := range opts.Cursor.Pos {
			parts = append(parts, p)
		}
	default:
		for p := 0; p < t.partitions; p++ {
			parts = append(parts, p)
		}
	}
	slices.Sort(parts)
	parts = slices.Compact(parts)
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: no partition to read", ErrInvalid)
	}
	for _, p := range parts {
		if p < 0 || p >= t.partitions {
			return nil, fmt.Errorf("%w: partition %d: the table has partitions 0 to %d", ErrInvalid, p, t.partitions-1)
		}
	}
	return parts, nil
}

// feedStart returns where each partition's read starts: the cursor's
// position, or for a partition the cursor lacks the oldest retained row
// (or, with Latest, the head). A position below what the feed retains is
// expired, unless no row lies between it and the oldest retained one (a
// reader that stood at the end of a generation while it expired).
func (t *Table) feedStart(ctx context.Context, opts FeedOptions, parts []int, heads map[int]head, strict bool) (map[int]Position, error) {
	c := opts.Cursor
	if c != nil && c.Incarnation != t.Incarnation() {
		oldest, err := t.oldestCursor(ctx, parts, heads)
		if err != nil {
			return nil, err
		}
		return nil, &CursorExpiredError{Oldest: oldest, Reason: fmt.Sprintf("table %s was dropped and created again since", t.Name())}
	}
	pos := make(map[int]Position, len(parts))
	var expired []int
	for _, p := range parts {
		h := heads[p]
		cp, ok := Position{}, false
		if c != nil {
			cp, ok = c.Pos[p]
		}
		if !ok && opts.Latest {
			pos[p] = latestPos(h)
			continue
		}
		if ok {
			if err := checkPos(p, cp, h); err != nil {
				return nil, err
			}
			if !strict {
				pos[p] = cp // a generation gone under it tells whether it expired
				continue
			}
		}
		oldest, err := t.oldestPos(ctx, p, h)
		switch {
		case err != nil:
			return nil, err
		case !ok:
			pos[p] = oldest
		case !cp.Before(oldest):
			pos[p] = cp
		case cp.Offset >= oldest.Offset:
			pos[p] = oldest // offsets are dense: no row lies between them
		default:
			expired = append(expired, p)
		}
	}
	if len(expired) > 0 {
		// The oldest valid cursor moves only the expired partitions.
		oldest := Cursor{Incarnation: t.Incarnation(), Partitions: t.partitions, Pos: map[int]Position{}, Group: c.Group, Epoch: c.Epoch}
		for p, cp := range c.Pos {
			oldest.Pos[p] = cp
		}
		for _, p := range expired {
			var err error
			if oldest.Pos[p], err = t.oldestPos(ctx, p, heads[p]); err != nil {
				return nil, err
			}
		}
		return nil, &CursorExpiredError{Oldest: oldest, Reason: fmt.Sprintf("partitions %v: the rows after the cursor are older than the feed's retention (%v)", expired, t.db.cfg.FeedRetention)}
	}
	return pos, nil
}

// checkPos refuses a position the partition's chain never reached.
func checkPos(p int, pos Position, h head) error {
	bad := pos.Gen == 0 || pos.Seg == 0 || pos.Row < 0 || pos.Offset < uint64(pos.Row) ||
		pos.Gen > h.Gen+1 || (pos.Gen == h.Gen+1 && (pos.Seg != 1 || pos.Row != 0)) ||
		(pos.Gen == h.Gen && pos.Seg > h.Segs+1) || pos.Offset > h.Rows
	if bad {
		return fmt.Errorf("%w: partition %d: position %d/%d/%d is ahead of the partition", ErrBadCursor, p, pos.Gen, pos.Seg, pos.Row)
	}
	return nil
}

// latestPos is the position after the newest row of a partition.
func latestPos(h head) Position {
	switch {
	case h.Gen == 0:
		return Position{Gen: 1, Seg: 1}
	case h.Sealed:
		return Position{Gen: h.Gen + 1, Seg: 1, Offset: h.Rows, At: h.modified}
	default:
		return Position{Gen: h.Gen, Seg: h.Segs + 1, Offset: h.Rows, At: h.modified}
	}
}

// oldestPos is the position of a partition's oldest retained row: the
// first of the oldest generation the newest base this process knows keeps.
// A generation reclaimed since is noticed when its records are read.
func (t *Table) oldestPos(ctx context.Context, p int, h head) (Position, error) {
	if h.Gen == 0 {
		return Position{Gen: 1, Seg: 1}, nil
	}
	shard := PartitionName(p)
	for attempt := 0; ; attempt++ {
		s, err := t.current(ctx)
		if err != nil {
			return Position{}, err
		}
		lo := s.base.m.retainedFrom(shard)
		switch {
		case lo > h.Gen:
			return latestPos(h), nil
		case lo == h.Gen:
			return Position{Gen: lo, Seg: 1, Offset: h.GenStart}, nil
		}
		rec, err := t.loadSeal(ctx, shard, lo)
		if err == nil {
			return Position{Gen: lo, Seg: 1, Offset: rec.FirstRow}, nil
		}
		if !errors.Is(err, objstore.ErrNotFound) || attempt == maxRetries {
			return Position{}, t.feedMissing(ctx, fmt.Errorf("%w: the seal record of %s/%s/%d: %w", ErrMissingFile, t.Name(), shard, lo, err))
		}
		// Reclaimed since that base: a newer one retains less.
		if _, err := t.refreshed(ctx, t.refresh.ticket(), true); err != nil {
			return Position{}, err
		}
	}
}

// oldestCursor is the cursor at the oldest retained row of parts.
func (t *Table) oldestCursor(ctx context.Context, parts []int, heads map[int]head) (Cursor, error) {
	c := Cursor{Incarnation: t.Incarnation(), Partitions: t.partitions, Pos: map[int]Position{}}
	for _, p := range parts {
		pos, err := t.oldestPos(ctx, p, heads[p])
		if err != nil {
			return Cursor{}, err
		}
		c.Pos[p] = pos
	}
	return c, nil
}

// current returns the resident snapshot, refreshing it when there is none.
func (t *Table) current(ctx context.Context) (*snapshot, error) {
	if s := t.snap.Load(); s != nil {
		return s, nil
	}
	return t.refreshed(ctx, t.refresh.ticket(), false)
}

// feedMissing is the answer for a generation the feed needs that is gone:
// the table was dropped, or the generation was reclaimed (its retention
// ran out while the read went on: the cursor expired), or a file is
// missing.
func (t *Table) feedMissing(ctx context.Context, err error) error {
	return t.missing(ctx, err)
}

// feedSeg is one segment a read delivers rows of, from row from on.
type feedSeg struct {
	part     int
	gen, seg uint64
	key      string
	lay      *rowfile.Layout
	first    uint64 // offset of the segment's row 0
	from     int
	// next is the partition's position after this segment's last row.
	next Position
}

// estimate is what the segment's rows from from on weigh in an answer.
func (fs *feedSeg) estimate(payloads bool) int64 {
	var n int64
	for _, r := range fs.lay.Rows[fs.from:] {
		n += 200
		if payloads {
			n += r.Size
		}
	}
	return n
}

// feedPlanner walks one partition's chain from a position, a segment at a
// time, reading seal records and segment layouts (cached) as it goes.
type feedPlanner struct {
	t    *Table
	part int
	h    head
	pos  Position
	seal *sealRecord // of pos.Gen, when sealed
	done bool
}

// step plans the next segment, or sets done when the partition has none.
func (pl *feedPlanner) step(ctx context.Context) (*feedSeg, error) {
	t, h, shard := pl.t, pl.h, PartitionName(pl.part)
	for !pl.done {
		pos := pl.pos
		if h.Gen == 0 || pos.Gen > h.Gen {
			pl.done = true
			return nil, nil
		}
		var n, first uint64
		if pos.Gen == h.Gen {
			n, first = h.Segs, h.GenStart
		} else {
			if pl.seal == nil || pl.seal.Gen != pos.Gen {
				t.prefetchSeals(ctx, shard, pos.Gen+1, min(pos.Gen+feedSealAhead, h.Gen-1))
				rec, err := t.loadSeal(ctx, shard, pos.Gen)
				if err != nil {
					return nil, t.genGone(ctx, shard, pos.Gen, err)
				}
				pl.seal = rec
			}
			n, first = uint64(len(pl.seal.Segments)), pl.seal.FirstRow
		}
		if pos.Seg == 1 && pos.Row == 0 {
			pl.pos.Offset, pos.Offset = first, first
		}
		if pos.Seg > n {
			if pos.Gen < h.Gen {
				pl.pos = Position{Gen: pos.Gen + 1, Seg: 1, Offset: pos.Offset, At: pos.At}
				continue
			}
			pl.done = true
			return nil, nil
		}
		key := t.keys.Segment(shard, pos.Gen, pos.Seg)
		var lay *rowfile.Layout
		if pos.Gen == h.Gen {
			if pos.Seg == h.Segs {
				lay = h.countedLayout()
			}
			if lay == nil {
				var err error
				if lay, err = t.segmentLayout(ctx, key); err != nil {
					return nil, t.genGone(ctx, shard, pos.Gen, err)
				}
			}
		} else {
			lay = pl.seal.Segments[pos.Seg-1].Layout
		}
		rows := len(lay.Rows)
		if pos.Row > rows {
			return nil, fmt.Errorf("%w: partition %d: row %d of segment %d/%d, which has %d", ErrBadCursor, pl.part, pos.Row, pos.Gen, pos.Seg, rows)
		}
		fs := &feedSeg{part: pl.part, gen: pos.Gen, seg: pos.Seg, key: key, lay: lay, first: pos.Offset - uint64(pos.Row), from: pos.Row}
		pl.pos = Position{Gen: pos.Gen, Seg: pos.Seg + 1, Offset: fs.first + uint64(rows), At: pos.At}
		if pos.Seg+1 > n && pos.Gen < h.Gen {
			pl.pos = Position{Gen: pos.Gen + 1, Seg: 1, Offset: pl.pos.Offset, At: pos.At}
		}
		fs.next = pl.pos
		if pos.Row == rows {
			continue // a cursor at the end of a segment
		}
		return fs, nil
	}
	return nil, nil
}

// feedSealAhead is how many sealed generations a reader catching up loads
// the seal records of at once: one round trip for several small
// generations instead of one each.
const feedSealAhead = 8

// prefetchSeals loads the seal records of generations from..to into the
// cache, in parallel and in the background of the one being read; errors
// are left for the reads that need them.
func (t *Table) prefetchSeals(ctx context.Context, shard string, from, to uint64) {
	for g := from; g <= to; g++ {
		if _, ok := t.db.seals.Get(t.keys.Seal(shard, g)); ok {
			continue
		}
		t.db.rt.Go(func() {
			_, _ = t.loadSeal(ctx, shard, g)
		})
	}
}

// genGone explains a generation's record or segment that could not be
// read: gone because it was reclaimed (its retention ran out) is an
// expired cursor; otherwise the error stands.
func (t *Table) genGone(ctx context.Context, shard string, gen uint64, err error) error {
	if !errors.Is(err, objstore.ErrNotFound) {
		return err
	}
	s, rerr := t.refreshed(ctx, t.refresh.ticket(), true)
	if rerr != nil {
		return rerr
	}
	if gen < s.base.m.retainedFrom(shard) {
		return &CursorExpiredError{Reason: fmt.Sprintf("generation %d of %s was reclaimed while the read went on", gen, shard)}
	}
	return t.feedMissing(ctx, fmt.Errorf("%w: %s/%s/%d: %w", ErrMissingFile, t.Name(), shard, gen, err))
}

// feedScanMin bounds the rows one read looks at when a filter keeps few.
const feedScanMin = 10000

// readFeed plans the segments of one answer, round robin over the
// partitions (a segment of each in turn, so none starves), fetches them in
// parallel, and takes their rows in plan order until a bound is reached.
func (t *Table) readFeed(ctx context.Context, opts FeedOptions, parts []int, heads map[int]head, start map[int]Position) (*FeedPage, error) {
	planners := make([]*feedPlanner, len(parts))
	for i, p := range parts {
		planners[i] = &feedPlanner{t: t, part: p, h: heads[p], pos: start[p]}
	}
	scanMax := max(opts.MaxRows*8, feedScanMin)
	var plan []*feedSeg
	var planned int
	var planBytes int64
	for planned < scanMax && planBytes < opts.MaxBytes {
		round := make([]*feedSeg, len(planners))
		err := sched.Parallel(ctx, t.db.rt, len(planners), 16, func(ctx context.Context, i int) error {
			var err error
			round[i], err = planners[i].step(ctx)
			return err
		})
		if err != nil {
			return nil, err
		}
		more := false
		for _, fs := range round {
			if fs == nil {
				continue
			}
			more = true
			plan = append(plan, fs)
			planned += len(fs.lay.Rows) - fs.from
			planBytes += fs.estimate(opts.PayloadBytes > 0)
		}
		if !more || planned >= opts.MaxRows && !opts.Filter.any() {
			break
		}
	}
	if err := t.db.point(ctx, hookFeedFetch); err != nil {
		return nil, err
	}
	data, err := t.fetchFeedSegments(ctx, plan, opts.PayloadBytes > 0)
	if err != nil {
		return nil, err
	}

	page := &FeedPage{Next: Cursor{Incarnation: t.Incarnation(), Partitions: t.partitions, Pos: map[int]Position{}},
		Acked: map[int]uint64{}, Latest: map[int]time.Time{}}
	if c := opts.Cursor; c != nil && c.Incarnation == t.Incarnation() {
		page.Next.Group, page.Next.Epoch = c.Group, c.Epoch
		for p, cp := range c.Pos {
			page.Next.Pos[p] = cp
		}
	}
	for _, p := range parts {
		page.Next.Pos[p] = start[p]
		page.Acked[p] = heads[p].Rows
		page.Latest[p] = heads[p].modified
	}
	var bytes, payloadBytes int64
	scanned := 0
	stopped := false
	var external []int
	for i, fs := range plan {
		seg := data[i]
		for r := fs.from; r < len(seg.rows) && !stopped; r++ {
			rec := seg.rows[r]
			size := rowBytes(&rec)
			if len(page.Rows) >= opts.MaxRows || scanned >= scanMax || (len(page.Rows) > 0 && bytes+size > opts.MaxBytes) {
				stopped = true
				break
			}
			// A payload that an answer could carry but this one has no room
			// left for goes in the next answer, with its row; one too large
			// for any answer is not carried (the reader fetches it by id).
			carry := opts.PayloadBytes > 0 && rec.PayloadSize <= opts.PayloadBytes && size+rec.PayloadSize <= opts.MaxBytes
			if carry && len(page.Rows) > 0 && opts.Filter.keeps(&rec) &&
				(payloadBytes+rec.PayloadSize > opts.PayloadBytes || bytes+size+rec.PayloadSize > opts.MaxBytes) {
				stopped = true
				break
			}
			scanned++
			next := Position{Gen: fs.gen, Seg: fs.seg, Row: r + 1, Offset: fs.first + uint64(r) + 1, At: seg.at}
			if r+1 == len(seg.rows) {
				next = fs.next
				next.At = seg.at
			}
			page.Next.Pos[fs.part] = next
			if !opts.Filter.keeps(&rec) {
				continue
			}
			row := FeedRow{Partition: fs.part, Offset: fs.first + uint64(r), AckedAt: seg.at, Record: rec}
			row.Record.Payload = nil
			if carry {
				if rec.Inline() {
					row.Record.Payload, row.Carried = rec.Payload, true
					if row.Record.Payload == nil {
						row.Record.Payload = []byte{}
					}
				} else {
					external = append(external, len(page.Rows))
				}
				payloadBytes += rec.PayloadSize
				size += rec.PayloadSize
			}
			bytes += size
			page.Rows = append(page.Rows, row)
		}
		if stopped {
			break
		}
	}
	if err := t.carryExternal(ctx, page.Rows, external); err != nil {
		return nil, err
	}
	return page, nil
}

// rowBytes estimates what a row's metadata weighs in an answer.
func rowBytes(r *Record) int64 {
	return int64(len(r.ID)+len(r.RolloutID)+len(r.ProblemID)+len(r.Role)+len(r.ContentType)+
		len(r.PolicyVersion)+len(r.Metadata)+len(r.PayloadRef)) + 160
}

func (f FeedFilter) any() bool {
	return f.RolloutID != "" || f.ProblemID != "" || f.PolicyVersion != ""
}

func (f FeedFilter) keeps(r *Record) bool {
	return (f.RolloutID == "" || r.RolloutID == f.RolloutID) &&
		(f.ProblemID == "" || r.ProblemID == f.ProblemID) &&
		(f.PolicyVersion == "" || r.PolicyVersion == f.PolicyVersion)
}

// fetchedSeg is a segment's rows in file order and when it was written.
type fetchedSeg struct {
	rows []Record
	at   time.Time
}

// fetchFeedSegments reads whole segments, in parallel: one GET each. A
// segment's rows in file order are its part of the partition's order.
func (t *Table) fetchFeedSegments(ctx context.Context, plan []*feedSeg, withPayload bool) ([]fetchedSeg, error) {
	out := make([]fetchedSeg, len(plan))
	err := sched.Parallel(ctx, t.db.rt, len(plan), 16, func(ctx context.Context, i int) error {
		fs := plan[i]
		release, err := t.db.budget.reserve(fs.lay.Size)
		if err != nil {
			t.db.stats.ReadOverloaded.Add(1)
			return err
		}
		defer release()
		rc, attrs, err := t.db.store.Get(ctx, fs.key)
		if err != nil {
			return t.genGone(ctx, PartitionName(fs.part), fs.gen, err)
		}
		data, err := io.ReadAll(io.LimitReader(rc, max(t.db.cfg.SegmentMaxBytes, fs.lay.Size)+(2<<20)))
		rc.Close()
		if err != nil {
			return t.genGone(ctx, PartitionName(fs.part), fs.gen, readErr(fs.key, err))
		}
		rows, err := rowfile.Decode(data, withPayload)
		if err != nil {
			return fmt.Errorf("%s: %w", fs.key, err)
		}
		if len(rows) != len(fs.lay.Rows) {
			return fmt.Errorf("%w: %s holds %d rows, its layout %d", ErrCorruptObject, fs.key, len(rows), len(fs.lay.Rows))
		}
		out[i] = fetchedSeg{rows: rows, at: attrs.LastModified.UTC()}
		return nil
	})
	return out, err
}

// carryExternal reads the external payloads of rows[idx], in parallel.
func (t *Table) carryExternal(ctx context.Context, rows []FeedRow, idx []int) error {
	return sched.Parallel(ctx, t.db.rt, len(idx), 16, func(ctx context.Context, i int) error {
		r := &rows[idx[i]]
		data, _, err := objstore.ReadAll(ctx, t.db.store, r.Record.PayloadRef, r.Record.PayloadSize)
		if errors.Is(err, objstore.ErrNotFound) {
			return nil // not carried: the reader fetches it by id
		}
		if err != nil {
			return err
		}
		if int64(len(data)) != r.Record.PayloadSize || sha256.Sum256(data) != r.Record.PayloadSHA256 {
			return fmt.Errorf("%w: payload %s does not match its row", ErrCorruptObject, r.Record.PayloadRef)
		}
		r.Record.Payload, r.Carried = data, true
		return nil
	})
}

// cursorVersion is the first byte of an encoded cursor.
const cursorVersion = 1

// EncodeCursor returns the cursor's opaque text form: URL-safe base64 of
// a version byte, the incarnation, the partition count, the group and
// epoch, the positions (partitions ascending, each as the difference from
// the one before) and a CRC-32C of all that.
func EncodeCursor(c Cursor) string {
	b := []byte{cursorVersion}
	b = appendStr(b, c.Incarnation)
	b = binary.AppendUvarint(b, uint64(c.Partitions))
	b = appendStr(b, c.Group)
	b = binary.AppendUvarint(b, c.Epoch)
	parts := make([]int, 0, len(c.Pos))
	for p := range c.Pos {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	b = binary.AppendUvarint(b, uint64(len(parts)))
	prev := 0
	for _, p := range parts {
		pos := c.Pos[p]
		b = binary.AppendUvarint(b, uint64(p-prev))
		prev = p
		b = binary.AppendUvarint(b, pos.Gen)
		b = binary.AppendUvarint(b, pos.Seg)
		b = binary.AppendUvarint(b, uint64(pos.Row))
		b = binary.AppendUvarint(b, pos.Offset)
		var at int64
		if !pos.At.IsZero() {
			at = pos.At.UnixMilli()
		}
		b = binary.AppendVarint(b, at)
	}
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return base64.RawURLEncoding.EncodeToString(b)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// maxCursorPartitions bounds what a cursor may name (MaxPartitions).
const maxCursorPartitions = MaxPartitions

// DecodeCursor parses what EncodeCursor returned.
func DecodeCursor(s string) (Cursor, error) {
	bad := func(why string) (Cursor, error) { return Cursor{}, fmt.Errorf("%w: %s", ErrBadCursor, why) }
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 5 {
		return bad("not a cursor this service gave")
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return bad("checksum mismatch (the cursor was changed or cut)")
	}
	if body[0] != cursorVersion {
		return bad(fmt.Sprintf("version %d is not known", body[0]))
	}
	d := &cursorDecoder{b: body[1:]}
	c := Cursor{Incarnation: d.str(), Partitions: int(d.uint()), Group: d.str(), Epoch: d.uint()}
	n := d.uint()
	if d.err == nil && n > maxCursorPartitions {
		return bad("too many partitions")
	}
	c.Pos = make(map[int]Position, n)
	p := 0
	for i := uint64(0); i < n && d.err == nil; i++ {
		delta := d.uint()
		if delta > maxCursorPartitions || (i > 0 && delta == 0) {
			return bad("partitions out of order")
		}
		p += int(delta)
		pos := Position{Gen: d.uint(), Seg: d.uint()}
		row := d.uint()
		pos.Offset = d.uint()
		if at := d.int(); at != 0 {
			pos.At = time.UnixMilli(at).UTC()
		}
		if row > math.MaxInt32 {
			return bad("row out of range")
		}
		pos.Row = int(row)
		c.Pos[p] = pos
	}
	if d.err != nil || len(d.b) != 0 {
		return bad("truncated or trailing bytes")
	}
	if c.Partitions <= 0 || c.Partitions > MaxPartitions || keyspace.ValidateIncarnation(c.Incarnation) != nil {
		return bad("it names no table incarnation")
	}
	for p := range c.Pos {
		if p >= c.Partitions {
			return bad(fmt.Sprintf("partition %d of %d", p, c.Partitions))
		}
	}
	return c, nil
}

type cursorDecoder struct {
	b   []byte
	err error
}

func (d *cursorDecoder) uint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = ErrBadCursor
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *cursorDecoder) int() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = ErrBadCursor
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *cursorDecoder) str() string {
	n := d.uint()
	if d.err != nil || n > uint64(len(d.b)) || n > 256 {
		d.err = ErrBadCursor
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

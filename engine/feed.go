// The change feed: a partition's acknowledged rows in acknowledgement
// order, read from its WAL generations by position, and the cursors that
// name positions.

package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
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

// Feed reads the rows acknowledged after a cursor (see FeedOptions).
func (t *Table) Feed(ctx context.Context, opts FeedOptions) (*FeedPage, error) {
	return nil, errors.New("feed: not implemented yet")
}

// EncodeCursor returns the cursor's opaque text form (URL-safe).
func EncodeCursor(c Cursor) string { return "" }

// DecodeCursor parses what EncodeCursor returned.
func DecodeCursor(s string) (Cursor, error) { return Cursor{}, ErrBadCursor }

// PartitionsAcked reports, per partition, how many rows it has
// acknowledged (the offset after its newest row) and when the newest was
// acknowledged, from one HEAD of each partition's head.
func (t *Table) PartitionsAcked(ctx context.Context, parts []int) (acked map[int]uint64, latest map[int]time.Time, err error) {
	return nil, nil, errors.New("feed: not implemented yet")
}

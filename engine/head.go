package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/rollstore/rollstore/engine/layout"
	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/objstore"
)

// head is a shard's commit point: its newest generation, how many segments
// of it are committed, and whether it is sealed. Every change is a
// compare-and-swap on the head object's ETag, so the head's history is one
// chain: a segment is part of its generation exactly when a head swap
// counted it, and a writer that lost the chain (a zombie past its lease, a
// writer of a dropped table) cannot swap again. The state is kept in the
// object's metadata; the body repeats it and, when the swap counted a
// segment of the open generation, carries that segment's layout (see
// headLayoutMax), so a reader one segment behind learns the new rows from
// the one GET that told it of them.
type head struct {
	Gen     uint64 `json:"generation"`
	Segs    uint64 `json:"segments"`
	Sealed  bool   `json:"sealed"`
	Owner   string `json:"owner"`
	Commit  string `json:"commit"`
	Dropped bool   `json:"dropped,omitempty"`
	// Layout is rowfile.MarshalLayout of segment Segs of generation Gen,
	// written by the writer that wrote that segment and counted it in this
	// swap: derived data, a copy of the segment's own embedded layout.
	Layout []byte `json:"layout,omitempty"`

	layout   *rowfile.Layout // Layout decoded by readHead; nil if absent
	etag     string
	modified time.Time
}

// headLayoutMax bounds the layout a head carries. A segment whose layout is
// larger (thousands of rows) is read the usual way, one ranged GET of its
// header, so a head stays small enough to GET on every probe.
const headLayoutMax = 32 << 10

// headBodyMax bounds what readHead reads of a head's body.
const headBodyMax = headLayoutMax*2 + 4096

// errNoHead: the shard has no head yet (no writer ever took it).
var errNoHead = errors.New("shard has no head")

// errHeadMoved: a compare-and-swap found another writer's head.
var errHeadMoved = errors.New("shard head moved")

func (h head) metadata() map[string]string {
	md := map[string]string{
		"generation": strconv.FormatUint(h.Gen, 10),
		"segments":   strconv.FormatUint(h.Segs, 10),
		"sealed":     "0",
		"owner":      h.Owner,
		"commit":     h.Commit,
	}
	if h.Sealed {
		md["sealed"] = "1"
	}
	return md
}

func headFromAttrs(a objstore.Attrs) (head, error) {
	md := a.Metadata
	h := head{Owner: md["owner"], Commit: md["commit"], Sealed: md["sealed"] == "1", Dropped: md["dropped"] == "1",
		etag: a.ETag, modified: a.LastModified}
	if h.Dropped {
		return h, nil
	}
	var err1, err2 error
	h.Gen, err1 = strconv.ParseUint(md["generation"], 10, 64)
	h.Segs, err2 = strconv.ParseUint(md["segments"], 10, 64)
	if err1 != nil || err2 != nil || h.Gen == 0 {
		return head{}, fmt.Errorf("%w: head %s has bad metadata %v", ErrCorruptObject, a.Key, md)
	}
	return h, nil
}

// ErrCorruptObject reports an object rollstore wrote that does not read
// back as written.
var ErrCorruptObject = errors.New("corrupt object")

// readHead GETs a shard's head: its state from the metadata, and from the
// body the layout of the segment it counts last, when it carries one.
func readHead(ctx context.Context, db *DB, inc layout.Inc, shard string) (head, error) {
	rc, a, err := db.store.Get(ctx, inc.Head(shard))
	if errors.Is(err, objstore.ErrNotFound) {
		return head{}, errNoHead
	}
	if err != nil {
		return head{}, err
	}
	body, err := io.ReadAll(io.LimitReader(rc, headBodyMax))
	rc.Close()
	if err != nil {
		return head{}, readErr(inc.Head(shard), err)
	}
	h, err := headFromAttrs(a)
	if err != nil {
		return head{}, err
	}
	if h.Dropped {
		return h, fmt.Errorf("%w: %s", errDropped, inc.Table())
	}
	h.layout = headLayout(h, body)
	return h, nil
}

// headLayout decodes the layout a head's body carries, if it is the layout
// of the segment the head counts last. Anything else (no layout, a sealed
// head, a body that does not decode) leaves the reader to read the
// segment's own header: the layout is a copy, never the only one.
func headLayout(h head, body []byte) *rowfile.Layout {
	if h.Sealed || h.Segs == 0 || len(body) == 0 {
		return nil
	}
	var b head
	if err := json.Unmarshal(body, &b); err != nil || len(b.Layout) == 0 || b.Gen != h.Gen || b.Segs != h.Segs || b.Commit != h.Commit {
		return nil
	}
	lay, err := rowfile.UnmarshalLayout(b.Layout)
	if err != nil {
		return nil
	}
	return lay
}

// casHead swaps the head from prev (its etag; empty to create the head) to
// next. errHeadMoved means another writer's swap came first: prev is no
// longer the head. A swap whose response was lost is recognised on the
// retry by next's commit id.
func casHead(ctx context.Context, db *DB, inc layout.Inc, shard string, prev head, next head) (head, error) {
	next.Commit = db.randomName()[:16]
	body, _ := json.Marshal(next)
	opts := objstore.PutOptions{Size: int64(len(body)), Metadata: next.metadata(), ContentType: "application/json"}
	if prev.etag == "" {
		opts.IfNotExists = true
	} else {
		opts.IfMatch = prev.etag
	}
	var lastErr error
	// uncertain: an earlier attempt may have landed, so "moved" no longer
	// proves that this swap did not happen.
	uncertain := false
	for attempt := 0; attempt < 4; attempt++ {
		if err := db.point(ctx, "head:cas"); err != nil {
			return head{}, err
		}
		a, err := db.store.Put(ctx, inc.Head(shard), bytes.NewReader(body), opts)
		if err == nil {
			next.etag, next.modified = a.ETag, a.LastModified
			return next, nil
		}
		lastErr = err
		if errors.Is(err, objstore.ErrPrecondition) || errors.Is(err, objstore.ErrNotFound) || attempt > 0 {
			// Did an earlier attempt of this swap land?
			cur, rerr := readHead(ctx, db, inc, shard)
			switch {
			case rerr == nil && cur.Commit == next.Commit:
				return cur, nil
			case rerr == nil, errors.Is(rerr, errNoHead):
				if (errors.Is(err, objstore.ErrPrecondition) || errors.Is(err, objstore.ErrNotFound)) && !uncertain {
					return head{}, fmt.Errorf("%w: %s/%s", errHeadMoved, inc.Table(), shard)
				}
				if uncertain {
					return head{}, fmt.Errorf("%w: swapping the head of %s/%s: another writer moved it after an attempt whose outcome is unknown", ErrOutcomeUnknown, inc.Table(), shard)
				}
			case errors.Is(rerr, ErrTableNotFound):
				return head{}, rerr
			default:
				lastErr = rerr
			}
		}
		if !retryable(err) {
			break
		}
		uncertain = true
	}
	return head{}, fmt.Errorf("%w: swapping the head of %s/%s: %w", ErrOutcomeUnknown, inc.Table(), shard, lastErr)
}

// retryable reports store errors worth an immediate retry of an idempotent
// step: not a missing object, a lost condition, a refused key or a closed
// context.
func retryable(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, objstore.ErrNotFound), errors.Is(err, objstore.ErrPrecondition),
		errors.Is(err, objstore.ErrInvalidKey), errors.Is(err, objstore.ErrContainerNotFound),
		errors.Is(err, objstore.ErrAuth), errors.Is(err, objstore.ErrLeased),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	}
	return true
}

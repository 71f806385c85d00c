package engine

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/rollstore/rollstore/engine/keyspace"
	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/objstore"
)

// head is a shard's commit point: its newest generation, how many segments
// of it are committed, and whether it is sealed. Every change is a
// compare-and-swap on the head object's ETag, so the head's history is one
// chain: a segment is part of its generation exactly when a head swap
// counted it, and a writer that lost the chain (a zombie past its lease, a
// writer of a dropped table) cannot swap again. The state is kept in the
// object's metadata, so one HEAD reads it (the body repeats it as JSON).
// A swap that counts a segment of the open generation also carries that
// segment's layout in the metadata when it is small (headLayoutMax): a
// reader one segment behind learns the new rows from the HEAD that told it
// of them.
type head struct {
	Gen     uint64 `json:"generation"`
	Segs    uint64 `json:"segments"`
	Sealed  bool   `json:"sealed"`
	Owner   string `json:"owner"`
	Commit  string `json:"commit"`
	Dropped bool   `json:"dropped,omitempty"`
	// Rows counts the rows of every segment the shard's chain counted,
	// through segment Segs of Gen; GenStart is Rows as Gen was claimed.
	// A row's offset in the partition's feed is GenStart plus the rows of
	// the segments before its own, plus its place in the segment.
	Rows     uint64 `json:"rows"`
	GenStart uint64 `json:"generation_start"`

	// layout is the metadata's "layout": the layout of segment Segs of
	// generation Gen (base64 of rowfile.MarshalLayout), as the writer that
	// wrote the segment and counted it in this swap encoded it, a copy of
	// the segment's own embedded layout; empty if the head carries none.
	// Readers decode it only when they need that segment (countedLayout).
	layout   string
	etag     string
	modified time.Time
}

// headLayoutMax bounds the encoded layout a head carries (base64, in the
// metadata, which Azure caps at 8 KiB in all). A segment whose layout is
// larger (more than a few dozen rows) is read the usual way, one ranged
// GET of its header.
const headLayoutMax = 4 << 10

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
	md["rows"] = strconv.FormatUint(h.Rows, 10)
	md["genstart"] = strconv.FormatUint(h.GenStart, 10)
	if h.layout != "" && !h.Sealed && h.Segs > 0 {
		md["layout"] = h.layout
	}
	return md
}

// headLayout encodes the layout a head that counts its segment carries, or
// "" when it is larger than headLayoutMax.
func headLayout(lay *rowfile.Layout) string {
	if enc := base64.StdEncoding.EncodeToString(rowfile.MarshalLayout(lay)); len(enc) <= headLayoutMax {
		return enc
	}
	return ""
}

// countedLayout decodes the layout of the segment the head counts last,
// nil if it carries none. A copy: one that does not decode leaves the
// reader to read the segment's own header.
func (h head) countedLayout() *rowfile.Layout {
	if h.layout == "" || h.Sealed || h.Segs == 0 {
		return nil
	}
	raw, err := base64.StdEncoding.DecodeString(h.layout)
	if err != nil {
		return nil
	}
	lay, _ := rowfile.UnmarshalLayout(raw)
	return lay
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
	// Heads written before the counters carry none: their rows count
	// from 0 at the first swap that does.
	if md["rows"] != "" || md["genstart"] != "" {
		h.Rows, err1 = strconv.ParseUint(md["rows"], 10, 64)
		h.GenStart, err2 = strconv.ParseUint(md["genstart"], 10, 64)
		if err1 != nil || err2 != nil || h.GenStart > h.Rows {
			return head{}, fmt.Errorf("%w: head %s has bad metadata %v", ErrCorruptObject, a.Key, md)
		}
	}
	h.layout = md["layout"]
	return h, nil
}

// sealed is h's generation sealed at its count, by owner.
func (h head) sealedBy(owner string) head {
	return head{Gen: h.Gen, Segs: h.Segs, Sealed: true, Owner: owner, Rows: h.Rows, GenStart: h.GenStart}
}

// claim is the next generation, claimed by owner after h.
func (h head) claim(owner string) head {
	return head{Gen: h.Gen + 1, Owner: owner, Rows: h.Rows, GenStart: h.Rows}
}

// ErrCorruptObject reports an object rollstore wrote that does not read
// back as written.
var ErrCorruptObject = errors.New("corrupt object")

func readHead(ctx context.Context, db *DB, inc keyspace.Inc, shard string) (head, error) {
	a, err := db.store.Head(ctx, inc.Head(shard))
	if errors.Is(err, objstore.ErrNotFound) {
		return head{}, errNoHead
	}
	if err != nil {
		return head{}, err
	}
	h, err := headFromAttrs(a)
	if err != nil {
		return head{}, err
	}
	if h.Dropped {
		return h, fmt.Errorf("%w: %s", errDropped, inc.Table())
	}
	return h, nil
}

// casHead swaps the head from prev (its etag; empty to create the head) to
// next. errHeadMoved means another writer's swap came first: prev is no
// longer the head. A swap whose response was lost is recognised on the
// retry by next's commit id.
func casHead(ctx context.Context, db *DB, inc keyspace.Inc, shard string, prev head, next head) (head, error) {
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
		if err := db.point(ctx, hookHeadCAS); err != nil {
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

package engine

// The simulation's feed consumers: each follows the table's feed from the
// last cursor it received, through every fault the simulation makes, and
// the checker holds the feed's promises against what was acknowledged.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"
)

// simConsumer is one reader of the feed.
type simConsumer struct {
	busy   bool
	cursor *Cursor
	// next holds, per partition, the offset the next row delivered must
	// have; seen the ids delivered since the chain began.
	next map[int]uint64
	seen map[string]bool
	// chainAt is the event the consumer's chain of cursors began at (its
	// first read, an expiry's restart, or a drop): a caught-up read must
	// have delivered every row acknowledged after it.
	chainAt int
	// fromStart: the chain began at the oldest retained row, with nothing
	// reclaimed before it: every row of the epoch is owed.
	fromStart bool
	epoch     int // the epoch the cursor is of
}

func (w *simWorld) consumer() *simConsumer {
	var free []*simConsumer
	for _, c := range w.consumers {
		if !c.busy {
			free = append(free, c)
		}
	}
	if len(free) == 0 {
		return nil
	}
	return free[w.rng.IntN(len(free))]
}

// opFeed reads one page of the feed for a consumer and checks it.
func (w *simWorld) opFeed(ctx context.Context, p *simProc) {
	c := w.consumer()
	if c == nil || w.partitions <= 0 {
		return
	}
	c.busy = true
	defer func() { c.busy = false }()
	opts := FeedOptions{Cursor: c.cursor, MaxRows: 1 + w.rng.IntN(12),
		PayloadBytes: []int64{0, 8 << 10, 1 << 20}[w.rng.IntN(3)],
		Wait:         []time.Duration{0, 0, 300 * time.Millisecond}[w.rng.IntN(3)]}
	start := w.tick()
	tb, err := w.table(ctx, p)
	var page *FeedPage
	if err == nil {
		page, err = tb.Feed(ctx, opts)
	}
	end := w.tick()
	var exp *CursorExpiredError
	switch {
	case errors.As(err, &exp):
		if w.feedRetention > 0 && c.epoch == w.epoch && !w.dropping && w.dropEnd < start {
			w.problem("feed: cursor expired within the retention: %v", err)
		}
		w.restartConsumer(c, &exp.Oldest, start)
		return
	case err != nil:
		if !w.allowedReadErr(err, start) {
			w.problem("feed: %v", err)
		}
		return
	}
	if c.cursor == nil || page.Next.Incarnation != c.cursor.Incarnation {
		// A new chain: the first read, or one after a drop.
		c.next, c.seen, c.chainAt, c.fromStart = map[int]uint64{}, map[string]bool{}, start, c.cursor == nil && w.feedRetention > 0
		c.epoch = w.epochAt(start)
	}
	for _, row := range page.Rows {
		w.checkFeedRow(c, row, start, end)
	}
	for p, pos := range page.Next.Pos {
		if want, ok := c.next[p]; ok && pos.Offset != want {
			w.problem("feed: partition %d: the cursor is at offset %d after the last row delivered at %d", p, pos.Offset, want-1)
		}
		c.next[p] = pos.Offset
	}
	next := page.Next
	c.cursor = &next
	if len(page.Rows) == 0 && c.epoch == w.epoch && !w.dropping && w.dropEnd < start {
		// Caught up: every row acknowledged (or seen) before this read
		// began is delivered, if the chain owes it.
		for _, id := range w.order {
			r := w.rows[id]
			owed := c.fromStart || (r.acked && r.ackedAt > c.chainAt)
			if owed && w.mustExist(r, start) && !c.seen[id] {
				w.problem("feed: caught up (read began at event %d) without delivering %q (acknowledged at event %d, seen at %d; chain began at %d)",
					start, id, r.ackedAt, r.seenAt, c.chainAt)
			}
		}
	}
}

// checkFeedRow checks one delivered row: a row that may exist, with its
// one content, at the next offset of its partition, delivered once.
func (w *simWorld) checkFeedRow(c *simConsumer, row FeedRow, start, end int) {
	id := row.Record.ID
	r := w.rows[id]
	w.checkFound("feed", id, &row.Record, start, end)
	if r == nil {
		return
	}
	if PartitionOf(id, w.partitions) != row.Partition {
		w.problem("feed: %q delivered in partition %d", id, row.Partition)
	}
	if want, ok := c.next[row.Partition]; ok && row.Offset != want {
		w.problem("feed: partition %d: %q at offset %d, want %d (a gap or a repeat)", row.Partition, id, row.Offset, want)
	}
	c.next[row.Partition] = row.Offset + 1
	if c.seen[id] {
		w.problem("feed: %q delivered twice to one consumer", id)
	}
	c.seen[id] = true
	v := r.variantOf(&row.Record)
	if v >= 0 && r.pending == 0 && r.varAttempts[v] > 0 && r.varRefused[v] == r.varAttempts[v] {
		w.problem("feed: %q delivered (variant %d), but every attempt to write it was refused", id, v)
	}
	if row.Carried && v >= 0 && !bytes.Equal(row.Record.Payload, r.payload(v)) {
		w.problem("feed: payload of %q differs (%d bytes)", id, len(row.Record.Payload))
	}
}

// restartConsumer starts a consumer's chain again at cursor (an expired
// cursor's oldest valid one).
func (w *simWorld) restartConsumer(c *simConsumer, cursor *Cursor, at int) {
	c.cursor = cursor
	c.next, c.seen, c.chainAt, c.fromStart = map[int]uint64{}, map[string]bool{}, at, false
	for p, pos := range cursor.Pos {
		c.next[p] = pos.Offset
	}
	c.epoch = w.epochAt(at)
}

// epochAt is the epoch a read that began at event start reads, or -1 when
// it may have read the one before: a drop ran meanwhile, or ended so
// shortly before that the reading process may not have noticed it yet.
func (w *simWorld) epochAt(start int) int {
	noticed := w.timeOf(w.dropEnd).Add(time.Second)
	if w.dropping || w.dropEnd >= start || (w.dropEnd > 0 && !w.timeOf(start).After(noticed)) {
		return -1
	}
	return w.epoch
}

// finalFeed reads the whole feed through a fresh process: with a
// retention, every row of the incarnation that was acknowledged or seen
// is delivered exactly once, at dense offsets, and nothing else is.
func (w *simWorld) finalFeed(ctx context.Context, p *simProc, when string) {
	if w.partitions <= 0 || w.feedRetention == 0 {
		return
	}
	tb, err := w.table(ctx, p)
	if err != nil {
		w.problem("%s: open: %v", when, err)
		return
	}
	c := &simConsumer{next: map[int]uint64{}, seen: map[string]bool{}, epoch: w.epoch}
	for pages := 0; ; pages++ {
		page, err := tb.Feed(ctx, FeedOptions{Cursor: c.cursor, MaxRows: 50})
		if err != nil {
			w.problem("%s: feed: %v", when, err)
			return
		}
		start := w.tick()
		for _, row := range page.Rows {
			if c.cursor == nil && row.Offset != 0 && c.next[row.Partition] == 0 {
				c.next[row.Partition] = 0 // from the start: offsets begin at 0
			}
			w.checkFeedRow(c, row, start, start)
		}
		next := page.Next
		c.cursor = &next
		if len(page.Rows) == 0 {
			break
		}
		if pages > 10000 {
			w.problem("%s: the feed never ends", when)
			return
		}
	}
	for _, id := range w.order {
		r := w.rows[id]
		if r.epoch != w.epoch || r.firstAttempt <= w.dropEnd {
			continue
		}
		if (r.acked || r.seenAt > 0) && !c.seen[id] {
			w.problem("%s: the feed never delivered %q (acknowledged: %v at event %d, seen at %d)", when, id, r.acked, r.ackedAt, r.seenAt)
		}
	}
	for p, n := range c.next {
		if n == 0 {
			continue
		}
		_ = fmt.Sprint(p)
	}
}

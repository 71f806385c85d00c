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

	"github.com/rollstore/rollstore/internal/sched"
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

// simMember is a consumer-group member: it reads its assignment from the
// cursor of its last answer, and commits that answer with its next
// request, as a learner does.
type simMember struct {
	name    string
	busy    bool
	cursor  *Cursor
	pending []simDelivered // delivered, not yet committed
}

// simDelivered is one row a member was given.
type simDelivered struct {
	part   int
	offset uint64
	id     string
}

const simGroup = "learners"

// opGroup runs one request of a group member: join (or heartbeat), commit
// the previous answer, read the next one.
func (w *simWorld) opGroup(ctx context.Context, p *simProc) {
	if w.partitions <= 0 || w.feedRetention == 0 || w.dropEnd > 0 || w.dropping {
		return // without retention, rows may expire unread; across a drop the group starts over
	}
	var free []*simMember
	for _, m := range w.members {
		if !m.busy {
			free = append(free, m)
		}
	}
	if len(free) == 0 {
		return
	}
	m := free[w.rng.IntN(len(free))]
	m.busy = true
	defer func() { m.busy = false }()
	tb, err := w.table(ctx, p)
	if err != nil {
		return
	}
	if w.rng.IntN(10) == 0 {
		// A member leaves; its uncommitted rows go to the next holder.
		if err := tb.LeaveGroup(ctx, simGroup, m.name); err == nil {
			m.cursor, m.pending = nil, nil
		}
		return
	}
	w.memberStep(ctx, tb, m, 1+w.rng.IntN(8))
}

// memberStep is one request of member m; it reports whether it read rows.
func (w *simWorld) memberStep(ctx context.Context, tb *Table, m *simMember, maxRows int) (bool, error) {
	a, err := tb.JoinGroup(ctx, simGroup, m.name)
	if err != nil {
		w.groupErr("join", err)
		return false, err
	}
	if m.cursor != nil && len(m.pending) > 0 {
		_, err := tb.CommitGroup(ctx, simGroup, m.name, *m.cursor)
		switch {
		case err == nil:
			w.noteCommitted(m.pending, true)
		case errors.Is(err, ErrRebalanced):
			// Not committed: the next holder gets these rows again.
		default:
			w.groupErr("commit", err)
			w.noteCommitted(m.pending, false) // it may have landed
		}
		m.pending = nil
	}
	start := a.Start
	if m.cursor != nil && m.cursor.Epoch == a.Epoch {
		start = *m.cursor
	}
	if len(a.Partitions) == 0 {
		m.cursor = &start
		return false, nil
	}
	page, err := tb.Feed(ctx, FeedOptions{Cursor: &start, Partitions: a.Partitions, MaxRows: maxRows})
	if err != nil {
		w.groupErr("feed", err)
		m.cursor = nil // start over from the group's committed positions
		return false, err
	}
	for _, row := range page.Rows {
		m.pending = append(m.pending, simDelivered{row.Partition, row.Offset, row.Record.ID})
	}
	next := page.Next
	m.cursor = &next
	return len(page.Rows) > 0, nil
}

func (w *simWorld) groupErr(what string, err error) {
	if (w.dropping || w.dropEnd > 0) && (errors.Is(err, ErrTableNotFound) || errors.Is(err, ErrCursorExpired)) {
		return // the op began before a drop
	}
	if !errors.Is(err, errInjected) && !errors.Is(err, ErrOutcomeUnknown) && !errors.Is(err, ErrOverloaded) &&
		!errors.Is(err, sched.ErrHalted) {
		w.problem("group %s: %v", what, err)
	}
}

// noteCommitted records a batch a member committed (certain: the commit
// was accepted; else its outcome is unknown). No row may be in two
// accepted commits: exactly once per committed cursor.
func (w *simWorld) noteCommitted(batch []simDelivered, certain bool) {
	for _, d := range batch {
		key := fmt.Sprint(d.part, "/", d.offset)
		if certain {
			if prev, ok := w.committed[key]; ok && prev.certain {
				w.problem("group: %q (partition %d offset %d) committed twice", d.id, d.part, d.offset)
			}
			w.committed[key] = simCommit{id: d.id, certain: true}
		} else if _, ok := w.committed[key]; !ok {
			w.committed[key] = simCommit{id: d.id}
		}
	}
}

type simCommit struct {
	id      string
	certain bool
}

// finalGroup lets one member take every partition and read to the end:
// then every row of the incarnation that was acknowledged or seen is in a
// committed batch, and the group's committed offsets are the partitions'
// row counts.
func (w *simWorld) finalGroup(ctx context.Context, p *simProc) {
	if w.partitions <= 0 || w.feedRetention == 0 || w.dropEnd > 0 || len(w.committed) == 0 && len(w.members[0].pending) == 0 {
		return
	}
	tb, err := w.table(ctx, p)
	if err != nil {
		w.problem("final group: %v", err)
		return
	}
	last := w.members[0]
	for _, m := range w.members[1:] {
		if err := tb.LeaveGroup(ctx, simGroup, m.name); err != nil {
			w.problem("final group: leave: %v", err)
			return
		}
	}
	for i := 0; ; i++ {
		read, err := w.memberStep(ctx, tb, last, 50)
		if err != nil {
			return
		}
		if !read && len(last.pending) == 0 {
			break
		}
		if i > 10000 {
			w.problem("final group: never caught up")
			return
		}
	}
	st, err := tb.GroupStatusOf(ctx, simGroup)
	if err != nil {
		w.problem("final group: status: %v", err)
		return
	}
	for _, l := range st.Lag {
		if l.Committed != l.Acked {
			w.problem("final group: partition %d committed at %d, %d rows acknowledged", l.Partition, l.Committed, l.Acked)
		}
	}
	in := map[string]bool{}
	for _, c := range w.committed {
		in[c.id] = true
	}
	for _, id := range w.order {
		r := w.rows[id]
		if r.epoch == w.epoch && r.firstAttempt > w.dropEnd && (r.acked || r.seenAt > 0) && !in[id] {
			w.problem("final group: %q (acknowledged: %v) is in no committed batch", id, r.acked)
		}
	}
}

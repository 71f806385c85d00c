package engine

// Invariants of the feed: a reader that always resumes from the last
// cursor it received sees every acknowledged row of a partition exactly
// once, in acknowledgement order, with dense offsets, across seals,
// merges, reclaims, ownership changes and processes; a read that begins
// after an append was acknowledged includes it; a cursor is valid for the
// retention and expires loudly, never by a silent skip.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

// feedConfig is partConfig with the feed's retention.
func feedConfig(name string, clk *objstoretest.Clock, partitions int, retention time.Duration) Config {
	cfg := partConfig(name, clk, partitions)
	cfg.FeedRetention = retention
	cfg.FeedPollInterval = 10 * time.Millisecond
	return cfg
}

// feedReader follows a table's feed as a consumer does: always from the
// last cursor it received.
type feedReader struct {
	t      *testing.T
	tb     *Table
	cursor *Cursor
	opts   FeedOptions
	// seen holds, per partition, the ids delivered in order.
	seen map[int][]string
	// payloads holds the carried payloads by id.
	payloads map[string][]byte
}

func newFeedReader(t *testing.T, tb *Table, opts FeedOptions) *feedReader {
	return &feedReader{t: t, tb: tb, opts: opts, seen: map[int][]string{}, payloads: map[string][]byte{}}
}

// next reads one page and checks its offsets continue the partition's.
func (r *feedReader) next() (*FeedPage, error) {
	r.t.Helper()
	opts := r.opts
	opts.Cursor = r.cursor
	page, err := r.tb.Feed(context.Background(), opts)
	if err != nil {
		return nil, err
	}
	for _, row := range page.Rows {
		if want := uint64(len(r.seen[row.Partition])); row.Offset != want && r.cursor != nil || r.cursor == nil && row.Offset != want {
			r.t.Fatalf("partition %d: row %s has offset %d, want %d (rows so far %v)", row.Partition, row.Record.ID, row.Offset, want, r.seen[row.Partition])
		}
		if p := PartitionOf(row.Record.ID, r.tb.partitions); p != row.Partition {
			r.t.Fatalf("row %s delivered as partition %d, it is in %d", row.Record.ID, row.Partition, p)
		}
		r.seen[row.Partition] = append(r.seen[row.Partition], row.Record.ID)
		if row.Carried {
			r.payloads[row.Record.ID] = row.Record.Payload
		}
	}
	// The cursor survives its text form.
	c, err := DecodeCursor(EncodeCursor(page.Next))
	if err != nil {
		r.t.Fatal(err)
	}
	r.cursor = &c
	return page, nil
}

// drain reads until an answer is empty.
func (r *feedReader) drain() {
	r.t.Helper()
	for i := 0; ; i++ {
		page, err := r.next()
		if err != nil {
			r.t.Fatal(err)
		}
		if len(page.Rows) == 0 {
			return
		}
		if i > 10000 {
			r.t.Fatal("the feed never ends")
		}
	}
}

// acked records, per partition, the ids in the order they were
// acknowledged.
type acked map[int][]string

func (a acked) put(t *testing.T, tb *Table, id string, size int) {
	t.Helper()
	res, err := tb.Append(context.Background(), Record{ID: id, RolloutID: "r-" + id, Sequence: 1, ProblemID: "prob-" + id[len(id)-1:]},
		bytes.NewReader(payloadFor(id, size)), int64(size))
	if err != nil {
		t.Fatalf("append %s: %v", id, err)
	}
	if !res.Created {
		t.Fatalf("append %s: not created", id)
	}
	p := PartitionOf(id, tb.partitions)
	a[p] = append(a[p], id)
}

// check compares what a reader saw with what was acknowledged.
func (a acked) check(t *testing.T, r *feedReader) {
	t.Helper()
	for p, ids := range a {
		if fmt.Sprint(r.seen[p]) != fmt.Sprint(ids) {
			t.Errorf("partition %d: delivered %v, acknowledged %v", p, r.seen[p], ids)
		}
	}
	for p, ids := range r.seen {
		if len(a[p]) == 0 && len(ids) > 0 {
			t.Errorf("partition %d: delivered %v, nothing acknowledged", p, ids)
		}
	}
}

func TestFeedDeliversEachPartitionOnceInAckOrder(t *testing.T) {
	clk := objstoretest.NewClock()
	mem := memory.New()
	e := newEnv(t, mem, feedConfig("w0", clk, 4, time.Hour))
	a := acked{}
	r := newFeedReader(t, e.tb, FeedOptions{MaxRows: 7})
	for i := range 120 {
		a.put(t, e.tb, fmt.Sprintf("id-%03d", i), 100+i%3*3000) // inline and external payloads
		switch {
		case i%17 == 5:
			if err := e.tb.Flush(context.Background()); err != nil { // seal: a new generation
				t.Fatal(err)
			}
		case i%29 == 11:
			r.drain() // read while it grows
		}
	}
	r.drain()
	a.check(t, r)
	page, err := r.next()
	if err != nil || len(page.Rows) != 0 {
		t.Fatalf("after the end: %d rows, %v", len(page.Rows), err)
	}
	for p, ids := range a {
		if page.Acked[p] != uint64(len(ids)) || page.Next.Pos[p].Offset != uint64(len(ids)) {
			t.Errorf("partition %d: acked %d, cursor offset %d, want %d", p, page.Acked[p], page.Next.Pos[p].Offset, len(ids))
		}
	}
}

func TestFeedCarriesPayloadsWithinItsBudget(t *testing.T) {
	clk := objstoretest.NewClock()
	e := newEnv(t, memory.New(), feedConfig("w0", clk, 1, time.Hour))
	a := acked{}
	sizes := map[string]int{}
	for i := range 7 {
		id := fmt.Sprintf("id-%d", i)
		sizes[id] = 1000 + i*2000 // 1000 … 13000: the last ones are external
		a.put(t, e.tb, id, sizes[id])
	}
	a.put(t, e.tb, "huge", 20000) // more than any answer carries
	sizes["huge"] = 20000
	// Answers carry what fits the budget, in order, and end before a row
	// whose payload the next answer can carry: 1000+3000+5000+7000, then
	// 9000, then 11000, then 13000 and the huge row without its payload.
	var pages [][]FeedRow
	var cursor *Cursor
	for {
		page, err := e.tb.Feed(context.Background(), FeedOptions{Cursor: cursor, PayloadBytes: 16000})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Rows) == 0 {
			break
		}
		pages = append(pages, page.Rows)
		cursor = &page.Next
	}
	var shape []string
	for _, rows := range pages {
		var carried int64
		var ids []string
		for _, row := range rows {
			id := row.Record.ID
			ids = append(ids, id)
			if !row.Carried {
				if row.Record.Payload != nil || id != "huge" {
					t.Errorf("%s: not carried", id)
				}
				continue
			}
			carried += int64(len(row.Record.Payload))
			if !bytes.Equal(row.Record.Payload, payloadFor(id, sizes[id])) {
				t.Errorf("%s: carried payload differs", id)
			}
		}
		if carried > 16000 {
			t.Errorf("an answer carried %d payload bytes, over its budget", carried)
		}
		shape = append(shape, fmt.Sprint(ids))
	}
	want := "[[id-0 id-1 id-2 id-3] [id-4] [id-5] [id-6 huge]]"
	if got := fmt.Sprint(shape); got != want {
		t.Errorf("answers %s, want %s", got, want)
	}
}

func TestFeedCursorSpansMergeAndReclaim(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New()
	e := newEnv(t, mem, feedConfig("w0", clk, 2, time.Hour))
	a := acked{}
	r := newFeedReader(t, e.tb, FeedOptions{MaxRows: 5})
	for i := range 40 {
		a.put(t, e.tb, fmt.Sprintf("id-%03d", i), 200)
		if i%10 == 9 {
			if err := e.tb.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := r.next(); err != nil { // a cursor into the first generations
		t.Fatal(err)
	}
	res := e.merge()
	if len(res.Merged) == 0 {
		t.Fatal("nothing merged")
	}
	if len(res.Reclaimed) != 0 {
		t.Fatalf("reclaimed %v within the retention", res.Reclaimed)
	}
	r.drain()
	a.check(t, r)

	// Past the retention, the next merge releases the generations and
	// reclaims them; a cursor from before answers expired, and the oldest
	// valid cursor it names reads on from what is left.
	old := newFeedReader(t, e.tb, FeedOptions{MaxRows: 3})
	if _, err := old.next(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Hour)
	if _, _, err := e.tb.members(ctx, true); err != nil { // a heartbeat after the jump
		t.Fatal(err)
	}
	for i := 40; i < 44; i++ {
		a.put(t, e.tb, fmt.Sprintf("id-%03d", i), 200)
	}
	res = e.merge()
	if len(res.Reclaimed) == 0 {
		t.Fatalf("nothing reclaimed past the retention: %+v", res)
	}
	_, err := old.next()
	var exp *CursorExpiredError
	if !errors.As(err, &exp) || !errors.Is(err, ErrCursorExpired) {
		t.Fatalf("a cursor into reclaimed generations: %v", err)
	}
	old.cursor = &exp.Oldest
	old.seen = map[int][]string{}
	for p := range exp.Oldest.Pos {
		old.seen[p] = make([]string, exp.Oldest.Pos[p].Offset) // offsets continue from there
	}
	old.drain()
	for p, ids := range a {
		got := old.seen[p][exp.Oldest.Pos[p].Offset:]
		if want := ids[exp.Oldest.Pos[p].Offset:]; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("partition %d after expiry: %v, want %v", p, got, want)
		}
	}
	// The reader that kept up is not expired: it stood past the reclaimed rows.
	r.drain()
	a.check(t, r)
}

func TestFeedReclaimUnderAReadIsAnExpiryNotAGap(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New()
	cfg := feedConfig("w0", clk, 1, 0) // no retention: merged generations go at once
	e := newEnv(t, mem, cfg)
	start, err := e.tb.Feed(ctx, FeedOptions{}) // a cursor before any row
	if err != nil {
		t.Fatal(err)
	}
	a := acked{}
	for i := range 6 {
		a.put(t, e.tb, fmt.Sprintf("id-%d", i), 100)
	}
	if err := e.tb.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// A reader plans its read from the generation's seal record; the merge
	// and reclaim run before it fetches the segments.
	g := e.hooks.Pause(hookFeedFetch)
	done := make(chan error, 1)
	go func() {
		_, err := e.tb.Feed(ctx, FeedOptions{Cursor: &start.Next})
		done <- err
	}()
	if err := g.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	res, err := e.tb.Merge(ctx, MergeOptions{})
	if err != nil || len(res.Reclaimed) == 0 {
		t.Fatalf("merge: %+v %v", res, err)
	}
	g.Release()
	err = <-done
	var exp *CursorExpiredError
	if !errors.As(err, &exp) {
		t.Fatalf("a read whose generation was reclaimed under it: %v", err)
	}
	// Nothing is lost: the rows are in the base, and the oldest cursor is
	// past them (no row was acknowledged since).
	for _, id := range a[0] {
		e.mustRead(id, 100)
	}
	page, err := e.tb.Feed(ctx, FeedOptions{Cursor: &exp.Oldest})
	if err != nil || len(page.Rows) != 0 {
		t.Fatalf("from the oldest cursor: %d rows, %v", len(page.Rows), err)
	}
	if got := exp.Oldest.Pos[0].Offset; got != 6 {
		t.Errorf("oldest cursor at offset %d, want 6", got)
	}
}

func TestFeedFollowsAPartitionAcrossOwners(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	a := acked{}
	w1 := newEnv(t, mem, feedConfig("w1", clk, 1, time.Hour))
	if _, _, err := w1.tb.members(ctx, true); err != nil {
		t.Fatal(err)
	}
	r := newFeedReader(t, w1.tb, FeedOptions{MaxRows: 2})
	for i := range 5 {
		a.put(t, w1.tb, fmt.Sprintf("a-%d", i), 100)
	}
	if _, err := r.next(); err != nil {
		t.Fatal(err)
	}
	// w1 stops without a word; w2 takes the partition once w1's heartbeat
	// lapses, fencing w1's open generation.
	clk.Advance(20 * time.Second)
	w2 := newEnv(t, mem, feedConfig("w2", clk, 1, time.Hour))
	for i := range 5 {
		a.put(t, w2.tb, fmt.Sprintf("b-%d", i), 100)
	}
	// The reader's process is neither: a third one reads on.
	r3 := newEnv(t, mem, feedConfig("", clk, 1, time.Hour))
	r.tb = r3.tb
	r.drain()
	a.check(t, r)
	// w1's generation was sealed by w2: the partition's chain went on.
	if h, err := readHead(ctx, w2.db, w2.tb.keys, PartitionName(0)); err != nil || h.Gen != 2 || h.GenStart != 5 || h.Rows != 10 {
		t.Errorf("head after the hand-over: %+v %v", h, err)
	}
}

func TestFeedReadsAfterAckAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New()
	w := newEnv(t, mem, feedConfig("w0", clk, 4, time.Hour))
	rd := newEnv(t, mem, feedConfig("", clk, 4, time.Hour))
	a := acked{}
	r := newFeedReader(t, rd.tb, FeedOptions{})
	r.drain() // the reader's process has seen every head
	for i := range 20 {
		id := fmt.Sprintf("id-%d", i)
		a.put(t, w.tb, id, 100)
		page, err := r.next()
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Rows) != 1 || page.Rows[0].Record.ID != id {
			t.Fatalf("after %s was acknowledged, the next read answered %d rows", id, len(page.Rows))
		}
	}
	a.check(t, r)
	_ = ctx
}

func TestFeedLatestStartsAfterWhatIsThere(t *testing.T) {
	clk := objstoretest.NewClock()
	e := newEnv(t, memory.New(), feedConfig("w0", clk, 2, time.Hour))
	a := acked{}
	for i := range 6 {
		a.put(t, e.tb, fmt.Sprintf("old-%d", i), 100)
	}
	page, err := e.tb.Feed(context.Background(), FeedOptions{Latest: true})
	if err != nil || len(page.Rows) != 0 {
		t.Fatalf("latest: %d rows, %v", len(page.Rows), err)
	}
	e.put("new-1", 100)
	page, err = e.tb.Feed(context.Background(), FeedOptions{Cursor: &page.Next})
	if err != nil || len(page.Rows) != 1 || page.Rows[0].Record.ID != "new-1" {
		t.Fatalf("after latest: %v %v", page, err)
	}
}

func TestFeedFiltersAdvanceTheCursorPastWhatTheyDrop(t *testing.T) {
	clk := objstoretest.NewClock()
	e := newEnv(t, memory.New(), feedConfig("w0", clk, 1, time.Hour))
	a := acked{}
	for i := range 20 {
		a.put(t, e.tb, fmt.Sprintf("id-%02d", i), 100) // problem ids prob-0 … prob-9
	}
	page, err := e.tb.Feed(context.Background(), FeedOptions{Filter: FeedFilter{ProblemID: "prob-3"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Rows) != 2 || page.Rows[0].Record.ID != "id-03" || page.Rows[1].Record.ID != "id-13" {
		t.Fatalf("filtered: %+v", page.Rows)
	}
	if page.Next.Pos[0].Offset != 20 {
		t.Errorf("cursor at %d, want 20", page.Next.Pos[0].Offset)
	}
}

func TestFeedLongPollWakesOnAnotherProcessesAppend(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	cfg := testConfig("w0")
	cfg.Partitions = 4
	cfg.FeedPollInterval = 5 * time.Millisecond
	w := newEnv(t, mem, cfg)
	cfg.Shard = ""
	rd := newEnv(t, mem, cfg)
	first, err := rd.tb.Feed(ctx, FeedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *FeedPage, 1)
	go func() {
		page, err := rd.tb.Feed(ctx, FeedOptions{Cursor: &first.Next, Wait: time.Hour})
		if err != nil {
			t.Error(err)
		}
		got <- page
	}()
	for rd.db.stats.FeedWaiting.Load() != 1 {
		time.Sleep(time.Millisecond) // until the read waits
	}
	w.put("late", 100)
	page := <-got
	if len(page.Rows) != 1 || page.Rows[0].Record.ID != "late" {
		t.Fatalf("the long poll answered %+v", page.Rows)
	}
}

// countHeads counts HEADs of partition heads.
type countHeads struct {
	objstore.Bucket
	n atomic.Int64
}

func (c *countHeads) Head(ctx context.Context, key string) (objstore.Attrs, error) {
	if bytes.HasSuffix([]byte(key), []byte("_head.json")) {
		c.n.Add(1)
	}
	return c.Bucket.Head(ctx, key)
}

func TestLongPollsShareOneProbePerInterval(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mem := memory.New()
	cfg := testConfig("w0")
	cfg.Partitions = 4
	w := newEnv(t, mem, cfg)
	w.put("x", 10)
	store := &countHeads{Bucket: mem}
	cfg.Shard = ""
	cfg.FeedPollInterval = 2 * time.Millisecond
	rd := newEnv(t, store, cfg)
	first, err := rd.tb.Feed(ctx, FeedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const readers = 50
	heads0, rounds0 := store.n.Load(), rd.db.stats.FeedRounds.Load()
	done := make(chan struct{}, readers)
	for range readers {
		go func() {
			_, _ = rd.tb.Feed(ctx, FeedOptions{Cursor: &first.Next, Wait: time.Hour})
			done <- struct{}{}
		}()
	}
	for rd.db.stats.FeedWaiting.Load() != readers {
		time.Sleep(time.Millisecond)
	}
	for rd.db.stats.FeedRounds.Load() < rounds0+20 {
		time.Sleep(time.Millisecond) // twenty rounds of the probe loop
	}
	heads := store.n.Load() - heads0
	rounds := rd.db.stats.FeedRounds.Load() - rounds0
	// The readers began from the heads the process knew, and waited on
	// the loop: four HEADs a round (one in flight at the end), none per
	// reader.
	if heads > 4*(rounds+1) {
		t.Errorf("%d long-polling readers made %d HEADs of heads in %d rounds of the probe loop", readers, heads, rounds)
	}
	cancel()
	for range readers {
		<-done
	}
}

func TestCursorTextRoundTripsAndRefusesDamage(t *testing.T) {
	at := time.Date(2026, 12, 4, 1, 2, 3, 4000000, time.UTC)
	c := Cursor{Incarnation: "i0190000000000abcdef01", Partitions: 16, Group: "learners", Epoch: 7,
		Pos: map[int]Position{0: {Gen: 1, Seg: 1}, 3: {Gen: 9, Seg: 4, Row: 2, Offset: 12345, At: at}, 15: {Gen: 2, Seg: 1, Offset: 77}}}
	got, err := DecodeCursor(EncodeCursor(c))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(c) {
		t.Fatalf("round trip: %v, want %v", got, c)
	}
	s := EncodeCursor(c)
	flip := "A"
	if s[10] == 'A' {
		flip = "B"
	}
	for _, bad := range []string{"", "latest", s[:len(s)-2], s[:10] + flip + s[11:], s + "AA"} {
		if _, err := DecodeCursor(bad); !errors.Is(err, ErrBadCursor) {
			t.Errorf("DecodeCursor(%q) = %v", bad, err)
		}
	}
}

func TestFeedRefusesCursorsOfAnotherIncarnationAndOfTheFuture(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New()
	e := newEnv(t, mem, feedConfig("w0", clk, 2, time.Hour))
	e.put("a", 10)
	page, err := e.tb.Feed(ctx, FeedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ahead := page.Next
	ahead.Pos = map[int]Position{0: {Gen: 5, Seg: 3, Offset: 99}}
	if _, err := e.tb.Feed(ctx, FeedOptions{Cursor: &ahead}); !errors.Is(err, ErrBadCursor) {
		t.Errorf("a cursor ahead of the partition: %v", err)
	}
	dropAndCreate(t, e.db)
	nt, err := e.db.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	_, err = nt.Feed(ctx, FeedOptions{Cursor: &page.Next})
	var exp *CursorExpiredError
	if !errors.As(err, &exp) || exp.Oldest.Incarnation != nt.Incarnation() {
		t.Fatalf("a cursor of the dropped incarnation: %v", err)
	}
}

func TestAwaitFeedAnswersAtTheOwnersCommit(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	cfg := testConfig("w0")
	cfg.Partitions = 2
	cfg.FeedPollInterval = time.Hour // no probe loop would wake anyone
	w := newEnv(t, mem, cfg)
	cfg.Shard = ""
	rd := newEnv(t, mem, cfg)
	first, err := rd.tb.Feed(ctx, FeedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *FeedPage, 1)
	go func() {
		page, err := rd.tb.Feed(ctx, FeedOptions{Cursor: &first.Next, Wait: time.Hour})
		if err != nil {
			t.Error(err)
		}
		got <- page
	}()
	for rd.db.stats.FeedWaiting.Load() != 1 {
		time.Sleep(time.Millisecond) // until the read waits
	}
	// The relay: the reader's process asks the owner, which answers at its
	// commit; the reader's process then probes, and its reader wakes.
	watched := rd.tb.FeedWatch()
	if len(watched) != 2 {
		t.Fatalf("watched %v", watched)
	}
	answer := make(chan map[int]uint64, 1)
	go func() {
		known, err := w.tb.AwaitFeed(ctx, watched, time.Hour)
		if err != nil {
			t.Error(err)
		}
		answer <- known
	}()
	w.put("pushed", 10)
	known := <-answer
	p := PartitionOf("pushed", 2)
	if known[p] != watched[p]+1 {
		t.Fatalf("the owner answered %v, watched %v", known, watched)
	}
	if err := rd.tb.ProbeFeed(ctx, []int{p}); err != nil {
		t.Fatal(err)
	}
	page := <-got
	if len(page.Rows) != 1 || page.Rows[0].Record.ID != "pushed" {
		t.Fatalf("the long poll answered %+v", page.Rows)
	}
}

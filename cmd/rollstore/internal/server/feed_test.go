package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rollstore/rollstore/client"
	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/objstore/memory"
)

// feedPath is the feed of table with query parameters as name, value
// pairs.
func feedPath(table string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	p := "/v1/tables/" + table + "/feed"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return p
}

// feedPage reads one JSON page, failing on anything but 200.
func (e *testEnv) feedPage(table string, kv ...string) (client.FeedPage, response) {
	e.t.Helper()
	r := e.do("GET", feedPath(table, kv...), nil)
	want(e.t, r, http.StatusOK, "")
	var p client.FeedPage
	r.decode(e.t, &p)
	if p.Cursor == "" || r.header.Get(hdrCursor) != p.Cursor {
		e.t.Fatalf("cursor %q in the body, %q in the header", p.Cursor, r.header.Get(hdrCursor))
	}
	if got := r.header.Get(hdrRows); got != fmt.Sprint(len(p.Rows)) {
		e.t.Fatalf("%s: %s, %d rows in the body", hdrRows, got, len(p.Rows))
	}
	return p, r
}

// drainFeed reads pages of max_rows from cursor ("" for the oldest row)
// until one comes back empty; it returns the rows and the last cursor.
func (e *testEnv) drainFeed(table, cursor string, maxRows int, kv ...string) ([]client.FeedRow, string) {
	e.t.Helper()
	var rows []client.FeedRow
	for range 1000 {
		args := append([]string{"max_rows", fmt.Sprint(maxRows)}, kv...)
		if cursor != "" {
			args = append(args, "cursor", cursor)
		}
		p, _ := e.feedPage(table, args...)
		cursor = p.Cursor
		if len(p.Rows) == 0 {
			return rows, cursor
		}
		rows = append(rows, p.Rows...)
	}
	e.t.Fatal("the feed never came to an empty page")
	return nil, ""
}

func (e *testEnv) putFields(table, id string, f client.Fields, payload []byte) {
	e.t.Helper()
	if f.RolloutID == "" {
		f.RolloutID = "r-" + id
	}
	if res, err := e.client.Put(context.Background(), table, id, f, bytes.NewReader(payload)); err != nil || !res.Created {
		e.t.Fatalf("put %s: %+v %v", id, res, err)
	}
}

// checkFeedOrder fails unless rows hold each of ids once, and each
// partition's rows come in the order ids were acknowledged (ids' order)
// with offsets from first[p], dense.
func checkFeedOrder(t *testing.T, rows []client.FeedRow, ids []string, first map[int]uint64) {
	t.Helper()
	if len(rows) != len(ids) {
		t.Fatalf("%d rows, want %d", len(rows), len(ids))
	}
	next := map[int]uint64{}
	for p, o := range first {
		next[p] = o
	}
	last := map[int]int{}
	seen := map[string]bool{}
	for _, r := range rows {
		i := slices.Index(ids, r.ID)
		switch {
		case i < 0 || seen[r.ID]:
			t.Fatalf("row %q: unexpected or delivered twice", r.ID)
		case r.Offset != next[r.Partition]:
			t.Fatalf("row %q of partition %d has offset %d, want %d", r.ID, r.Partition, r.Offset, next[r.Partition])
		}
		if l, ok := last[r.Partition]; ok && l > i {
			t.Fatalf("partition %d delivers %q before %q, acknowledged after it", r.Partition, ids[l], r.ID)
		}
		if r.AckedAt.IsZero() {
			t.Fatalf("row %q without acked_at", r.ID)
		}
		seen[r.ID], last[r.Partition] = true, i
		next[r.Partition]++
	}
}

func TestFeedDeliversEachPartitionInAckOrderWithDenseOffsets(t *testing.T) {
	e := newEnv(t)
	e.createTableWith("t", 4)
	var ids []string
	for i := range 40 {
		id := fmt.Sprintf("row-%02d", i)
		e.mustPut("t", id, payloadOf(id, 10+i))
		ids = append(ids, id)
	}
	rows, cursor := e.drainFeed("t", "", 7)
	checkFeedOrder(t, rows, ids, nil)
	parts := map[int]bool{}
	for _, r := range rows {
		parts[r.Partition] = true
		if r.Carried || r.PayloadURL != rolloutURL("t", r.ID)+"/payload" || r.RolloutID != "r-"+r.ID {
			t.Fatalf("row %+v: want its record and payload_url, no payload", r)
		}
	}
	if len(parts) < 2 {
		t.Fatalf("40 ids in %d partitions", len(parts))
	}
	// At the end: nothing behind, every partition read.
	p, r := e.feedPage("t", "cursor", cursor)
	if len(p.Rows) != 0 || p.LagRows != 0 || r.header.Get(hdrLagRows) != "0" || !slices.Equal(p.Partitions, []int{0, 1, 2, 3}) {
		t.Fatalf("page at the end: %+v", p)
	}
	// From the start with a page of 1: the lag counts what is left.
	p, r = e.feedPage("t", "max_rows", "1")
	if len(p.Rows) != 1 || p.LagRows != 39 || r.header.Get(hdrLagRows) != "39" {
		t.Fatalf("first page of one row: %d rows, lag %d", len(p.Rows), p.LagRows)
	}
}

func TestFeedCursorResumesWithoutGapOrDuplicate(t *testing.T) {
	e := newEnv(t)
	e.createTableWith("t", 3)
	var ids []string
	put := func(n int) {
		for range n {
			id := fmt.Sprintf("id-%03d", len(ids))
			e.mustPut("t", id, []byte(id))
			ids = append(ids, id)
		}
	}
	put(10)
	rows, cursor := e.drainFeed("t", "", 4)
	checkFeedOrder(t, rows, ids, nil)
	put(10)
	more, _ := e.drainFeed("t", cursor, 3)
	checkFeedOrder(t, append(rows, more...), ids, nil)

	// The Go client keeps the cursor and resumes from one given.
	ctx := context.Background()
	fr := e.client.Feed("t", client.FeedOptions{MaxRows: 5})
	var got []client.FeedRow
	for {
		p, err := fr.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Rows) == 0 {
			break
		}
		got = append(got, p.Rows...)
		if len(got) == 10 {
			// A new reader from this one's cursor takes over.
			fr = e.client.Feed("t", client.FeedOptions{MaxRows: 5, Cursor: fr.Cursor()})
		}
	}
	checkFeedOrder(t, got, ids, nil)

	// latest: only what is acknowledged after it.
	p, _ := e.feedPage("t", "cursor", "latest")
	if len(p.Rows) != 0 {
		t.Fatalf("latest delivered %d rows", len(p.Rows))
	}
	put(2)
	after, _ := e.drainFeed("t", p.Cursor, 10)
	checkFeedOrder(t, after, ids[len(ids)-2:], offsetsAfter(rows, more))
}

// offsetsAfter is, per partition, the offset after the rows given.
func offsetsAfter(rowSets ...[]client.FeedRow) map[int]uint64 {
	out := map[int]uint64{}
	for _, rows := range rowSets {
		for _, r := range rows {
			out[r.Partition] = max(out[r.Partition], r.Offset+1)
		}
	}
	return out
}

// TestFeedReadsAfterAckAcrossServers: a row acknowledged by one server is
// in the next feed read of another, from a cursor taken before the write.
func TestFeedReadsAfterAckAcrossServers(t *testing.T) {
	a, b := twoPods(t, memory.New())
	for i := range 6 {
		want(t, a.put("t", fmt.Sprintf("early-%d", i), []byte("x")), http.StatusCreated, "")
	}
	r := b.do("GET", feedPath("t", "max_rows", "100"), nil)
	want(t, r, http.StatusOK, "")
	var before client.FeedPage
	r.decode(t, &before)
	if len(before.Rows) != 6 {
		t.Fatalf("b reads %d rows of 6", len(before.Rows))
	}
	for i := range 8 {
		id := fmt.Sprintf("late-%d", i)
		want(t, a.put("t", id, []byte(id)), http.StatusCreated, "")
		r := b.do("GET", feedPath("t", "cursor", before.Cursor, "max_rows", "100"), nil)
		want(t, r, http.StatusOK, "")
		var p client.FeedPage
		r.decode(t, &p)
		var got []string
		for _, row := range p.Rows {
			got = append(got, row.ID)
		}
		if len(got) != i+1 || !slices.Contains(got, id) {
			t.Fatalf("after %s was acknowledged by a, b's feed from the earlier cursor holds %v", id, got)
		}
	}
}

// startFeed sends a feed request in the background.
func (e *testEnv) startFeed(path string, hdr ...string) <-chan response {
	done := make(chan response, 1)
	go func() {
		req, _ := http.NewRequest("GET", e.ts.URL+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := e.ts.Client().Do(req)
		if err != nil {
			done <- response{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		done <- response{status: resp.StatusCode, header: resp.Header, body: b.Bytes()}
	}()
	return done
}

// waitFeedWaiting returns once n feed reads wait for a row in the engine
// (after their read found none), as rollstore_feed_waiting reports.
func (e *testEnv) waitFeedWaiting(ctx context.Context, n int64) {
	e.t.Helper()
	for e.db.Stats().FeedWaiting.Load() != n {
		select {
		case <-ctx.Done():
			e.t.Fatalf("%d feed reads wait, want %d", e.db.Stats().FeedWaiting.Load(), n)
		case <-time.After(time.Millisecond): // polls the engine's state; it orders nothing
		}
	}
}

// TestFeedLongPollAnswersWhenARowIsAppended: a long-poll waiting on an
// empty partition answers with the row appended while it waits.
func TestFeedLongPollAnswersWhenARowIsAppended(t *testing.T) {
	e := newEnv(t)
	e.createTableWith("t", 2)
	p, _ := e.feedPage("t", "cursor", "latest")
	done := e.startFeed(feedPath("t", "cursor", p.Cursor, "wait", "60"))
	ctx := waitCtx(t)
	e.waitFeedWaiting(ctx, 1)
	if got := testutil.ToFloat64(e.srv.metrics.feedWaiting); got != 1 {
		t.Fatalf("rollstore_feed_long_polls %v while one long-poll waits", got)
	}
	if m, err := e.client.Metrics(ctx); err != nil || !bytes.Contains(m, []byte("\nrollstore_feed_waiting 1\n")) {
		t.Fatalf("metrics while one long-poll waits: %v\n%s", err, m)
	}
	e.mustPut("t", "awaited", []byte("hello"))
	var r response
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the long-poll did not answer after the append")
	}
	want(t, r, http.StatusOK, "")
	var got client.FeedPage
	r.decode(t, &got)
	if len(got.Rows) != 1 || got.Rows[0].ID != "awaited" || got.Rows[0].Offset != 0 {
		t.Fatalf("long-poll answered %+v", got)
	}
	if n := testutil.ToFloat64(e.srv.metrics.feedWaiting); n != 0 {
		t.Fatalf("rollstore_feed_waiting %v after the answer", n)
	}
}

// TestFeedLongPollsHoldNoRequestSlot: with one request slot and one
// waiting slot, a waiting long-poll leaves the request slot to others,
// and a second long-poll is answered at once, empty, with its cursor.
func TestFeedLongPollsHoldNoRequestSlot(t *testing.T) {
	e := newEnv(t, func(o *envOptions) {
		o.server.MaxConcurrentRequests = 1
		o.server.FeedMaxWaiting = 1
	})
	e.createTableWith("t", 2)
	e.mustPut("t", "a", []byte("a"))
	p, _ := e.feedPage("t")
	gate := e.hooks.Pause(feedWaitPoint)
	done := e.startFeed(feedPath("t", "cursor", p.Cursor, "wait", "60"))
	if err := gate.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	// The long-poll holds the waiting slot; the request slot is free.
	want(t, e.do("GET", rolloutURL("t", "a"), nil), http.StatusOK, "")
	second, _ := e.feedPage("t", "cursor", p.Cursor, "wait", "60")
	if len(second.Rows) != 0 || second.Cursor == "" {
		t.Fatalf("a long-poll beyond the waiting slots: %+v", second)
	}
	gate.Release()
	e.mustPut("t", "b", []byte("b"))
	r := <-done
	want(t, r, http.StatusOK, "")
	var got client.FeedPage
	r.decode(t, &got)
	if len(got.Rows) != 1 || got.Rows[0].ID != "b" {
		t.Fatalf("the waiting long-poll answered %+v", got)
	}
}

// TestFeedDrainAnswersWaitingLongPollsAtOnce: when the drain starts, a
// waiting long-poll answers (empty, with its cursor) instead of holding
// the drain up.
func TestFeedDrainAnswersWaitingLongPollsAtOnce(t *testing.T) {
	e := newEnv(t)
	e.createTableWith("t", 2)
	p, _ := e.feedPage("t", "cursor", "latest")
	done := e.startFeed(feedPath("t", "cursor", p.Cursor, "wait", "60"))
	ctx := waitCtx(t)
	e.waitFeedWaiting(ctx, 1)
	e.srv.StartDrain()
	var r response
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the waiting long-poll did not answer when the drain started")
	}
	want(t, r, http.StatusOK, "")
	var got client.FeedPage
	r.decode(t, &got)
	if len(got.Rows) != 0 || got.Cursor == "" {
		t.Fatalf("answer at the drain: %+v", got)
	}
}

// TestFeedExpiredCursorIsGoneWithTheOldestCursor: a cursor into
// generations reclaimed after their merge (no feed retention) is 410
// cursor_expired; the oldest cursor it names reads on.
func TestFeedExpiredCursorIsGoneWithTheOldestCursor(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.engine.FeedRetention = 0 })
	e.createTableWith("t", 1)
	e.mustPut("t", "a", []byte("a"))
	p, _ := e.feedPage("t")
	if len(p.Rows) != 1 {
		t.Fatalf("%d rows", len(p.Rows))
	}
	e.mustPut("t", "b", []byte("b"))
	e.merge("t")
	e.merge("t")
	r := e.do("GET", feedPath("t", "cursor", p.Cursor), nil)
	want(t, r, http.StatusGone, codeCursorExpired)
	oldest := r.errDetail().OldestCursor
	if oldest == "" {
		t.Fatalf("410 without oldest_cursor: %s", r.body)
	}
	if got := testutil.ToFloat64(e.srv.metrics.feedRequests.WithLabelValues("expired")); got != 1 {
		t.Fatalf("expired feed requests counted %v", got)
	}
	e.mustPut("t", "c", []byte("c"))
	rows, _ := e.drainFeed("t", oldest, 10)
	if len(rows) == 0 || rows[len(rows)-1].ID != "c" {
		t.Fatalf("from the oldest cursor: %+v", rows)
	}

	// The Go client's error carries it too.
	_, err := e.client.Feed("t", client.FeedOptions{Cursor: p.Cursor}).Next(context.Background())
	var ce *client.CursorExpiredError
	if !errors.As(err, &ce) || ce.Oldest != oldest || !errors.Is(err, client.ErrGone) || !errors.Is(err, client.ErrCursorExpired) {
		t.Fatalf("client error %v (%T)", err, err)
	}
}

func TestFeedRefusesBadInput(t *testing.T) {
	e := newEnv(t)
	e.createTableWith("t", 4)
	if err := e.db.CreateTableWith(context.Background(), "legacy", engine.TableOptions{Partitions: -1}); err != nil {
		t.Fatal(err)
	}
	p, _ := e.feedPage("t")
	for _, c := range []struct {
		query  string
		status int
		code   string
	}{
		{"colour=red", 400, codeInvalidArgument},
		{"max_rows=1&max_rows=2", 400, codeInvalidArgument},
		{"cursor=%zz", 400, codeInvalidArgument},
		{"cursor=not-a-cursor", 400, codeBadCursor},
		{"cursor=", 400, codeBadCursor},
		{"partitions=4", 400, codeInvalidArgument},
		{"partitions=0,0", 400, codeInvalidArgument},
		{"partitions=-1", 400, codeInvalidArgument},
		{"partitions=", 400, codeInvalidArgument},
		{"max_rows=0", 400, codeInvalidArgument},
		{"max_rows=ten", 400, codeInvalidArgument},
		{"max_bytes=-5", 400, codeInvalidArgument},
		{"payloads=some", 400, codeInvalidArgument},
		{"wait=-1", 400, codeInvalidArgument},
		{"wait=NaN", 400, codeInvalidArgument},
		{"wait=1e3", 400, codeInvalidArgument},
		{"columns=id,colour", 400, codeInvalidArgument},
		{"member=m", 400, codeInvalidArgument},
		{"group=g&commit=maybe", 400, codeInvalidArgument},
		{"commit=true", 400, codeInvalidArgument},
		{"group=g&member=m&commit=yes", 400, codeInvalidArgument},
		{"group=.g&member=m", 400, codeInvalidArgument},
		{"group=g&member=" + strings.Repeat("m", 65), 400, codeInvalidArgument},
		{"group=g&member=m&partitions=1", 400, codeInvalidArgument},
	} {
		r := e.do("GET", "/v1/tables/t/feed?"+c.query, nil)
		if r.status != c.status || r.errCode() != c.code {
			t.Errorf("?%s: %d %s, want %d %s", c.query, r.status, r.body, c.status, c.code)
		}
	}
	want(t, e.do("GET", feedPath("nope"), nil), http.StatusNotFound, codeTableNotFound)
	want(t, e.do("GET", feedPath("legacy"), nil), http.StatusConflict, codeFeedUnsupported)
	want(t, e.do("GET", feedPath("legacy", "cursor", p.Cursor), nil), http.StatusConflict, codeFeedUnsupported)
	if got := testutil.ToFloat64(e.srv.metrics.feedRequests.WithLabelValues("error")); got < 20 {
		t.Fatalf("refused feed requests counted %v", got)
	}
	// Nothing was joined or stored by the refused requests.
	if gs, err := e.client.Consumers(context.Background(), "t"); err != nil || len(gs) != 0 {
		t.Fatalf("consumers after refused requests: %+v %v", gs, err)
	}
}

func TestFeedFiltersAndProjection(t *testing.T) {
	e := newEnv(t)
	e.createTableWith("t", 2)
	for i := range 12 {
		id := fmt.Sprintf("f-%02d", i)
		e.putFields("t", id, client.Fields{RolloutID: fmt.Sprintf("run-%d", i%3), ProblemID: "p", PolicyVersion: "v1", Role: "agent"}, []byte(id))
	}
	rows, cursor := e.drainFeed("t", "", 100, "rollout_id", "run-1")
	if len(rows) != 4 {
		t.Fatalf("%d rows of run-1, want 4", len(rows))
	}
	for _, r := range rows {
		if r.RolloutID != "run-1" {
			t.Fatalf("filter let %+v through", r)
		}
	}
	// The filtered-out rows advanced the cursor too: nothing is left.
	if p, _ := e.feedPage("t", "cursor", cursor); len(p.Rows) != 0 || p.LagRows != 0 {
		t.Fatalf("after the filtered read: %+v", p)
	}
	if rows, _ := e.drainFeed("t", "", 100, "policy_version", "v2"); len(rows) != 0 {
		t.Fatalf("policy_version v2: %d rows", len(rows))
	}

	// Projection: id and the feed's columns always, then those asked.
	r := e.do("GET", feedPath("t", "columns", "rollout_id,sequence", "max_rows", "3"), nil)
	want(t, r, http.StatusOK, "")
	var page struct {
		Rows []map[string]json.RawMessage `json:"rows"`
	}
	r.decode(t, &page)
	if len(page.Rows) != 3 {
		t.Fatalf("%d rows", len(page.Rows))
	}
	for _, row := range page.Rows {
		var keys []string
		for k := range row {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, []string{"acked_at", "id", "offset", "partition", "payload_url", "rollout_id", "sequence"}) {
			t.Fatalf("projected row has %v", keys)
		}
	}
}

func TestFeedCarriesPayloadsWithinTheBudget(t *testing.T) {
	e := newEnv(t)
	e.createTableWith("t", 1)
	// 10 KiB each: above the inline limit, so the feed fetches them.
	payloads := map[string][]byte{}
	var ids []string
	for i := range 5 {
		id := fmt.Sprintf("big-%d", i)
		payloads[id] = payloadOf(id, 10<<10)
		e.mustPut("t", id, payloads[id])
		ids = append(ids, id)
	}
	e.mustPut("t", "empty", nil)
	payloads["empty"] = []byte{}
	ids = append(ids, "empty")

	// Within a 25 KiB budget: two of 10 KiB per answer, each answer ending
	// before the row whose payload only the next one has room for.
	var rows []client.FeedRow
	var shape []int
	cursor := ""
	for range 10 {
		args := []string{"payloads", fmt.Sprint(25 << 10)}
		if cursor != "" {
			args = append(args, "cursor", cursor)
		}
		p, _ := e.feedPage("t", args...)
		if len(p.Rows) == 0 {
			break
		}
		rows, shape, cursor = append(rows, p.Rows...), append(shape, len(p.Rows)), p.Cursor
	}
	checkFeedOrder(t, rows, ids, nil)
	if fmt.Sprint(shape) != "[2 2 2]" {
		t.Fatalf("answers of %v rows, want [2 2 2]", shape)
	}
	for _, r := range rows {
		if !r.Carried || !bytes.Equal(r.Payload, payloads[r.ID]) || r.PayloadURL != "" {
			t.Fatalf("row %s carries %v, %d bytes and url %q", r.ID, r.Carried, len(r.Payload), r.PayloadURL)
		}
	}
	if got := testutil.ToFloat64(e.srv.metrics.feedPayloadBytes); got != 50<<10 {
		t.Fatalf("rollstore_feed_payload_bytes_total %v", got)
	}
	// A budget below a payload never carries it: its URL serves the bytes,
	// by range too.
	small, _ := e.feedPage("t", "payloads", fmt.Sprint(5<<10))
	if len(small.Rows) != 6 {
		t.Fatalf("%d rows with a 5 KiB budget", len(small.Rows))
	}
	for _, r := range small.Rows[:5] {
		if r.Carried {
			t.Fatalf("row %s carried in a budget smaller than its payload", r.ID)
		}
		got := e.do("GET", r.PayloadURL, nil)
		if got.status != http.StatusOK || !bytes.Equal(got.body, payloads[r.ID]) {
			t.Fatalf("%s: %d, %d bytes", r.PayloadURL, got.status, len(got.body))
		}
		part := e.do("GET", r.PayloadURL, nil, "Range", "bytes=0-9")
		if part.status != http.StatusPartialContent || !bytes.Equal(part.body, payloads[r.ID][:10]) {
			t.Fatalf("%s by range: %d", r.PayloadURL, part.status)
		}
	}
	all, _ := e.feedPage("t", "payloads", "all")
	for _, r := range all.Rows {
		if !r.Carried || !bytes.Equal(r.Payload, payloads[r.ID]) {
			t.Fatalf("payloads=all: row %s carried %v", r.ID, r.Carried)
		}
	}
}

func TestFeedAnswersNDJSON(t *testing.T) {
	e := newEnv(t)
	e.createTableWith("t", 2)
	for i := range 5 {
		e.mustPut("t", fmt.Sprintf("n-%d", i), []byte("x"))
	}
	r := e.do("GET", feedPath("t", "max_rows", "3", "payloads", "all"), nil, "Accept", "application/x-ndjson")
	want(t, r, http.StatusOK, "")
	if ct := r.header.Get("Content-Type"); ct != mediaNDJSON {
		t.Fatalf("Content-Type %q", ct)
	}
	sc := bufio.NewScanner(bytes.NewReader(r.body))
	var lines []map[string]json.RawMessage
	for sc.Scan() {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 3 rows and the envelope", len(lines))
	}
	for _, l := range lines[:3] {
		if _, ok := l["cursor"]; ok || l["payload"] == nil {
			t.Fatalf("row line %v", l)
		}
	}
	var cursor string
	if err := json.Unmarshal(lines[3]["cursor"], &cursor); err != nil || cursor != r.header.Get(hdrCursor) {
		t.Fatalf("last line %v, header cursor %q", lines[3], r.header.Get(hdrCursor))
	}
	if string(lines[3]["lag_rows"]) != "2" {
		t.Fatalf("lag_rows %s, want 2", lines[3]["lag_rows"])
	}
}

func TestFeedAnswersArrowWithTheCursorInTheSchema(t *testing.T) {
	e := newEnv(t)
	e.createTableWith("t", 2)
	reward := 0.5
	for i := range 4 {
		id := fmt.Sprintf("a-%d", i)
		e.putFields("t", id, client.Fields{Reward: &reward, Metadata: map[string]int{"i": i}, ContentType: "text/plain"}, payloadOf(id, 100))
	}
	read := func(kv ...string) (arrow.RecordBatch, *arrow.Schema, string) {
		t.Helper()
		r := e.do("GET", feedPath("t", kv...), nil, "Accept", mediaArrow)
		want(t, r, http.StatusOK, "")
		if ct := r.header.Get("Content-Type"); ct != mediaArrow {
			t.Fatalf("Content-Type %q", ct)
		}
		rd, err := ipc.NewReader(bytes.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rd.Release)
		sc := rd.Schema()
		if c, ok := sc.Metadata().GetValue(metaCursor); !ok || c != r.header.Get(hdrCursor) {
			t.Fatalf("schema metadata cursor %q, header %q", c, r.header.Get(hdrCursor))
		}
		if !rd.Next() {
			return nil, sc, r.header.Get(hdrCursor)
		}
		b := rd.RecordBatch()
		b.Retain()
		t.Cleanup(b.Release)
		if rd.Next() {
			t.Fatal("more than one batch")
		}
		return b, sc, r.header.Get(hdrCursor)
	}
	// A budget smaller than every payload carries none: each row has its
	// URL instead.
	b, sc, cursor := read("payloads", "50", "max_rows", "10")
	if b == nil || b.NumRows() != 4 {
		t.Fatalf("batch %v", b)
	}
	var names []string
	for _, f := range sc.Fields() {
		names = append(names, f.Name)
	}
	wantNames := append(slices.Clone(recordColumns), "partition", "offset", "acked_at", "payload_url", "payload")
	if !slices.Equal(names, wantNames) {
		t.Fatalf("columns %v, want %v", names, wantNames)
	}
	col := func(name string) arrow.Array { return b.Column(sc.FieldIndices(name)[0]) }
	ids, payload, urls := col("id").(*array.String), col("payload").(*array.Binary), col("payload_url").(*array.String)
	offsets, parts := col("offset").(*array.Int64), col("partition").(*array.Int32)
	carried := 0
	for i := range int(b.NumRows()) {
		id := ids.Value(i)
		if payload.IsValid(i) {
			carried++
			if !bytes.Equal(payload.Value(i), payloadOf(id, 100)) || urls.IsValid(i) {
				t.Fatalf("row %s: payload and url", id)
			}
		} else if urls.Value(i) != rolloutURL("t", id)+"/payload" {
			t.Fatalf("row %s: url %q", id, urls.Value(i))
		}
		if parts.Value(i) < 0 || parts.Value(i) > 1 || offsets.Value(i) < 0 {
			t.Fatalf("row %s: partition %d offset %d", id, parts.Value(i), offsets.Value(i))
		}
	}
	if carried != 0 {
		t.Fatalf("%d rows carried in 50 bytes of 100-byte payloads", carried)
	}
	all, allSchema, _ := read("payloads", "all")
	if all == nil || all.NumRows() != 4 {
		t.Fatalf("payloads=all: batch %v", all)
	}
	allIDs, allPayload := all.Column(allSchema.FieldIndices("id")[0]).(*array.String), all.Column(allSchema.FieldIndices("payload")[0]).(*array.Binary)
	for i := range int(all.NumRows()) {
		if !allPayload.IsValid(i) || !bytes.Equal(allPayload.Value(i), payloadOf(allIDs.Value(i), 100)) {
			t.Fatalf("payloads=all: row %s not carried", allIDs.Value(i))
		}
	}
	if col("reward").(*array.Float64).Value(0) != 0.5 || col("acked_at").(*array.Timestamp).Value(0) == 0 {
		t.Fatal("reward or acked_at wrong")
	}

	// Projected, and at the end: the schema alone, with the cursor.
	b, sc, _ = read("cursor", cursor, "columns", "rollout_id")
	if b != nil {
		t.Fatalf("%d rows past the end", b.NumRows())
	}
	names = names[:0]
	for _, f := range sc.Fields() {
		names = append(names, f.Name)
	}
	if !slices.Equal(names, []string{"id", "rollout_id", "partition", "offset", "acked_at", "payload_url", "payload"}) {
		t.Fatalf("projected columns %v", names)
	}
}

func TestFeedMediaFromAccept(t *testing.T) {
	for accept, want := range map[string]string{
		"":                     mediaJSON,
		"*/*":                  mediaJSON,
		"text/html":            mediaJSON,
		"application/x-ndjson": mediaNDJSON,
		"application/vnd.apache.arrow.stream, application/json;q=0.5": mediaArrow,
		"application/json;q=0.2, application/x-ndjson;q=0.9":          mediaNDJSON,
		"application/x-ndjson;q=0, */*;q=0.1":                         mediaJSON,
	} {
		if got := feedMedia(accept); got != want {
			t.Errorf("feedMedia(%q) = %q, want %q", accept, got, want)
		}
	}
}

// TestFeedLongPollsBeyondTheClientShareAnswerAtOnce: one client holds at
// most its share of the waiting slots; its next long-poll is answered at
// once while another client's still waits.
func TestFeedLongPollsBeyondTheClientShareAnswerAtOnce(t *testing.T) {
	e := newEnv(t, func(o *envOptions) {
		o.server.FeedMaxWaiting = 4
		o.server.MaxClientShare = 0.5
		o.server.AuthTokens = []string{"one", "two"}
	})
	auth := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	want(t, e.do("PUT", "/v1/tables/t?partitions=2", nil, auth("one")...), http.StatusCreated, "")
	r := e.do("GET", feedPath("t", "cursor", "latest"), nil, auth("one")...)
	want(t, r, http.StatusOK, "")
	cursor := r.header.Get(hdrCursor)
	ctx := waitCtx(t)
	var polls []<-chan response
	for i := range 2 {
		polls = append(polls, e.startFeed(feedPath("t", "cursor", cursor, "wait", "60"), auth("one")...))
		e.waitFeedWaiting(ctx, int64(i+1))
	}
	// Client one holds its two slots of four: its third long-poll does not wait.
	r = e.do("GET", feedPath("t", "cursor", cursor, "wait", "60"), nil, auth("one")...)
	want(t, r, http.StatusOK, "")
	if r.header.Get(hdrRows) != "0" || r.header.Get(hdrCursor) == "" {
		t.Fatalf("long-poll beyond the client's share: %v", r.header)
	}
	// Client two's waits.
	polls = append(polls, e.startFeed(feedPath("t", "cursor", cursor, "wait", "60"), auth("two")...))
	e.waitFeedWaiting(ctx, 3)
	if got := testutil.ToFloat64(e.srv.metrics.feedWaiting); got != 3 {
		t.Fatalf("rollstore_feed_long_polls %v", got)
	}
	want(t, e.put("t", "x", `{"rollout_id":"r"}`, []byte("x"), auth("one")...), http.StatusCreated, "")
	for _, p := range polls {
		select {
		case r := <-p:
			want(t, r, http.StatusOK, "")
			if r.header.Get(hdrRows) != "1" {
				t.Fatalf("a waiting long-poll answered %s rows", r.header.Get(hdrRows))
			}
		case <-ctx.Done():
			t.Fatal("a waiting long-poll did not answer")
		}
	}
}

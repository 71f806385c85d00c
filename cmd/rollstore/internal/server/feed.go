package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/engine/rowfile"
)

// The feed: GET /v1/tables/{table}/feed reads a partitioned table's rows
// in acknowledgement order per partition, from a cursor, as JSON, NDJSON
// or an Arrow stream; with group and member it reads as a member of a
// consumer group (consumers.go).

const mediaJSON = "application/json"

// Answer headers of the feed.
const (
	hdrCursor     = "Rollstore-Cursor"
	hdrRows       = "Rollstore-Rows"
	hdrLagRows    = "Rollstore-Lag-Rows"
	hdrEpoch      = "Rollstore-Group-Epoch"
	hdrPartitions = "Rollstore-Partitions"
	hdrRebalanced = "Rollstore-Rebalanced"
)

// feedWaitPoint is the hook point a long-poll passes once it holds its
// waiting slot.
const feedWaitPoint = "feed:waiting"

// metaCursor is the Arrow schema metadata key of the next cursor.
const metaCursor = "rollstore.cursor"

// consumerName is the alphabet of group and member names.
var consumerName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$`)

func checkConsumerName(what, name string) error {
	if !consumerName.MatchString(name) {
		return badRequest("%s %q: want 1 to 64 of [A-Za-z0-9_.-], not starting with '.' or '-'", what, name)
	}
	return nil
}

// recordColumns are the record's columns, in the scan's order, the
// payload left out (it is a feed column here: carried bytes or a URL).
var recordColumns = func() []string {
	var names []string
	for _, f := range rowfile.Schema.Fields() {
		if f.Name != "payload" {
			names = append(names, f.Name)
		}
	}
	return names
}()

// feedColumns are always in a feed answer; naming them in columns is
// allowed and changes nothing.
var feedColumns = []string{"partition", "offset", "acked_at", "payload", "payload_url"}

// feedQuery is a feed request's parameters, checked.
type feedQuery struct {
	cursor     *engine.Cursor
	latest     bool
	partitions []int
	maxRows    int
	maxBytes   int64
	payloads   int64
	wait       time.Duration
	filter     engine.FeedFilter
	// columns is the projection (nil: every column); id is in it.
	columns       map[string]bool
	group, member string
	commit        bool
}

// parseFeedQuery checks every parameter but the partitions' range, which
// needs the table.
func (s *Server) parseFeedQuery(q url.Values) (*feedQuery, error) {
	fq := &feedQuery{maxRows: min(engine.DefaultFeedRows, s.cfg.FeedMaxRows), maxBytes: min(engine.DefaultFeedBytes, s.cfg.FeedMaxBytes), commit: true}
	if q.Has("cursor") {
		switch c := q.Get("cursor"); c {
		case "latest":
			fq.latest = true
		case "":
			return nil, &apiError{status: http.StatusBadRequest, code: codeBadCursor, msg: "cursor is empty: pass the cursor of a previous answer, or latest, or leave it out to read from the oldest row"}
		default:
			cur, err := engine.DecodeCursor(c)
			if err != nil {
				return nil, &apiError{status: http.StatusBadRequest, code: codeBadCursor, msg: "cursor: pass the cursor of a previous answer unchanged", err: err}
			}
			fq.cursor = &cur
		}
	}
	if q.Has("partitions") {
		v := q.Get("partitions")
		for p := range strings.SplitSeq(v, ",") {
			n, ok := parseDigits(p)
			if !ok || n > math.MaxInt32 {
				return nil, badRequest("partitions %q: want a comma-separated list of partition numbers, e.g. 0,3,7", v)
			}
			if slices.Contains(fq.partitions, int(n)) {
				return nil, badRequest("partitions %q: partition %d is listed twice", v, n)
			}
			fq.partitions = append(fq.partitions, int(n))
		}
	}
	if q.Has("max_rows") {
		n, ok := parseDigits(q.Get("max_rows"))
		if !ok || n == 0 {
			return nil, badRequest("max_rows must be a positive integer, got %q", q.Get("max_rows"))
		}
		fq.maxRows = int(min(n, int64(s.cfg.FeedMaxRows)))
	}
	if q.Has("max_bytes") {
		n, ok := parseDigits(q.Get("max_bytes"))
		if !ok || n == 0 {
			return nil, badRequest("max_bytes must be a positive integer, got %q", q.Get("max_bytes"))
		}
		fq.maxBytes = min(n, s.cfg.FeedMaxBytes)
	}
	if q.Has("payloads") {
		switch v := q.Get("payloads"); v {
		case "all":
			fq.payloads = fq.maxBytes
		default:
			n, ok := parseDigits(v)
			if !ok {
				return nil, badRequest("payloads must be a byte budget (a non-negative integer) or all, got %q", v)
			}
			fq.payloads = min(n, fq.maxBytes)
		}
	}
	if q.Has("wait") {
		v := q.Get("wait")
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil || secs < 0 || math.IsNaN(secs) || math.IsInf(secs, 0) || strings.ContainsAny(v, "xXpPeE_") {
			return nil, badRequest("wait must be a number of seconds, e.g. 10 or 0.5, got %q", v)
		}
		fq.wait = min(time.Duration(secs*float64(time.Second)), s.cfg.FeedMaxWait)
	}
	fq.filter = engine.FeedFilter{RolloutID: q.Get("rollout_id"), ProblemID: q.Get("problem_id"), PolicyVersion: q.Get("policy_version")}
	if q.Has("columns") {
		v := q.Get("columns")
		fq.columns = map[string]bool{"id": true}
		for c := range strings.SplitSeq(v, ",") {
			if !slices.Contains(recordColumns, c) && !slices.Contains(feedColumns, c) {
				return nil, badRequest("columns: unknown column %q; the record's columns are %s", c, strings.Join(recordColumns, ", "))
			}
			fq.columns[c] = true
		}
	}
	fq.group, fq.member = q.Get("group"), q.Get("member")
	switch {
	case q.Has("member") && !q.Has("group"):
		return nil, badRequest("member needs its group: a consumer-group member names both")
	case q.Has("member"):
		if err := checkConsumerName("group", fq.group); err != nil {
			return nil, err
		}
		if err := checkConsumerName("member", fq.member); err != nil {
			return nil, err
		}
		if fq.partitions != nil {
			return nil, badRequest("partitions cannot be given with group and member: a member reads the partitions the group assigns it")
		}
	case q.Has("group"):
		// A named consumer: its workers each read (and commit) partitions
		// of their own.
		if err := checkConsumerName("group", fq.group); err != nil {
			return nil, err
		}
	case q.Has("commit"):
		return nil, badRequest("commit is for consumers: give it with group (and member, for a group member)")
	}
	if q.Has("commit") {
		switch v := q.Get("commit"); v {
		case "true":
		case "false":
			fq.commit = false
		default:
			return nil, badRequest("commit must be true or false, got %q", v)
		}
	}
	return fq, nil
}

// feedAnswer is what a feed read answers besides its rows.
type feedAnswer struct {
	page       *engine.FeedPage
	next       engine.Cursor
	lagRows    uint64
	partitions []int
	// group answers only.
	group      bool
	epoch      uint64
	rebalanced bool
}

// feedEnvelope is the JSON answer without its rows (the last line of an
// NDJSON answer).
type feedEnvelope struct {
	Cursor     string  `json:"cursor"`
	LagRows    uint64  `json:"lag_rows"`
	Partitions []int   `json:"partitions"`
	Epoch      *uint64 `json:"epoch,omitempty"`
	Rebalanced *bool   `json:"rebalanced,omitempty"`
}

func (a *feedAnswer) envelope() feedEnvelope {
	env := feedEnvelope{Cursor: engine.EncodeCursor(a.next), LagRows: a.lagRows, Partitions: a.partitions}
	if env.Partitions == nil {
		env.Partitions = []int{}
	}
	if a.group {
		epoch, reb := a.epoch, a.rebalanced
		env.Epoch, env.Rebalanced = &epoch, &reb
	}
	return env
}

func (s *Server) feed(w http.ResponseWriter, r *http.Request) (err error) {
	outcome := "error"
	defer func() {
		switch {
		case err != nil && classify(err).code == codeCursorExpired:
			outcome = "expired"
		case err != nil && r.Context().Err() != nil:
			outcome = "canceled" // the client went away
		}
		s.metrics.feedRequests.WithLabelValues(outcome).Inc()
	}()
	fq, err := s.parseFeedQuery(r.URL.Query())
	if err != nil {
		return err
	}
	release, wait, err := s.feedSlot(r, fq.wait)
	if err != nil {
		return err
	}
	defer release()
	fq.wait = wait
	if wait > 0 {
		if err := s.cfg.Hooks.Call(r.Context(), feedWaitPoint); err != nil {
			return err
		}
	}
	tb, err := s.table(r)
	if err != nil {
		return err
	}
	n := tb.Partitions()
	if n == 0 {
		return fmt.Errorf("table %s: %w", tb.Name(), engine.ErrNoFeed)
	}
	for _, p := range fq.partitions {
		if p >= n {
			return badRequest("partitions: the table has partitions 0 to %d, not %d", n-1, p)
		}
	}
	ctx := r.Context()
	opts := engine.FeedOptions{Cursor: fq.cursor, Latest: fq.latest, Partitions: fq.partitions, MaxRows: fq.maxRows,
		MaxBytes: fq.maxBytes, PayloadBytes: fq.payloads, Wait: fq.wait, Filter: fq.filter}
	ans := &feedAnswer{}
	member := fq.member != ""
	switch {
	case member:
		if err := s.joinForRead(ctx, tb, fq, &opts, ans); err != nil {
			return err
		}
	case fq.group != "":
		if err := s.namedForRead(ctx, tb, fq, &opts); err != nil {
			return err
		}
	}
	if member && len(opts.Partitions) == 0 {
		// More members than partitions: this one reads none until the
		// group changes. It waits out its wait all the same, or its
		// client would ask again at once.
		ans.page = &engine.FeedPage{Next: *opts.Cursor}
		s.idle(ctx, fq.wait)
	} else if ans.page, err = s.readFeed(ctx, tb, opts); err != nil {
		return err
	}
	ans.next = ans.page.Next
	if member {
		ans.next.Group, ans.next.Epoch = fq.group, ans.epoch
	} else {
		ans.partitions = readPartitions(ans.page)
	}
	for p, acked := range ans.page.Acked {
		if off := ans.next.Pos[p].Offset; acked > off {
			ans.lagRows += acked - off
		}
	}
	outcome = "empty"
	if len(ans.page.Rows) > 0 {
		outcome = "rows"
	}
	s.metrics.feedRows.Add(float64(len(ans.page.Rows)))
	for _, row := range ans.page.Rows {
		if row.Carried {
			s.metrics.feedPayloadBytes.Add(float64(len(row.Record.Payload)))
		}
	}
	return s.writeFeed(w, r, tb.Name(), fq, ans)
}

// joinForRead joins (or heartbeats) the member, commits the request's
// cursor if asked, and points opts at what the member reads: from its
// cursor while the group's epoch is the cursor's, else from the group's
// committed positions.
func (s *Server) joinForRead(ctx context.Context, tb *engine.Table, fq *feedQuery, opts *engine.FeedOptions, ans *feedAnswer) error {
	a, err := tb.JoinGroup(ctx, fq.group, fq.member)
	if err != nil {
		return err
	}
	s.consumerServed(tb.Name(), fq.group)
	cur := fq.cursor
	current := cur != nil && cur.Group == fq.group && cur.Epoch == a.Epoch
	if cur != nil && fq.commit && !current {
		// Of an epoch since ended: not committed, as CommitGroup would
		// refuse it.
		s.metrics.feedCommits.WithLabelValues("rebalanced").Inc()
	}
	if cur != nil && fq.commit && current {
		_, err := tb.CommitGroup(ctx, fq.group, fq.member, *cur)
		switch {
		case err == nil:
			s.metrics.feedCommits.WithLabelValues("ok").Inc()
		case isRebalanced(err):
			s.metrics.feedCommits.WithLabelValues("rebalanced").Inc()
			current = false
			// The group changed since the join: the assignment read
			// anew says what this member reads now.
			if a, err = tb.JoinGroup(ctx, fq.group, fq.member); err != nil {
				return err
			}
		default:
			if ctx.Err() == nil {
				s.metrics.feedCommits.WithLabelValues("error").Inc()
			}
			return err
		}
	}
	ans.group, ans.epoch, ans.partitions = true, a.Epoch, slices.Clone(a.Partitions)
	if ans.partitions == nil {
		ans.partitions = []int{}
	}
	ans.rebalanced = cur != nil && !current
	start := a.Start
	if current {
		start = *cur
	}
	// A member reads its assigned partitions only, whatever the cursor
	// holds besides.
	start.Pos = positionsOf(start.Pos, a.Partitions)
	opts.Cursor, opts.Partitions = &start, a.Partitions
	return nil
}

// namedForRead commits the request's cursor for a named consumer, if
// asked (positions only move forward), and starts the partitions the
// cursor lacks at the consumer's committed positions: a worker restarted
// without its cursor resumes where it committed.
func (s *Server) namedForRead(ctx context.Context, tb *engine.Table, fq *feedQuery, opts *engine.FeedOptions) error {
	s.consumerServed(tb.Name(), fq.group)
	if cur := fq.cursor; cur != nil && fq.commit {
		if _, err := tb.CommitGroup(ctx, fq.group, "", *cur); err != nil {
			if ctx.Err() == nil {
				s.metrics.feedCommits.WithLabelValues("error").Inc()
			}
			return err
		}
		s.metrics.feedCommits.WithLabelValues("ok").Inc()
	}
	committed, err := tb.CommittedPositions(ctx, fq.group)
	if err != nil {
		return err
	}
	start := engine.Cursor{Incarnation: tb.Incarnation(), Partitions: tb.Partitions(), Pos: map[int]engine.Position{}}
	if fq.cursor != nil {
		start = *fq.cursor
		start.Pos = maps.Clone(start.Pos)
	}
	parts := opts.Partitions
	if parts == nil && fq.cursor == nil {
		parts = make([]int, tb.Partitions())
		for p := range parts {
			parts[p] = p
		}
	}
	for _, p := range parts {
		if _, ok := start.Pos[p]; !ok {
			if pos, ok := committed[p]; ok {
				start.Pos[p] = pos
			}
		}
	}
	if len(start.Pos) > 0 || fq.cursor != nil {
		opts.Cursor = &start
		if opts.Partitions == nil {
			opts.Partitions = parts
		}
	}
	return nil
}

func positionsOf(pos map[int]engine.Position, parts []int) map[int]engine.Position {
	out := make(map[int]engine.Position, len(parts))
	for _, p := range parts {
		if v, ok := pos[p]; ok {
			out[p] = v
		}
	}
	return out
}

// readPartitions lists the partitions a page read, in order.
func readPartitions(page *engine.FeedPage) []int {
	parts := make([]int, 0, len(page.Acked))
	for p := range page.Acked {
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		for p := range page.Next.Pos {
			parts = append(parts, p)
		}
	}
	slices.Sort(parts)
	return parts
}

// readFeed reads one page. A long-poll's wait ends early when the server
// starts draining: the read is then made again without waiting, so the
// reader gets what there is (and its cursor) at once.
func (s *Server) readFeed(ctx context.Context, tb *engine.Table, opts engine.FeedOptions) (*engine.FeedPage, error) {
	if opts.Wait <= 0 || s.isDraining() {
		opts.Wait = 0
		return tb.Feed(ctx, opts)
	}
	s.relayFeed(tb)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.drained:
			cancel()
		case <-wctx.Done():
		}
	}()
	page, err := tb.Feed(wctx, opts)
	// The relay's waits at the owners need not outlast their readers.
	s.relayFeed(tb)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		opts.Wait = 0
		return tb.Feed(ctx, opts)
	}
	return page, err
}

// idle waits d, or until the drain begins or ctx ends.
func (s *Server) idle(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.drained:
	case <-ctx.Done():
	}
}

func (s *Server) isDraining() bool {
	select {
	case <-s.drained:
		return true
	default:
		return false
	}
}

// feedSlot admits a feed request. A long-poll takes a waiting slot, not
// a request slot: readers waiting for rows, however many, must leave the
// request slots to everyone else. Without a waiting slot (all taken, or
// its client holds its share of them) it is served as a request that does
// not wait, in a request slot like any other.
func (s *Server) feedSlot(r *http.Request, wait time.Duration) (release func(), granted time.Duration, err error) {
	key := s.clientKey(r)
	if wait > 0 {
		if rel, ok := s.clients.admitWait(key); ok {
			select {
			case s.waiting <- struct{}{}:
				s.metrics.feedWaiting.Inc()
				return func() {
					s.metrics.feedWaiting.Dec()
					<-s.waiting
					rel()
				}, wait, nil
			default:
				rel()
			}
		}
	}
	release, err = s.requestSlot(key)
	return release, 0, err
}

// requestSlot takes a request slot for a route that admits itself (see
// the waits route option): its client's share, then the server's.
func (s *Server) requestSlot(key string) (func(), error) {
	releaseClient, err := s.clients.admit(key, false)
	if err != nil {
		s.metrics.clientRefusals.Inc()
		return nil, newError(http.StatusServiceUnavailable, codeOverloaded, "%v (--max-client-share)", err)
	}
	select {
	case s.sem <- struct{}{}:
	default:
		releaseClient()
		return nil, newError(http.StatusServiceUnavailable, codeOverloaded, "too many concurrent requests (limit %d)", s.cfg.MaxConcurrentRequests)
	}
	s.metrics.inflight.Inc()
	return func() {
		s.metrics.inflight.Dec()
		<-s.sem
		releaseClient()
	}, nil
}

// feedMedia picks the answer's media type from Accept: the supported type
// the client prefers (by q, then order), JSON when it names none.
func feedMedia(accept string) string {
	best, bestQ := mediaJSON, -1.0
	for part := range strings.SplitSeq(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if v, ok := params["q"]; ok {
			if q, err = strconv.ParseFloat(v, 64); err != nil {
				continue
			}
		}
		var m string
		switch mt {
		case mediaJSON, "*/*", "application/*":
			m = mediaJSON
		case mediaNDJSON, mediaArrow:
			m = mt
		default:
			continue
		}
		if q > bestQ && q > 0 {
			best, bestQ = m, q
		}
	}
	return best
}

func (s *Server) writeFeed(w http.ResponseWriter, r *http.Request, table string, fq *feedQuery, a *feedAnswer) error {
	env := a.envelope()
	h := w.Header()
	h.Set(hdrCursor, env.Cursor)
	h.Set(hdrRows, strconv.Itoa(len(a.page.Rows)))
	h.Set(hdrLagRows, strconv.FormatUint(a.lagRows, 10))
	if a.group {
		h.Set(hdrEpoch, strconv.FormatUint(a.epoch, 10))
		h.Set(hdrPartitions, joinInts(a.partitions))
		h.Set(hdrRebalanced, strconv.FormatBool(a.rebalanced))
	}
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	media := feedMedia(r.Header.Get("Accept"))
	h.Set("Content-Type", media)
	dw := s.newDownload(w)
	var err error
	switch media {
	case mediaArrow:
		err = s.writeFeedArrow(dw, table, fq, a, env.Cursor)
	default:
		err = s.writeFeedJSON(dw, media == mediaNDJSON, table, fq, a, env)
	}
	if err != nil && dw.cause != nil {
		return dw.cause
	}
	return err
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// feedRow is a row as JSON: the record as GET of a rollout answers it,
// plus where it stands in the feed and its payload's bytes or URL.
type feedRow struct {
	recordView
	Partition int     `json:"partition"`
	Offset    uint64  `json:"offset"`
	AckedAt   anyTime `json:"acked_at"`
	// Payload is set (empty for an empty payload) when carried.
	Payload    *[]byte `json:"payload,omitempty"`
	PayloadURL string  `json:"payload_url,omitempty"`
}

func (s *Server) feedRowOf(table string, row *engine.FeedRow) feedRow {
	rec := row.Record
	out := feedRow{recordView: s.viewOf(&rec), Partition: row.Partition, Offset: row.Offset, AckedAt: anyTime(row.AckedAt)}
	if row.Carried {
		p := rec.Payload
		if p == nil {
			p = []byte{}
		}
		out.Payload = &p
	} else {
		out.PayloadURL = rolloutPath(table, rec.ID) + "/payload"
	}
	return out
}

// encodeRow encodes a row, projected to the columns asked for.
func (s *Server) encodeRow(table string, fq *feedQuery, row *engine.FeedRow) ([]byte, error) {
	b, err := json.Marshal(s.feedRowOf(table, row))
	if err != nil || fq.columns == nil {
		return b, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	for k := range fields {
		if slices.Contains(recordColumns, k) && !fq.columns[k] {
			delete(fields, k)
		}
	}
	return json.Marshal(fields)
}

// writeFeedJSON streams the rows, one encoded at a time: a page may carry
// up to --feed-max-bytes of payloads, which are not copied again whole.
// A failed write (the client went away, or reads too slowly) ends it.
func (s *Server) writeFeedJSON(w io.Writer, ndjson bool, table string, fq *feedQuery, a *feedAnswer, env feedEnvelope) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	open, sep, end := "", []byte(","), []byte(nil)
	if ndjson {
		sep, end = nil, []byte("\n")
	} else {
		open = `{"rows":[`
	}
	if _, err := bw.WriteString(open); err != nil {
		return err
	}
	for i := range a.page.Rows {
		b, err := s.encodeRow(table, fq, &a.page.Rows[i])
		if err != nil {
			return fmt.Errorf("encoding row %q: %w", a.page.Rows[i].Record.ID, err)
		}
		if i > 0 {
			if _, err := bw.Write(sep); err != nil {
				return err
			}
		}
		if _, err := bw.Write(append(b, end...)); err != nil {
			return err
		}
	}
	tail, err := json.Marshal(env)
	if err != nil {
		return err
	}
	if !ndjson {
		// The envelope's fields after the rows: {"rows":[…],"cursor":…}.
		tail = append([]byte("],"), tail[1:]...)
	}
	if _, err := bw.Write(append(tail, '\n')); err != nil {
		return err
	}
	return bw.Flush()
}

// feedArrowSchema is the scan's schema projected to the columns asked
// for, the payload moved after the feed's columns.
func feedArrowSchema(fq *feedQuery, cursor string) *arrow.Schema {
	var fields []arrow.Field
	var payload arrow.Field
	for _, f := range rowfile.Schema.Fields() {
		switch {
		case f.Name == "payload":
			payload = f
		case fq.columns == nil || fq.columns[f.Name]:
			fields = append(fields, f)
		}
	}
	fields = append(fields,
		arrow.Field{Name: "partition", Type: arrow.PrimitiveTypes.Int32},
		arrow.Field{Name: "offset", Type: arrow.PrimitiveTypes.Int64},
		arrow.Field{Name: "acked_at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
		arrow.Field{Name: "payload_url", Type: arrow.BinaryTypes.String, Nullable: true},
		payload)
	md := rowfile.Schema.Metadata()
	keys, vals := append(slices.Clone(md.Keys()), metaCursor), append(slices.Clone(md.Values()), cursor)
	m := arrow.NewMetadata(keys, vals)
	return arrow.NewSchema(fields, &m)
}

func (s *Server) writeFeedArrow(w io.Writer, table string, fq *feedQuery, a *feedAnswer, cursor string) error {
	sc := feedArrowSchema(fq, cursor)
	iw := ipc.NewWriter(w, ipc.WithSchema(sc), ipc.WithAllocator(memory.DefaultAllocator))
	if len(a.page.Rows) > 0 {
		batch := s.feedBatch(sc, table, a.page.Rows)
		err := iw.Write(batch)
		batch.Release()
		if err != nil {
			return err
		}
	}
	return iw.Close()
}

// feedBatch builds the rows as one record batch of sc.
func (s *Server) feedBatch(sc *arrow.Schema, table string, rows []engine.FeedRow) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	optStr := func(fb array.Builder, v string) {
		if v == "" {
			fb.AppendNull()
		} else {
			fb.(*array.StringBuilder).Append(v)
		}
	}
	for i := range rows {
		row := &rows[i]
		rec := &row.Record
		for j, f := range sc.Fields() {
			fb := b.Field(j)
			switch f.Name {
			case "id":
				fb.(*array.StringBuilder).Append(rec.ID)
			case "rollout_id":
				fb.(*array.StringBuilder).Append(rec.RolloutID)
			case "problem_id":
				optStr(fb, rec.ProblemID)
			case "sequence":
				fb.(*array.Int64Builder).Append(rec.Sequence)
			case "role":
				optStr(fb, rec.Role)
			case "created_at":
				fb.(*array.TimestampBuilder).Append(arrow.Timestamp(rec.CreatedAt.UnixMicro()))
			case "content_type":
				optStr(fb, rec.ContentType)
			case "reward":
				if rec.Reward != nil {
					fb.(*array.Float64Builder).Append(*rec.Reward)
				} else {
					fb.AppendNull()
				}
			case "policy_version":
				optStr(fb, rec.PolicyVersion)
			case "metadata":
				optStr(fb, string(rec.Metadata))
			case "payload_size":
				fb.(*array.Int64Builder).Append(rec.PayloadSize)
			case "payload_sha256":
				fb.(*array.FixedSizeBinaryBuilder).Append(rec.PayloadSHA256[:])
			case "payload_ref":
				if rec.PayloadRef != "" {
					fb.(*array.StringBuilder).Append(objectName(s.cfg.StorePrefix, rec.PayloadRef))
				} else {
					fb.AppendNull()
				}
			case "partition":
				fb.(*array.Int32Builder).Append(int32(row.Partition))
			case "offset":
				fb.(*array.Int64Builder).Append(int64(row.Offset))
			case "acked_at":
				fb.(*array.TimestampBuilder).Append(arrow.Timestamp(row.AckedAt.UnixMicro()))
			case "payload_url":
				if row.Carried {
					fb.AppendNull()
				} else {
					fb.(*array.StringBuilder).Append(rolloutPath(table, rec.ID) + "/payload")
				}
			case "payload":
				if row.Carried {
					fb.(*array.BinaryBuilder).Append(rec.Payload)
				} else {
					fb.AppendNull()
				}
			}
		}
	}
	return b.NewRecordBatch()
}

func isRebalanced(err error) bool { return errors.Is(err, engine.ErrRebalanced) }

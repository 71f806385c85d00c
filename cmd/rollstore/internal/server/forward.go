package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/engine/rowfile"
)

// Forwarding. A partitioned table's ids belong to partitions, each owned
// by one writer process (engine.Table.Owner). Any writer pod accepts any
// write: an item whose partition it owns is appended here; any other is
// staged here (its payload stored in the store, once, by this pod) and
// only its record is sent to the owner's internal commit endpoint
// (POST /v1/internal/tables/{table}/commit), which commits it and answers
// what it decided. The receiving pod answers the client that decision. A
// forwarded commit is never forwarded again: the endpoint commits or
// refuses (not_owner), so a request crosses at most one hop.

const (
	internalCommitPath = "/v1/internal/tables/{table}/commit"
	// forwardedByHeader names the pod that forwarded a commit (logs only).
	forwardedByHeader = "Rollstore-Forwarded-By"
)

// stagedWire is an engine.Staged on the wire. The engine's Record keeps
// its payload, checksum and payload object out of its JSON (they are not
// metadata), so they travel beside it here; metadata travels as the
// writer's bytes (base64), exactly as given, not re-encoded.
type stagedWire struct {
	Record        engine.Record `json:"record"`
	Metadata      []byte        `json:"metadata,omitempty"`
	Payload       []byte        `json:"payload,omitempty"`
	PayloadRef    string        `json:"payload_ref,omitempty"`
	PayloadSHA256 string        `json:"payload_sha256"`
	GivenAt       bool          `json:"given_at,omitempty"`
	Uploaded      time.Time     `json:"uploaded"`
}

func toWire(st *engine.Staged, withPayload bool) stagedWire {
	w := stagedWire{Record: st.Record, Metadata: st.Record.Metadata, PayloadRef: st.Record.PayloadRef,
		PayloadSHA256: hex.EncodeToString(st.Record.PayloadSHA256[:]), GivenAt: st.GivenAt, Uploaded: st.Uploaded}
	if withPayload {
		w.Payload = st.Record.Payload
	}
	w.Record.Metadata, w.Record.Payload, w.Record.PayloadRef = nil, nil, ""
	return w
}

func (w stagedWire) staged() (*engine.Staged, error) {
	st := &engine.Staged{Record: w.Record, GivenAt: w.GivenAt, Uploaded: w.Uploaded}
	rec := &st.Record
	rec.Metadata, rec.Payload, rec.PayloadRef = nil, nil, w.PayloadRef
	if len(w.Metadata) > 0 {
		rec.Metadata = json.RawMessage(w.Metadata)
	}
	if w.PayloadRef == "" {
		rec.Payload = w.Payload
		if rec.Payload == nil {
			rec.Payload = []byte{}
		}
	}
	sum, err := hex.DecodeString(w.PayloadSHA256)
	if err != nil || len(sum) != len(rec.PayloadSHA256) {
		return nil, fmt.Errorf("payload_sha256 %q is not 64 hex digits", w.PayloadSHA256)
	}
	copy(rec.PayloadSHA256[:], sum)
	return st, nil
}

// commitRequest and commitAnswer are the internal endpoint's bodies.
type commitRequest struct {
	Items []stagedWire `json:"items"`
}

type commitAnswer struct {
	Results []commitResult `json:"results"`
}

type commitResult struct {
	Created bool       `json:"created"`
	Record  stagedWire `json:"record"`
}

// committedItem names an item of a batch that was committed although the
// batch failed as a whole (rows of other partitions commit independently).
type committedItem struct {
	ID      string `json:"id"`
	Created bool   `json:"created"`
	// Index (internal commits), Line (NDJSON) or Row (Arrow) of the item.
	Index *int `json:"index,omitempty"`
	Line  *int `json:"line,omitempty"`
	Row   *int `json:"row,omitempty"`
}

// partialError is a batch's failure with the items that were committed
// nevertheless.
type partialError struct {
	err       error
	committed []committedItem
}

func (e *partialError) Error() string { return e.err.Error() }
func (e *partialError) Unwrap() error { return e.err }

// itemResults is the outcome of appending several items: one result per
// committed item (nil for the others) and, if some failed, the first
// failing item's index and error.
type itemResults struct {
	res    []*engine.AppendResult
	failed int
	err    error
}

func newItemResults(n int) *itemResults {
	return &itemResults{res: make([]*engine.AppendResult, n), failed: -1}
}

// fail notes item i's failure; the lowest index is the answer.
func (r *itemResults) fail(i int, err error) {
	if r.err == nil || i < r.failed {
		r.failed, r.err = i, err
	}
}

// commitStaged is the internal endpoint: it commits staged appends that
// another pod forwarded, partition by partition (all or none within one;
// partitions independent), and answers every item's result, or the first
// failing item's error (with "index") and the items committed anyway.
func (s *Server) commitStaged(w http.ResponseWriter, r *http.Request) error {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return newError(http.StatusUnsupportedMediaType, codeUnsupportedMedia, "Content-Type must be application/json, got %q", ct)
	}
	tb, err := s.table(r)
	if err != nil {
		return err
	}
	// Inline payloads travel in base64: room for a full batch of them.
	limit := 2*s.cfg.MaxBatchBytes + 1<<20
	var req commitRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	if err := dec.Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return newError(http.StatusRequestEntityTooLarge, codePayloadTooLarge, "commit body exceeds %d bytes", limit)
		}
		return badRequest("invalid commit body: %v", err)
	}
	if len(req.Items) == 0 {
		return badRequest("no items to commit")
	}
	staged := make([]*engine.Staged, len(req.Items))
	for i, wi := range req.Items {
		if staged[i], err = wi.staged(); err != nil {
			return &positionError{what: "index", n: i, err: badRequest("%v", err)}
		}
	}
	out := newItemResults(len(staged))
	s.commitLocal(r.Context(), tb, staged, seq(len(staged)), out)
	if out.err != nil {
		var done []committedItem
		for i, x := range out.res {
			if x != nil {
				done = append(done, committedItem{ID: x.Record.ID, Created: x.Created, Index: ptr(i)})
			}
		}
		return &partialError{err: &positionError{what: "index", n: out.failed, err: out.err}, committed: done}
	}
	ans := commitAnswer{Results: make([]commitResult, len(staged))}
	for i, x := range out.res {
		ans.Results[i] = commitResult{Created: x.Created, Record: toWire(&engine.Staged{Record: *x.Record}, false)}
	}
	writeJSON(w, http.StatusOK, ans)
	return nil
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// commitLocal commits staged[k] (for k in idx) in this process, one
// engine Commit per partition, in parallel, into out at the items' indexes.
func (s *Server) commitLocal(ctx context.Context, tb *engine.Table, staged []*engine.Staged, idx []int, out *itemResults) {
	var parts []string
	groups := map[string][]int{}
	for _, i := range idx {
		p := tb.PartitionOf(staged[i].Record.ID)
		if _, ok := groups[p]; !ok {
			parts = append(parts, p)
		}
		groups[p] = append(groups[p], i)
	}
	var mu sync.Mutex
	parallel(len(parts), func(g int) {
		gi := groups[parts[g]]
		items := make([]*engine.Staged, len(gi))
		for k, i := range gi {
			items[k] = staged[i]
		}
		res, err := tb.Commit(ctx, items)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			at := gi[0]
			var be *engine.BatchError
			if errors.As(err, &be) {
				err = be.Err
				if be.Index >= 0 && be.Index < len(gi) {
					at = gi[be.Index]
				}
			}
			out.fail(at, err)
			return
		}
		for k, i := range gi {
			out.res[i] = &res[k]
		}
	})
}

// parallel runs fn(0..n-1), at most 16 at once, and waits for them.
func parallel(n int, fn func(i int)) {
	if n == 1 {
		fn(0)
		return
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(i)
		})
	}
	wg.Wait()
}

// forwarded decides whether this pod routes a table's writes by owner: it
// must be a writer (readers and mergers refuse writes with read_only), and
// the table partitioned (a table without partitions has one shard per
// writer, each writer its own).
func (s *Server) forwarding(tb *engine.Table) bool {
	return s.db.Config().Shard != "" && tb.Partitions() > 0
}

// join makes a writer one of a partitioned table's members (the engine
// joins on a table's first use; until then the others neither give this
// writer partitions nor learn its address). A writer restarted under its
// name must join at once: its old entry, with its old address, would
// otherwise route its partitions to a dead address until it expired.
func (s *Server) join(ctx context.Context, tb *engine.Table) error {
	if !s.forwarding(tb) {
		return nil
	}
	_, err := tb.Owners(ctx)
	return err
}

// joinLoop joins every partitioned table, now and every interval, so a
// writer joins tables created elsewhere before writes reach it.
func (s *Server) joinLoop(ctx context.Context, interval time.Duration) {
	if s.db.Config().Shard == "" {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if names, err := s.db.ListTables(ctx); err == nil {
			for _, name := range names {
				if tb, err := s.db.Table(ctx, name); err == nil {
					if err := s.join(ctx, tb); err != nil && ctx.Err() == nil && !errors.Is(err, engine.ErrTableNotFound) {
						s.log.Warn("joining the writers of a table", "table", name, "err", err)
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// appendOne stores one rollout: here if this process owns its partition,
// else staged here and committed by the owner.
func (s *Server) appendOne(ctx context.Context, tb *engine.Table, rec engine.Record, body io.Reader, size int64) (engine.AppendResult, error) {
	if !s.forwarding(tb) {
		return tb.Append(ctx, rec, body, size)
	}
	o, err := tb.Owner(ctx, rec.ID)
	if err != nil {
		return engine.AppendResult{}, err
	}
	if o.Self {
		tr := &touchedReader{r: body}
		res, err := tb.Append(ctx, rec, tr, size)
		var noe *engine.NotOwnerError
		if !errors.As(err, &noe) || tr.touched {
			// A partition that moved after the body was read (the commit
			// found it owned elsewhere): the payload is gone with the
			// refused append; the client retries (503 not_owner).
			return res, err
		}
		o = noe.Owner // it moved before the body was read: forward it
	}
	if err := forwardable(o); err != nil {
		return engine.AppendResult{}, err
	}
	st, nt, err := tb.Stage(ctx, rec, body, size)
	if err != nil {
		return engine.AppendResult{}, err
	}
	// The body may have taken long: commit where the partition is now.
	if now, err := nt.Owner(ctx, rec.ID); err == nil {
		o = now
	}
	out := newItemResults(1)
	if o.Self {
		s.commitLocal(ctx, nt, []*engine.Staged{st}, []int{0}, out)
	} else if err := forwardable(o); err != nil {
		// Refused before anything was sent: the payload is no one's.
		s.discardStaged(ctx, []*engine.Staged{st})
		return engine.AppendResult{}, err
	} else {
		s.forward(ctx, nt, o, []*engine.Staged{st}, []int{0}, out)
	}
	if out.err != nil {
		return engine.AppendResult{}, out.err
	}
	return *out.res[0], nil
}

// touchedReader notes whether anything read from r.
type touchedReader struct {
	r       io.Reader
	touched bool
}

func (t *touchedReader) Read(p []byte) (int, error) {
	t.touched = true
	return t.r.Read(p)
}

// forwardable refuses an owner that cannot be forwarded to.
func forwardable(o engine.Owner) error {
	switch {
	case o.Writer == "":
		return newError(http.StatusServiceUnavailable, codeNotOwner, "partition %s has no live writer", o.Partition)
	case o.Addr == "":
		return newError(http.StatusServiceUnavailable, codeNotOwner, "the owner of partition %s, %s, advertises no address (--advertise-addr)", o.Partition, o.Writer)
	}
	return nil
}

// Results of forwarded appends, the values of the forwarded metric's
// result label.
const (
	fwdCommitted   = "committed"   // the owner committed it (or answered an identical retry)
	fwdRefused     = "refused"     // the owner refused it (4xx: a conflict, an invalid record)
	fwdNotOwner    = "not_owner"   // the owner no longer owns the partition
	fwdUnreachable = "unreachable" // the owner could not be reached; nothing was sent
	fwdUnknown     = "unknown"     // sent, but no answer: the outcome is unknown
	fwdFailed      = "failed"      // the owner failed (5xx) or answered what is not a commit answer
)

// forward sends staged[k] (k in idx, all owned by o's writer) to the
// owner's internal commit endpoint and notes what it decided in out.
func (s *Server) forward(ctx context.Context, tb *engine.Table, o engine.Owner, staged []*engine.Staged, idx []int, out *itemResults) {
	start := time.Now()
	result := fwdFailed
	defer func() {
		s.metrics.forwarded.WithLabelValues(result).Add(float64(len(idx)))
		s.metrics.forwardDuration.WithLabelValues(result).Observe(time.Since(start).Seconds())
	}()
	failAll := func(err error) { out.fail(idx[0], err) }

	req := commitRequest{Items: make([]stagedWire, len(idx))}
	for k, i := range idx {
		req.Items[k] = toWire(staged[i], true)
	}
	body, err := json.Marshal(req)
	if err != nil {
		failAll(err)
		return
	}
	u := "http://" + o.Addr + strings.Replace(internalCommitPath, "{table}", url.PathEscape(tb.Name()), 1)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		failAll(err)
		return
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set(forwardedByHeader, s.db.Config().Shard)
	if id := requestID(ctx); id != "" {
		hr.Header.Set("X-Request-Id", id)
	}
	if len(s.cfg.AuthTokens) > 0 {
		hr.Header.Set("Authorization", "Bearer "+s.cfg.AuthTokens[0])
	}
	resp, err := s.fwd.Do(hr)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			result = fwdUnknown
			failAll(ctx.Err()) // the client went away (or its deadline passed)
		case notSent(err):
			// The owner surely did not commit: its payloads are no one's.
			result = fwdUnreachable
			s.discardStaged(ctx, itemsOf(staged, idx))
			failAll(newError(http.StatusServiceUnavailable, codeOwnerUnreachable,
				"the owner of partition %s, %s at %s, cannot be reached: %v", o.Partition, o.Writer, o.Addr, err))
		default:
			result = fwdUnknown
			failAll(&apiError{status: http.StatusServiceUnavailable, code: codeOutcomeUnknown,
				msg: fmt.Sprintf("forwarded to %s at %s, no answer; it may have been stored: retry with the same content", o.Writer, o.Addr), err: err})
		}
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 2*s.cfg.MaxBatchBytes+1<<20))
	if err != nil {
		result = fwdUnknown
		failAll(&apiError{status: http.StatusServiceUnavailable, code: codeOutcomeUnknown,
			msg: fmt.Sprintf("forwarded to %s at %s, its answer was cut off; it may have been stored: retry with the same content", o.Writer, o.Addr), err: err})
		return
	}
	if resp.StatusCode == http.StatusOK {
		var ans commitAnswer
		if err := json.Unmarshal(data, &ans); err != nil || len(ans.Results) != len(idx) {
			result = fwdUnknown
			failAll(newError(http.StatusServiceUnavailable, codeOutcomeUnknown,
				"forwarded to %s at %s, its answer is not a commit answer (%d results for %d items, %v); retry with the same content", o.Writer, o.Addr, len(ans.Results), len(idx), err))
			return
		}
		for k, i := range idx {
			st, err := ans.Results[k].Record.staged()
			if err != nil {
				result = fwdUnknown
				failAll(newError(http.StatusServiceUnavailable, codeOutcomeUnknown, "forwarded to %s: its answer for item %d: %v", o.Writer, k, err))
				return
			}
			out.res[i] = &engine.AppendResult{Record: &st.Record, Created: ans.Results[k].Created}
		}
		result = fwdCommitted
		return
	}
	var eb struct {
		Error struct {
			errorDetail
			Index     *int            `json:"index"`
			Committed []committedItem `json:"committed"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &eb) != nil || eb.Error.Code == "" {
		result = fwdUnknown
		failAll(newError(http.StatusServiceUnavailable, codeOutcomeUnknown,
			"forwarded to %s at %s, answered %d without a rollstore error; it may have been stored: retry with the same content", o.Writer, o.Addr, resp.StatusCode))
		return
	}
	d := eb.Error
	at := idx[0]
	if d.Index != nil && *d.Index >= 0 && *d.Index < len(idx) {
		at = idx[*d.Index]
	}
	for _, c := range d.Committed {
		if c.Index != nil && *c.Index >= 0 && *c.Index < len(idx) {
			i := idx[*c.Index]
			rec := staged[i].Record
			rec.Payload = nil
			out.res[i] = &engine.AppendResult{Record: &rec, Created: c.Created}
		}
	}
	switch {
	case d.Code == codeNotOwner:
		result = fwdNotOwner
		out.fail(at, newError(http.StatusServiceUnavailable, codeNotOwner, "%s", d.Message))
	case resp.StatusCode == http.StatusUnauthorized:
		out.fail(at, newError(http.StatusInternalServerError, codeInternal,
			"the owner %s refused this pod's token: the writers must share --auth-token-file", o.Writer))
	case d.Code == codeRouteNotFound || d.Code == codeMethodNotAllowed:
		result = fwdUnreachable
		out.fail(at, newError(http.StatusServiceUnavailable, codeOwnerUnreachable,
			"the owner %s at %s takes no forwarded commits (an older version?)", o.Writer, o.Addr))
	default:
		if resp.StatusCode < 500 {
			result = fwdRefused
		}
		// What the owner decided, as it decided it.
		out.fail(at, &apiError{status: resp.StatusCode, code: d.Code, msg: d.Message})
	}
}

// notSent reports a request that never reached the owner: the connection
// was not made.
func notSent(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

func itemsOf(staged []*engine.Staged, idx []int) []*engine.Staged {
	out := make([]*engine.Staged, len(idx))
	for k, i := range idx {
		out[k] = staged[i]
	}
	return out
}

// discardStaged deletes the payload objects of staged appends no one will
// commit (best effort: the orphan sweep removes what this misses).
func (s *Server) discardStaged(ctx context.Context, items []*engine.Staged) {
	if s.payloadStore == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for _, st := range items {
		if st != nil && st.Record.PayloadRef != "" {
			_ = s.payloadStore.Delete(ctx, st.Record.PayloadRef)
		}
	}
}

// appendItems appends a decoded batch by owner: the partitions this
// process owns through the engine (all or none per partition), the others
// staged here and forwarded, one request per owner; local and forwarded
// groups run in parallel. It answers every item's result, or the first
// failing item's error with what was committed anyway.
func (s *Server) appendItems(ctx context.Context, tb *engine.Table, items []engine.BatchItem) *itemResults {
	out := newItemResults(len(items))
	if !s.forwarding(tb) {
		res, err := tb.AppendBatch(ctx, items)
		var be *engine.BatchError
		switch {
		case errors.As(err, &be):
			out.fail(be.Index, be.Err)
		case err != nil:
			out.fail(0, err)
		default:
			for i := range res {
				out.res[i] = &res[i]
			}
		}
		return out
	}
	// Everything that can be refused without the store is refused before
	// anything is written, as a batch on one partition would be.
	recs, i, err := checkBatch(items, s.db.Config().MaxPayload)
	if err != nil {
		out.fail(i, err)
		return out
	}
	// So is a conflict with a stored row, or a partition's merge backlog,
	// anywhere in a batch spanning partitions: only a failure while the
	// partitions commit (an owner gone, a racing append) splits it.
	if spansPartitions(tb, items) {
		probe := make([]*engine.Staged, len(items))
		for i := range items {
			probe[i] = &engine.Staged{Record: recs[i], GivenAt: !items[i].Record.CreatedAt.IsZero()}
		}
		if err := tb.Check(ctx, probe); err != nil {
			at := 0
			var be *engine.BatchError
			if errors.As(err, &be) {
				at, err = be.Index, be.Err
			}
			out.fail(at, err)
			return out
		}
	}
	type group struct {
		owner engine.Owner
		idx   []int
	}
	var local []string // partitions owned here
	byPart := map[string][]int{}
	remote := map[string]*group{} // by writer
	var writers []string
	for i := range items {
		o, err := tb.Owner(ctx, items[i].Record.ID)
		if err != nil {
			out.fail(i, err)
			return out
		}
		if o.Self {
			if _, ok := byPart[o.Partition]; !ok {
				local = append(local, o.Partition)
			}
			byPart[o.Partition] = append(byPart[o.Partition], i)
			continue
		}
		g := remote[o.Writer]
		if g == nil {
			g = &group{owner: o}
			remote[o.Writer] = g
			writers = append(writers, o.Writer)
		}
		g.idx = append(g.idx, i)
	}
	sort.Strings(writers)
	var mu sync.Mutex
	parallel(len(local)+len(writers), func(j int) {
		if j < len(local) {
			idx := byPart[local[j]]
			part := make([]engine.BatchItem, len(idx))
			for k, i := range idx {
				part[k] = items[i]
			}
			res, err := tb.AppendBatch(ctx, part)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				at := idx[0]
				var be *engine.BatchError
				if errors.As(err, &be) {
					err = be.Err
					if be.Index >= 0 && be.Index < len(idx) {
						at = idx[be.Index]
					}
				}
				out.fail(at, err)
				return
			}
			for k, i := range idx {
				out.res[i] = &res[k]
			}
			return
		}
		g := remote[writers[j-len(local)]]
		sub := newItemResults(len(items))
		s.forwardItems(ctx, tb, g.owner, items, g.idx, sub)
		mu.Lock()
		defer mu.Unlock()
		for _, i := range g.idx {
			if sub.res[i] != nil {
				out.res[i] = sub.res[i]
			}
		}
		if sub.err != nil {
			out.fail(sub.failed, sub.err)
		}
	})
	return out
}

func spansPartitions(tb *engine.Table, items []engine.BatchItem) bool {
	for i := range items {
		if tb.PartitionOf(items[i].Record.ID) != tb.PartitionOf(items[0].Record.ID) {
			return true
		}
	}
	return false
}

// forwardItems stages items[k] (k in idx) here and forwards them to o.
func (s *Server) forwardItems(ctx context.Context, tb *engine.Table, o engine.Owner, items []engine.BatchItem, idx []int, out *itemResults) {
	if err := forwardable(o); err != nil {
		out.fail(idx[0], err)
		return
	}
	staged := make([]*engine.Staged, len(items))
	nt := tb
	for _, i := range idx {
		st, at, err := nt.Stage(ctx, items[i].Record, bytes.NewReader(items[i].Payload), int64(len(items[i].Payload)))
		if err == nil && at != nt && nt != tb {
			err = fmt.Errorf("%w: the table was dropped and created again during the batch", engine.ErrTableNotFound)
		}
		if err != nil {
			s.discardStaged(ctx, itemsOf(staged, idx))
			out.fail(i, err)
			return
		}
		nt = at
		staged[i] = st
	}
	s.forward(ctx, nt, o, staged, idx, out)
}

// checkBatch refuses, before anything is written, a batch the engine
// would refuse whole: an invalid record, a payload over the limit, an id
// repeated with other content (engine.Table.AppendBatch's checks). It
// returns the records as they would be stored (size, checksum, defaults).
func checkBatch(items []engine.BatchItem, maxPayload int64) ([]engine.Record, int, error) {
	first := map[string]int{}
	prev := make([]engine.Record, 0, len(items))
	now := time.Now()
	for i := range items {
		rec := items[i].Record
		if rec.ContentType == "" {
			rec.ContentType = "application/octet-stream"
		}
		rec.Payload, rec.PayloadRef = nil, ""
		rec.PayloadSize = int64(len(items[i].Payload))
		if rec.CreatedAt.IsZero() {
			rec.CreatedAt = now
		}
		rec.CreatedAt = rec.CreatedAt.UTC().Truncate(time.Microsecond)
		if err := rec.Validate(); err != nil {
			return nil, i, err
		}
		if rec.PayloadSize > maxPayload {
			return nil, i, fmt.Errorf("%w: %d bytes", engine.ErrTooLarge, rec.PayloadSize)
		}
		rec.PayloadSHA256 = sha256.Sum256(items[i].Payload)
		if j, ok := first[rec.ID]; ok {
			if !rowfile.SameContent(&prev[j], &rec) {
				return nil, i, fmt.Errorf("%w: %q repeated in the batch", engine.ErrConflict, rec.ID)
			}
			if !items[i].Record.CreatedAt.IsZero() && !rec.CreatedAt.Equal(prev[j].CreatedAt) {
				return nil, i, fmt.Errorf("%w: %q repeated in the batch with created_at %s, not %s", engine.ErrConflict,
					rec.ID, rec.CreatedAt.UTC().Format(time.RFC3339Nano), prev[j].CreatedAt.UTC().Format(time.RFC3339Nano))
			}
		} else {
			first[rec.ID] = i
		}
		prev = append(prev, rec)
	}
	return prev, -1, nil
}

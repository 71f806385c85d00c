package server

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rollstore/rollstore/engine"
)

// Consumer groups of the feed: their routes, their place in a table's
// status, and the lag gauges of the groups this process serves.

// maxCommitBody bounds a commit's body: a cursor of every partition of the
// largest table, with room to spare.
const maxCommitBody = 1 << 20

// lagForgetAfter: the lag gauges of a group this process has not served
// for this long are dropped (another process serves it, or nobody does).
const lagForgetAfter = 5 * time.Minute

// groupView is a consumer group as the API shows it.
type groupView struct {
	Group       string                   `json:"group"`
	Epoch       uint64                   `json:"epoch"`
	Members     []memberView             `json:"members"`
	Committed   map[string]committedView `json:"committed"`
	CommittedAt *anyTime                 `json:"committed_at,omitempty"`
	LagRows     uint64                   `json:"lag_rows"`
	LagSeconds  float64                  `json:"lag_seconds"`
	Partitions  []partitionLagView       `json:"partitions"`
}

type memberView struct {
	Name       string  `json:"name"`
	Partitions []int   `json:"partitions"`
	Beat       anyTime `json:"beat"`
}

type committedView struct {
	Offset uint64 `json:"offset"`
	// AckedAt: when the last row before the position was acknowledged.
	AckedAt *anyTime `json:"acked_at,omitempty"`
}

type partitionLagView struct {
	Partition  int     `json:"partition"`
	Committed  uint64  `json:"committed"`
	Acked      uint64  `json:"acked"`
	LagRows    uint64  `json:"lag_rows"`
	LagSeconds float64 `json:"lag_seconds"`
}

func optTime(t time.Time) *anyTime {
	if t.IsZero() {
		return nil
	}
	a := anyTime(t)
	return &a
}

func viewOfGroup(g engine.GroupStatus) groupView {
	v := groupView{Group: g.Name, Epoch: g.Epoch, Members: []memberView{}, Committed: map[string]committedView{},
		CommittedAt: optTime(g.CommittedAt), LagRows: g.LagRows, LagSeconds: g.LagSeconds, Partitions: []partitionLagView{}}
	for name, m := range g.Members {
		parts := slices.Clone(m.Partitions)
		if parts == nil {
			parts = []int{}
		}
		v.Members = append(v.Members, memberView{Name: name, Partitions: parts, Beat: anyTime(m.Beat)})
	}
	slices.SortFunc(v.Members, func(a, b memberView) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	for p, pos := range g.Committed {
		v.Committed[strconv.Itoa(p)] = committedView{Offset: pos.Offset, AckedAt: optTime(pos.At)}
	}
	for _, l := range g.Lag {
		v.Partitions = append(v.Partitions, partitionLagView{Partition: l.Partition, Committed: l.Committed, Acked: l.Acked,
			LagRows: l.LagRows, LagSeconds: l.LagSeconds})
	}
	slices.SortFunc(v.Partitions, func(a, b partitionLagView) int { return a.Partition - b.Partition })
	return v
}

func viewsOfGroups(gs []engine.GroupStatus) []groupView {
	out := make([]groupView, 0, len(gs))
	for _, g := range gs {
		out = append(out, viewOfGroup(g))
	}
	slices.SortFunc(out, func(a, b groupView) int {
		switch {
		case a.Group < b.Group:
			return -1
		case a.Group > b.Group:
			return 1
		}
		return 0
	})
	return out
}

// groupParam is the group named in the path, checked.
func groupParam(r *http.Request) (string, error) {
	g := r.PathValue("group")
	return g, checkConsumerName("group", g)
}

func (s *Server) listConsumers(w http.ResponseWriter, r *http.Request) error {
	tb, err := s.table(r)
	if err != nil {
		return err
	}
	gs, err := tb.Groups(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"consumers": viewsOfGroups(gs)})
	return nil
}

func (s *Server) getConsumer(w http.ResponseWriter, r *http.Request) error {
	g, err := groupParam(r)
	if err != nil {
		return err
	}
	tb, err := s.table(r)
	if err != nil {
		return err
	}
	st, err := tb.GroupStatusOf(r.Context(), g)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewOfGroup(st))
	return nil
}

// consumerCommit is the body of a commit.
type consumerCommit struct {
	Cursor string `json:"cursor"`
	Member string `json:"member"`
}

// commitConsumer stores a cursor's positions as the group's committed
// ones (forward only). With a member, the cursor must be of the member's
// current assignment, or nothing is stored (409 rebalanced). The answer
// is the group with its lag as read after the commit; a commit is
// idempotent, so one whose answer failed may be sent again.
func (s *Server) commitConsumer(w http.ResponseWriter, r *http.Request) (err error) {
	defer func() {
		result := "ok"
		switch {
		case isRebalanced(err):
			result = "rebalanced"
		case err != nil:
			result = "error"
		}
		s.metrics.feedCommits.WithLabelValues(result).Inc()
	}()
	g, err := groupParam(r)
	if err != nil {
		return err
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != mediaJSON {
		return newError(http.StatusUnsupportedMediaType, codeUnsupportedMedia,
			"Content-Type must be application/json, got %q", r.Header.Get("Content-Type"))
	}
	if err := checkContentEncoding(w, r); err != nil {
		return err
	}
	if r.ContentLength > maxCommitBody {
		return newError(http.StatusRequestEntityTooLarge, codePayloadTooLarge, "body of %d bytes exceeds the limit of %d", r.ContentLength, maxCommitBody)
	}
	body := s.newUploadBody(w, r, maxCommitBody)
	data, err := io.ReadAll(body)
	body.done()
	if err != nil {
		return body.explain(err)
	}
	var req consumerCommit
	if err := decodeStrict(data, &req); err != nil {
		return &apiError{status: http.StatusBadRequest, code: codeInvalidArgument, msg: "invalid JSON body", err: err}
	}
	if req.Cursor == "" {
		return &apiError{status: http.StatusBadRequest, code: codeBadCursor, msg: `the body must have "cursor", a cursor of a feed answer`}
	}
	if req.Member != "" {
		if err := checkConsumerName("member", req.Member); err != nil {
			return err
		}
	}
	cur, err := engine.DecodeCursor(req.Cursor)
	if err != nil {
		return &apiError{status: http.StatusBadRequest, code: codeBadCursor, msg: "cursor: pass the cursor of a feed answer unchanged", err: err}
	}
	tb, err := s.table(r)
	if err != nil {
		return err
	}
	if _, err := tb.CommitGroup(r.Context(), g, req.Member, cur); err != nil {
		return err
	}
	s.consumerServed(tb.Name(), g)
	st, err := tb.GroupStatusOf(r.Context(), g)
	if err != nil {
		return err
	}
	s.setLag(tb.Name(), st)
	writeJSON(w, http.StatusOK, viewOfGroup(st))
	return nil
}

func (s *Server) leaveConsumer(w http.ResponseWriter, r *http.Request) error {
	g, err := groupParam(r)
	if err != nil {
		return err
	}
	m := r.PathValue("member")
	if err := checkConsumerName("member", m); err != nil {
		return err
	}
	tb, err := s.table(r)
	if err != nil {
		return err
	}
	if err := tb.LeaveGroup(r.Context(), g, m); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) deleteConsumer(w http.ResponseWriter, r *http.Request) error {
	g, err := groupParam(r)
	if err != nil {
		return err
	}
	tb, err := s.table(r)
	if err != nil {
		return err
	}
	if err := tb.DeleteGroup(r.Context(), g); err != nil {
		return err
	}
	s.forgetConsumer(groupKey{tb.Name(), g})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// tableStatusView is a table's status with its consumer groups.
type tableStatusView struct {
	engine.Status
	Consumers []groupView `json:"consumers"`
}

// consumersOf lists a table's groups for its status; a table without a
// feed has none.
func consumersOf(ctx context.Context, tb *engine.Table) ([]groupView, error) {
	if tb.Partitions() == 0 {
		return []groupView{}, nil
	}
	gs, err := tb.Groups(ctx)
	if errors.Is(err, engine.ErrNoFeed) {
		return []groupView{}, nil
	}
	if err != nil {
		return nil, err
	}
	return viewsOfGroups(gs), nil
}

// groupKey names a group of a table.
type groupKey struct{ table, group string }

// consumerLag remembers when this process last served each group.
type consumerLag struct {
	mu     sync.Mutex
	served map[groupKey]time.Time
}

func (s *Server) consumerServed(table, group string) {
	s.lag.mu.Lock()
	defer s.lag.mu.Unlock()
	s.lag.served[groupKey{table, group}] = time.Now()
}

func (s *Server) forgetConsumer(k groupKey) {
	s.lag.mu.Lock()
	delete(s.lag.served, k)
	s.lag.mu.Unlock()
	s.metrics.consumerLagRows.DeleteLabelValues(k.table, k.group)
	s.metrics.consumerLagSeconds.DeleteLabelValues(k.table, k.group)
}

// forgetConsumersOf drops the lag gauges of a dropped table's groups.
func (s *Server) forgetConsumersOf(table string) {
	s.lag.mu.Lock()
	var keys []groupKey
	for k := range s.lag.served {
		if k.table == table {
			keys = append(keys, k)
		}
	}
	s.lag.mu.Unlock()
	for _, k := range keys {
		s.forgetConsumer(k)
	}
}

func (s *Server) setLag(table string, st engine.GroupStatus) {
	s.metrics.consumerLagRows.WithLabelValues(table, st.Name).Set(float64(st.LagRows))
	s.metrics.consumerLagSeconds.WithLabelValues(table, st.Name).Set(st.LagSeconds)
}

// lagLoop refreshes the lag gauges every ConsumerLagInterval until ctx
// ends.
func (s *Server) lagLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.ConsumerLagInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.refreshConsumerLag(ctx)
		}
	}
}

// refreshConsumerLag sets the lag gauges of the groups served within
// lagForgetAfter from their status, and drops the others' (and those of
// groups or tables that are gone).
func (s *Server) refreshConsumerLag(ctx context.Context) {
	now := time.Now()
	s.lag.mu.Lock()
	var live, stale []groupKey
	for k, at := range s.lag.served {
		if now.Sub(at) > lagForgetAfter {
			stale = append(stale, k)
		} else {
			live = append(live, k)
		}
	}
	s.lag.mu.Unlock()
	for _, k := range stale {
		s.forgetConsumer(k)
	}
	for _, k := range live {
		tb, err := s.db.Table(ctx, k.table)
		var st engine.GroupStatus
		if err == nil {
			st, err = tb.GroupStatusOf(ctx, k.group)
		}
		switch {
		case errors.Is(err, engine.ErrTableNotFound), errors.Is(err, engine.ErrGroupNotFound):
			s.forgetConsumer(k)
		case err != nil:
			// Kept as last read; the next pass tries again.
			s.log.Debug("consumer lag", "table", k.table, "group", k.group, "err", err)
		default:
			s.setLag(k.table, st)
		}
	}
}

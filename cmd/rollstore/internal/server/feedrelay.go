package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rollstore/rollstore/engine"
)

// The feed relay: a long-poll waiting on partitions another writer owns
// wakes at the next probe of their heads (--feed-poll-interval) unless
// told sooner. The owner knows of its commits the moment it acknowledges
// them, so while long-polls wait, this process asks each owner to answer
// when their partitions move (internalAwaitPath, engine.AwaitFeed there)
// and probes those partitions when it does (engine.ProbeFeed), which wakes
// the readers. It only hastens them: without it (an owner unreachable, or
// one that does not serve the route) they wake at the next probe.

const internalAwaitPath = "/v1/internal/tables/{table}/feed/await"

// relayWait bounds one relayed wait; a relay waits again after it.
const relayWait = 30 * time.Second

// relayIdle: a table's relay stops once no long-poll has waited on the
// table for this long.
const relayIdle = time.Second

// maxAwaitBody bounds an await's body: a count for every partition of the
// largest table.
const maxAwaitBody = 1 << 20

// awaitRequest asks an owner to answer once one of the partitions (by
// number) has acknowledged more rows than given, or WaitNS has passed.
type awaitRequest struct {
	After  map[string]uint64 `json:"after"`
	WaitNS int64             `json:"wait_ns"`
}

// awaitAnswer is what the owner knows each partition acknowledged.
type awaitAnswer struct {
	Known map[string]uint64 `json:"known"`
}

// awaitFeed answers an await: when one of the partitions moves past the
// count given, the wait passes, or the server starts draining.
func (s *Server) awaitFeed(w http.ResponseWriter, r *http.Request) error {
	tb, err := s.table(r)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxAwaitBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return newError(http.StatusRequestEntityTooLarge, codePayloadTooLarge, "await body exceeds %d bytes", maxAwaitBody)
		}
		return err
	}
	var req awaitRequest
	if err := decodeStrict(data, &req); err != nil {
		return &apiError{status: http.StatusBadRequest, code: codeInvalidArgument, msg: "invalid await body", err: err}
	}
	if req.WaitNS < 0 || len(req.After) == 0 {
		return badRequest("an await names partitions (after) and a wait that is not negative")
	}
	after := make(map[int]uint64, len(req.After))
	for k, v := range req.After {
		p, ok := parseDigits(k)
		if !ok || p >= int64(tb.Partitions()) {
			return badRequest("after: %q is not a partition of %s", k, tb.Name())
		}
		after[int(p)] = v
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-s.drained:
			cancel()
		case <-ctx.Done():
		}
	}()
	known, err := tb.AwaitFeed(ctx, after, min(time.Duration(req.WaitNS), s.cfg.FeedMaxWait))
	if err != nil && (r.Context().Err() != nil || ctx.Err() == nil) {
		return err
	}
	// Drained: what is known now.
	ans := awaitAnswer{Known: make(map[string]uint64, len(known))}
	for p, n := range known {
		ans.Known[strconv.Itoa(p)] = n
	}
	writeJSON(w, http.StatusOK, ans)
	return nil
}

// feedRelays holds the running relay of each table.
type feedRelays struct {
	mu     sync.Mutex
	tables map[*engine.Table]chan struct{} // a table's kick: a long-poll began waiting
}

// relayFeed makes sure the relay of tb runs, and tells it the long-polls
// waiting on tb changed: one is about to wait (perhaps on partitions not
// watched yet), or one is done (its partitions may need no relay now).
func (s *Server) relayFeed(tb *engine.Table) {
	s.relays.mu.Lock()
	defer s.relays.mu.Unlock()
	if kick, ok := s.relays.tables[tb]; ok {
		select {
		case kick <- struct{}{}:
		default:
		}
		return
	}
	kick := make(chan struct{}, 1)
	s.relays.tables[tb] = kick
	go s.relayLoop(tb, kick)
}

// relayLoop relays tb's waiting long-polls to the owners of their
// partitions, round after round, until none has waited for relayIdle or
// the server drains.
func (s *Server) relayLoop(tb *engine.Table, kick chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.drained:
			cancel()
		case <-ctx.Done():
		}
	}()
	pause := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-kick:
			return true
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	idleSince := time.Now()
	for ctx.Err() == nil {
		watched := tb.FeedWatch()
		if len(watched) == 0 {
			if time.Since(idleSince) >= relayIdle {
				s.relays.mu.Lock()
				select {
				case <-kick: // a long-poll came meanwhile: keep on
					s.relays.mu.Unlock()
					continue
				default:
				}
				delete(s.relays.tables, tb)
				s.relays.mu.Unlock()
				return
			}
			pause(relayIdle / 10)
			continue
		}
		idleSince = time.Now()
		moved, ok := s.relayRound(ctx, tb, watched, kick)
		if len(moved) > 0 {
			if err := tb.ProbeFeed(ctx, moved); err != nil {
				s.log.Debug("feed relay: probing", "table", tb.Name(), "err", err)
				ok = false
			}
		}
		if !ok {
			// No owner to ask, or one failed: the probe loop wakes the
			// readers meanwhile.
			pause(s.db.Config().FeedPollInterval)
		}
	}
}

// relayRound asks the owners of the watched partitions (other than this
// process) to answer when they move, until one of them has, a long-poll
// begins waiting (kick), or the relayed wait passes. It returns the
// partitions that moved, and false when there was nothing to ask or an
// owner could not be asked.
func (s *Server) relayRound(ctx context.Context, tb *engine.Table, watched map[int]uint64, kick chan struct{}) (moved []int, ok bool) {
	owners, err := tb.Owners(ctx)
	if err != nil {
		return nil, false
	}
	byAddr := map[string]map[int]uint64{}
	for p, n := range watched {
		if p >= len(owners) {
			continue
		}
		o := owners[p]
		if o.Self || o.Writer == "" || o.Addr == "" {
			continue // this process's commits wake its readers itself
		}
		if byAddr[o.Addr] == nil {
			byAddr[o.Addr] = map[int]uint64{}
		}
		byAddr[o.Addr][p] = n
	}
	if len(byAddr) == 0 {
		select {
		case <-kick:
			return nil, true
		case <-ctx.Done():
			return nil, true
		default:
			return nil, false
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		moved []int
		err   error
	}
	results := make(chan result, len(byAddr))
	for addr, after := range byAddr {
		go func() {
			m, err := s.relayAwait(rctx, tb.Name(), addr, after)
			results <- result{m, err}
		}()
	}
	ok = true
	for pending := len(byAddr); pending > 0; {
		select {
		case r := <-results:
			pending--
			switch {
			case r.err != nil && rctx.Err() == nil:
				s.metrics.feedRelays.WithLabelValues("error").Inc()
				s.log.Debug("feed relay", "table", tb.Name(), "err", r.err)
				ok = false
			case len(r.moved) > 0:
				s.metrics.feedRelays.WithLabelValues("moved").Inc()
				moved = append(moved, r.moved...)
				cancel() // wake the readers now; the next round asks again
			case r.err == nil:
				s.metrics.feedRelays.WithLabelValues("idle").Inc()
			}
		case <-kick:
			// The waiting long-polls changed: the next round asks for
			// the partitions they wait on now. The others answer at
			// once now.
			cancel()
			kick = nil
		}
	}
	return moved, ok
}

// relayAwait asks the owner at addr to answer once one of after's
// partitions moved, and returns those that did.
func (s *Server) relayAwait(ctx context.Context, table, addr string, after map[int]uint64) ([]int, error) {
	req := awaitRequest{After: make(map[string]uint64, len(after)), WaitNS: int64(min(relayWait, s.cfg.FeedMaxWait))}
	for p, n := range after {
		req.After[strconv.Itoa(p)] = n
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	u := "http://" + addr + strings.Replace(internalAwaitPath, "{table}", url.PathEscape(table), 1)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set(forwardedByHeader, s.db.Config().Shard)
	if len(s.cfg.AuthTokens) > 0 {
		hr.Header.Set("Authorization", "Bearer "+s.cfg.AuthTokens[0])
	}
	resp, err := s.fwd.Do(hr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAwaitBody))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("await at %s: %d %s", addr, resp.StatusCode, bytes.TrimSpace(data))
	}
	var ans awaitAnswer
	if err := json.Unmarshal(data, &ans); err != nil {
		return nil, fmt.Errorf("await at %s: %w", addr, err)
	}
	var moved []int
	for k, n := range ans.Known {
		p, err := strconv.Atoi(k)
		if err == nil && n > after[p] {
			moved = append(moved, p)
		}
	}
	return moved, nil
}

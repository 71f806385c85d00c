package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rollstore/rollstore/engine"
)

// pinger is what a store may offer for readiness probes (the Azure backend
// has Check; others may have Ping).
type pinger interface {
	Ping(ctx context.Context) error
}
type checker interface {
	Check(ctx context.Context) error
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// readyz reports whether this instance should get traffic: not draining,
// the store answers, and every table's snapshot has been loaded once (so
// first reads do not all pay for it at once). It answers within
// ReadyTimeout whatever the store does, so the probe sees the reason (a
// 503 naming it) rather than its own timeout; loading the tables goes on
// in the background past that bound, and a later probe finds it done.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	if s.draining.Load() {
		return newError(http.StatusServiceUnavailable, codeDraining, "server is draining")
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ReadyTimeout)
	defer cancel()
	if err := within(ctx, s.cfg.ReadyTimeout, s.ping); err != nil {
		return &apiError{status: http.StatusServiceUnavailable, code: codeNotReady, msg: "store unreachable", err: err}
	}
	warmed := func(context.Context) error {
		// Not under the probe's deadline: the load is shared and may take
		// longer than one probe.
		wctx, cancel := context.WithTimeout(context.Background(), warmTimeout)
		defer cancel()
		return s.warm(wctx)
	}
	if err := within(ctx, s.cfg.ReadyTimeout, warmed); err != nil {
		return &apiError{status: http.StatusServiceUnavailable, code: codeNotReady, msg: "loading tables", err: err}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}

// warmTimeout bounds one attempt at loading every table for readiness.
const warmTimeout = time.Minute

// within runs fn and returns its error, or an error naming the bound d if
// ctx ends first, even if fn does not heed ctx (fn then finishes in the
// background).
func within(ctx context.Context, d time.Duration, fn func(context.Context) error) error {
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no answer within %v: %w", d, ctx.Err())
	}
}

func (s *Server) ping(ctx context.Context) error {
	switch st := s.cfg.Store.(type) {
	case pinger:
		return st.Ping(ctx)
	case checker:
		return st.Check(ctx)
	}
	_, err := s.db.ListTables(ctx)
	return err
}

var errWarming = errors.New("tables are still being loaded")

// warm loads every table's snapshot once; after a success it is a no-op.
// A caller that finds a load in progress does not wait for it (a probe has
// a deadline the load may not), it reports errWarming.
func (s *Server) warm(ctx context.Context) error {
	if s.warmed.Load() {
		return nil
	}
	if !s.warmMu.TryLock() {
		return errWarming
	}
	defer s.warmMu.Unlock()
	if s.warmed.Load() {
		return nil
	}
	names, err := s.db.ListTables(ctx)
	if err != nil {
		return err
	}
	for _, name := range names {
		tb, err := s.db.Table(ctx, name)
		if errors.Is(err, engine.ErrTableNotFound) {
			continue // dropped since the listing
		}
		if err != nil {
			return fmt.Errorf("table %s: %w", name, err)
		}
		if err := tb.Refresh(ctx); err != nil {
			return fmt.Errorf("table %s: %w", name, err)
		}
		if err := s.join(ctx, tb); err != nil {
			return fmt.Errorf("table %s: %w", name, err)
		}
	}
	s.warmed.Store(true)
	return nil
}

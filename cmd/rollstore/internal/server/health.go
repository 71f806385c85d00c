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

const probeTimeout = 5 * time.Second

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// readyz reports whether this instance should get traffic: not draining,
// the store answers, and every table's snapshot has been loaded once (so
// first reads do not all pay for it at once).
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	if s.draining.Load() {
		return newError(http.StatusServiceUnavailable, codeDraining, "server is draining")
	}
	ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
	defer cancel()
	if err := s.ping(ctx); err != nil {
		return &apiError{status: http.StatusServiceUnavailable, code: codeNotReady, msg: "store unreachable", err: err}
	}
	if err := s.warm(ctx); err != nil {
		return &apiError{status: http.StatusServiceUnavailable, code: codeNotReady, msg: "loading tables", err: err}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
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
	}
	s.warmed.Store(true)
	return nil
}

package server

import (
	"context"
	"errors"
	"time"

	"github.com/rollstore/rollstore/engine"
)

// RunMerger merges every table every Config.MergeInterval, and sweeps
// orphans (and what drops left behind) every SweepEvery-th pass, until ctx
// is done. It does not flush:
// writers seal generations by age, and merging only sealed generations
// keeps the merger from cutting writers' generations short.
//
// Several processes may run it against one store: the engine's
// create-if-absent commits make a lost race a retry, not a corruption.
func (s *Server) RunMerger(ctx context.Context) {
	if s.cfg.MergeInterval < 0 {
		return
	}
	t := time.NewTicker(s.cfg.MergeInterval)
	defer t.Stop()
	for pass := 1; ; pass++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mergePass(ctx, pass%s.cfg.SweepEvery == 0)
	}
}

// mergePass merges (and optionally sweeps) each table once and refreshes
// the pending-generation gauges, which are computed here rather than on
// every scrape because a table's status costs store requests.
func (s *Server) mergePass(ctx context.Context, sweep bool) {
	names, err := s.db.ListTables(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error("merger: listing tables", "err", err)
		}
		return
	}
	s.metrics.keepTables(names)
	for _, name := range names {
		if ctx.Err() != nil {
			return
		}
		log := s.log.With("table", name)
		tb, err := s.db.Table(ctx, name)
		if errors.Is(err, engine.ErrTableNotFound) {
			continue // dropped since the listing
		}
		if err != nil {
			log.Error("merger: opening table", "err", err)
			continue
		}
		if res, err := s.mergeTable(ctx, tb, "loop"); errors.Is(err, engine.ErrMergerBusy) {
			// Another merger holds the table's lease: this one waits its turn.
			log.Debug("merger: another merger is running")
			continue
		} else if err != nil {
			if ctx.Err() == nil {
				log.Error("merger: merge", "err", err)
			}
		} else if res.Version > 0 || len(res.Reclaimed) > 0 {
			log.Info("merger: merged", "version", res.Version, "generations", len(res.Merged), "rows", res.Rows,
				"reclaimed", len(res.Reclaimed), "versions_collected", res.VersionsCollected, "took", res.Duration)
		}
		if sweep {
			res, err := tb.Sweep(ctx, s.db.Config().OrphanGrace)
			s.metrics.observeSweep(res, err)
			if errors.Is(err, engine.ErrMergerBusy) {
				log.Debug("merger: sweep skipped, another merger is running")
			} else if err != nil && ctx.Err() == nil {
				log.Error("merger: sweep", "err", err)
			} else if n := res.DataFiles + res.Payloads + res.Segments; n > 0 {
				log.Info("merger: swept orphans", "data_files", res.DataFiles, "payloads", res.Payloads, "segments", res.Segments)
			}
		}
		st, err := tb.Status(ctx)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("merger: status", "err", err)
			}
			continue
		}
		s.metrics.setPending(name, st)
	}
	if sweep && ctx.Err() == nil {
		// What a drop could not delete at once (a lease another process
		// held, a late write of a stopped process), and the registries of
		// creates that failed.
		if n, err := s.db.CollectDropped(ctx, s.db.Config().OrphanGrace); err != nil && ctx.Err() == nil {
			s.log.Error("merger: collecting dropped tables", "err", err)
		} else if n > 0 {
			s.log.Info("merger: collected what drops left", "objects", n)
		}
	}
}

// mergeTable runs one merge pass and records it.
func (s *Server) mergeTable(ctx context.Context, tb *engine.Table, trigger string) (engine.MergeResult, error) {
	start := time.Now()
	res, err := tb.Merge(ctx, engine.MergeOptions{})
	s.metrics.observeMerge(trigger, time.Since(start), res, err)
	return res, err
}

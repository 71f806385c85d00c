package server

import (
	"context"
	"errors"
	"time"

	"github.com/rollstore/rollstore/engine"
)

// RunMerger merges every table every Config.MergeInterval, and sweeps
// orphans (and what drops left behind) every SweepEvery-th pass, until ctx
// is done: an engine.Maintainer whose passes this records in metrics and
// logs. It does not flush: writers seal generations by age, and merging
// only sealed generations keeps the merger from cutting writers'
// generations short.
//
// Several processes may run it against one store: the engine's
// create-if-absent commits make a lost race a retry, not a corruption.
func (s *Server) RunMerger(ctx context.Context) {
	if s.cfg.MergeInterval < 0 {
		return
	}
	s.maintainer(ctx, s.cfg.SweepEvery).Run(ctx)
}

// maintainer is the merger of RunMerger, sweeping every sweepEvery-th pass
// (never when 0).
func (s *Server) maintainer(ctx context.Context, sweepEvery int) *engine.Maintainer {
	return engine.NewMaintainer(s.db, engine.MaintainOptions{
		Interval:       s.cfg.MergeInterval,
		SweepEvery:     sweepEvery,
		CollectDropped: true,
		Status:         true,
		OnPass:         func(p engine.MaintenancePass) { s.recordPass(ctx, p) },
	})
}

// mergePass runs one pass of RunMerger's now, sweeping if sweep is set.
func (s *Server) mergePass(ctx context.Context, sweep bool) {
	every := 0
	if sweep {
		every = 1
	}
	s.maintainer(ctx, every).Pass(ctx)
}

// recordPass records a merger pass: metrics, logs and the pending-generation
// gauges, which are computed by the pass rather than on every scrape because
// a table's status costs store requests.
func (s *Server) recordPass(ctx context.Context, p engine.MaintenancePass) {
	s.passLog.recordPass(p)
	if p.ListErr != nil {
		if ctx.Err() == nil {
			s.log.Error("merger: listing tables", "err", p.ListErr)
		}
		return
	}
	s.metrics.keepTables(p.Listed)
	for _, t := range p.Tables {
		log := s.log.With("table", t.Table)
		if errors.Is(t.OpenErr, engine.ErrTableNotFound) {
			continue // dropped since the listing
		}
		if t.OpenErr != nil {
			log.Error("merger: opening table", "err", t.OpenErr)
			continue
		}
		s.metrics.observeMerge("loop", t.MergeDuration, t.Merge, t.MergeErr)
		if res, err := t.Merge, t.MergeErr; t.Busy {
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
		if t.Swept {
			res, err := t.Sweep, t.SweepErr
			s.metrics.observeSweep(res, err)
			if errors.Is(err, engine.ErrMergerBusy) {
				log.Debug("merger: sweep skipped, another merger is running")
			} else if err != nil && ctx.Err() == nil {
				log.Error("merger: sweep", "err", err)
			} else if n := res.DataFiles + res.Payloads + res.Segments; n > 0 {
				log.Info("merger: swept orphans", "data_files", res.DataFiles, "payloads", res.Payloads, "segments", res.Segments)
			}
		}
		if !t.HasStatus {
			continue
		}
		if t.StatusErr != nil {
			if ctx.Err() == nil {
				log.Warn("merger: status", "err", t.StatusErr)
			}
			continue
		}
		s.metrics.setPending(t.Table, t.Status)
	}
	// What a drop could not delete at once (a lease another process held,
	// a late write of a stopped process), and the registries of creates
	// that failed.
	if p.Collecting {
		if err := p.CollectErr; err != nil && ctx.Err() == nil {
			s.log.Error("merger: collecting dropped tables", "err", err)
		} else if p.Collected > 0 {
			s.log.Info("merger: collected what drops left", "objects", p.Collected)
		}
	}
}

// mergeTable runs one merge pass and records it.
func (s *Server) mergeTable(ctx context.Context, tb *engine.Table, trigger string) (engine.MergeResult, error) {
	start := time.Now()
	res, err := tb.Merge(ctx, engine.MergeOptions{})
	s.metrics.observeMerge(trigger, time.Since(start), res, err)
	s.passLog.recordMerge(tb.Name(), trigger, start, res, err)
	return res, err
}

package server

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/rollstore/rollstore/engine"
)

// uiMergesPerTable is how many of a table's recent merges the status page
// shows (and the server keeps).
const uiMergesPerTable = 8

// passLog (its zero value is ready) keeps what the status page shows of the merges: the last pass of
// the in-process merger, and per table the last uiMergesPerTable merges
// this process ran that did something or failed, and every merge asked for
// with POST .../merge. A loop pass that found nothing to merge, or found
// another process's merger at work (routine with several mergers), is
// only counted in the pass, so an idle merger does not push the
// interesting merges out. It lives in memory only: a restarted process
// starts with an empty log, and each process shows its own merges.
type passLog struct {
	mu     sync.Mutex
	passes int
	last   *uiPass
	tables map[string][]uiMerge // newest last
}

// uiPass summarises one pass of the merger loop.
type uiPass struct {
	// N counts the passes this server recorded, from 1.
	N        int           `json:"n"`
	Start    time.Time     `json:"start"`
	Duration time.Duration `json:"duration_ns"`
	// Tables is how many tables the pass reached; of them, Merged how many
	// it merged something into (or reclaimed from), Busy how many another
	// merger held, Failed how many failed.
	Tables int    `json:"tables"`
	Merged int    `json:"merged"`
	Busy   int    `json:"busy"`
	Failed int    `json:"failed"`
	Error  string `json:"error,omitempty"`
}

// uiMerge is one merge of one table.
type uiMerge struct {
	At       time.Time     `json:"at"`
	Trigger  string        `json:"trigger"` // "loop" (the merger) or "api" (POST .../merge)
	Duration time.Duration `json:"duration_ns"`
	// Outcome is "merged" (a new base version), "reclaimed" (no new
	// version, but merged generations deleted, abandoned ones sealed or
	// old versions collected), "idle" (an API merge that found nothing to
	// do), "busy" (another merger holds the table's lease) or "failed"
	// (Error says why).
	Outcome     string `json:"outcome"`
	Version     uint64 `json:"version"`
	Generations int    `json:"generations"`
	Rows        int64  `json:"rows"`
	Reclaimed   int    `json:"reclaimed"`
	Leftover    bool   `json:"leftover"`
	Error       string `json:"error,omitempty"`
}

// recordPass notes a pass of the merger loop (engine.MaintainOptions.OnPass).
func (l *passLog) recordPass(p engine.MaintenancePass) {
	sum := &uiPass{Start: p.Start, Duration: p.Duration, Tables: len(p.Tables)}
	if p.ListErr != nil {
		sum.Error = "listing tables: " + p.ListErr.Error()
	}
	var merges []struct {
		table string
		m     uiMerge
	}
	for _, t := range p.Tables {
		if errors.Is(t.OpenErr, engine.ErrTableNotFound) {
			continue
		}
		m := uiMerge{At: p.Start, Trigger: "loop", Duration: t.MergeDuration}
		switch {
		case t.OpenErr != nil:
			m.Outcome, m.Error = "failed", "opening the table: "+t.OpenErr.Error()
		case t.Busy:
			m.Outcome = "busy"
		default:
			m.fill(t.Merge, t.MergeErr)
		}
		switch m.Outcome {
		case "idle":
			continue // nothing to show
		case "busy":
			sum.Busy++
			continue
		case "failed":
			sum.Failed++
		case "merged", "reclaimed":
			sum.Merged++
		}
		merges = append(merges, struct {
			table string
			m     uiMerge
		}{t.Table, m})
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	l.passes++
	sum.N = l.passes
	l.last = sum
	if p.ListErr == nil && p.Listed != nil {
		// Forget the tables that are gone (dropped).
		for name := range l.tables {
			if !slices.Contains(p.Listed, name) {
				delete(l.tables, name)
			}
		}
	}
	for _, e := range merges {
		l.add(e.table, e.m)
	}
}

// recordMerge notes a merge run outside the loop (POST .../merge).
func (l *passLog) recordMerge(table, trigger string, start time.Time, res engine.MergeResult, err error) {
	m := uiMerge{At: start, Trigger: trigger, Duration: time.Since(start)}
	m.fill(res, err)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.add(table, m)
}

// forget drops a table's merges (the table was dropped).
func (l *passLog) forget(table string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.tables, table)
}

func (m *uiMerge) fill(res engine.MergeResult, err error) {
	switch {
	case errors.Is(err, engine.ErrMergerBusy):
		m.Outcome = "busy"
	case err != nil:
		m.Outcome, m.Error = "failed", err.Error()
	case res.Version > 0:
		m.Outcome = "merged"
	case len(res.Reclaimed) > 0 || len(res.Sealed) > 0 || res.VersionsCollected > 0:
		m.Outcome = "reclaimed"
	default:
		m.Outcome = "idle"
	}
	m.Version, m.Generations, m.Rows, m.Reclaimed, m.Leftover = res.Version, len(res.Merged), res.Rows, len(res.Reclaimed), res.Leftover
}

// add appends m to table's merges, dropping the oldest beyond the bound.
// l.mu is held.
func (l *passLog) add(table string, m uiMerge) {
	if l.tables == nil {
		l.tables = map[string][]uiMerge{}
	}
	ms := append(l.tables[table], m)
	if len(ms) > uiMergesPerTable {
		ms = slices.Clone(ms[len(ms)-uiMergesPerTable:])
	}
	l.tables[table] = ms
}

// snapshot returns the passes counted, the last pass, and a table's
// merges newest first.
func (l *passLog) snapshot() (passes int, last *uiPass, merges func(table string) []uiMerge) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last != nil {
		c := *l.last
		last = &c
	}
	copied := make(map[string][]uiMerge, len(l.tables))
	for name, ms := range l.tables {
		c := slices.Clone(ms)
		slices.Reverse(c)
		copied[name] = c
	}
	return l.passes, last, func(table string) []uiMerge {
		if ms := copied[table]; ms != nil {
			return ms
		}
		return []uiMerge{}
	}
}

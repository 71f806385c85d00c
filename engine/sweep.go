package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/rollstore/rollstore/objstore"
)

// SweepResult reports an orphan sweep.
type SweepResult struct {
	DataFiles int `json:"data_files"`
	Payloads  int `json:"payloads"`
	Segments  int `json:"segments"`
}

// Sweep deletes objects that nothing references and that are older than
// grace: data files of merges that crashed or lost their commit, payloads
// uploaded for appends that were never acknowledged, and segments a seal
// record does not list. The grace period protects work in progress (a
// payload is uploaded before its segment is written), so it must exceed the
// longest append or merge; Config.OrphanGrace is the default.
func (t *Table) Sweep(ctx context.Context, grace time.Duration) (SweepResult, error) {
	t.mergeMu.Lock()
	defer t.mergeMu.Unlock()
	// The merger lease keeps merges of other processes out while the sweep
	// decides what is unreferenced: a merge commits references to files and
	// payloads this sweep would otherwise see as orphans.
	o, err := t.db.acquire(ctx, t.lay.MergerLease())
	if errors.Is(err, objstore.ErrLeased) {
		return SweepResult{}, fmt.Errorf("%w: %s", ErrMergerBusy, t.Name())
	}
	if err != nil {
		return SweepResult{}, fmt.Errorf("acquiring the merger lease: %w", err)
	}
	defer o.release(context.WithoutCancel(ctx))

	var res SweepResult
	cutoff := t.db.cfg.Now().Add(-grace)
	old := func(e objstore.Entry) bool { return !e.LastModified.After(cutoff) }

	// The WAL first, then the versions (the order of refreshSnapshot): a
	// generation reclaimed in between was merged into a version the listing
	// below still sees, so none of its payloads looks unreferenced.
	gens, err := t.listWAL(ctx)
	if err != nil {
		return res, err
	}
	refs := map[string]bool{}
	strays := map[string]bool{}
	for _, g := range gens {
		segs, err := t.loadGeneration(ctx, g)
		if errors.Is(err, objstore.ErrNotFound) {
			continue // reclaimed since the listing: its rows are in the base below
		}
		if err != nil {
			return res, err
		}
		listed := map[string]bool{}
		for _, s := range segs {
			listed[s.key] = true
			for _, r := range s.layout.Rows {
				if r.Ref != "" {
					refs[r.Ref] = true
				}
			}
		}
		if g.sealed {
			for _, k := range g.keys {
				if wk, _ := t.lay.ParseWAL(k); !wk.IsSeal && !listed[k] {
					strays[k] = true
				}
			}
		}
	}
	_, versions, err := t.listVersions(ctx)
	if err != nil {
		return res, err
	}
	liveFiles, err := t.liveFiles(ctx, versions, nil)
	if err != nil {
		return res, err
	}
	var latest uint64
	if len(versions) > 0 {
		latest = versions[len(versions)-1]
		// Versions are cumulative (rows are never removed), so the latest
		// references every payload an older retained version does.
		s, err := t.loadBase(ctx, latest)
		if err != nil {
			return res, err
		}
		for _, f := range s.files {
			for _, r := range f.layout.Rows {
				if r.Ref != "" {
					refs[r.Ref] = true
				}
			}
		}
	}

	var doomed []string
	err = t.db.store.List(ctx, t.lay.DataPrefix(), objstore.ListOptions{}, func(e objstore.Entry) error {
		name, _, ok := t.lay.ParseDataObject(e.Key)
		// A file named for a version not yet committed may belong to a merge
		// in progress (without leases nothing else keeps one out).
		if ok && !liveFiles[name] && old(e) && fileVersion(name) <= latest {
			doomed = append(doomed, e.Key)
			res.DataFiles++
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	err = t.db.store.List(ctx, t.lay.PayloadsPrefix(), objstore.ListOptions{}, func(e objstore.Entry) error {
		if t.lay.IsPayload(e.Key) && !refs[e.Key] && old(e) {
			doomed = append(doomed, e.Key)
			res.Payloads++
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	if len(strays) > 0 {
		// Only strays old enough: a stray may be a fenced writer's segment
		// still being looked at by an operator; the grace applies to all.
		err = t.db.store.List(ctx, t.lay.WALPrefix(), objstore.ListOptions{}, func(e objstore.Entry) error {
			if strays[e.Key] && old(e) {
				doomed = append(doomed, e.Key)
				res.Segments++
			}
			return nil
		})
		if err != nil {
			return res, err
		}
	}
	t.db.stats.OrphansSwept.Add(int64(len(doomed)))
	return res, t.db.store.DeleteMany(ctx, doomed)
}

// fileVersion is the version a data file was written for: merges name their
// files "<version:020>-<random>".
func fileVersion(name string) uint64 {
	if len(name) < 20 {
		return 0
	}
	v, err := strconv.ParseUint(name[:20], 10, 64)
	if err != nil {
		return 0
	}
	return v
}

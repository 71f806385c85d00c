package engine

import (
	"context"
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
	var res SweepResult
	cutoff := t.db.cfg.Now().Add(-grace)
	old := func(e objstore.Entry) bool { return !e.LastModified.After(cutoff) }

	_, versions, err := t.listVersions(ctx)
	if err != nil {
		return res, err
	}
	liveFiles, err := t.liveFiles(ctx, versions, nil)
	if err != nil {
		return res, err
	}
	// Payloads referenced by retained versions or by any generation present.
	refs := map[string]bool{}
	for _, v := range versions {
		s, err := t.loadBase(ctx, v)
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
	gens, err := t.listWAL(ctx)
	if err != nil {
		return res, err
	}
	strays := map[string]bool{}
	for _, g := range gens {
		segs, err := t.loadGeneration(ctx, g)
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

	var doomed []string
	err = t.db.store.List(ctx, t.lay.DataPrefix(), objstore.ListOptions{}, func(e objstore.Entry) error {
		if name, _, ok := t.lay.ParseDataObject(e.Key); ok && !liveFiles[name] && old(e) {
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

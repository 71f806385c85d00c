package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/engine/keyspace"
	"github.com/rollstore/rollstore/objstore"
)

// observer looks at the table in the store directly, read-only, to see
// what the processes cannot report: a merge caught half-way, generations
// merged but not yet reclaimed.
type observer struct {
	store objstore.Bucket // under the cluster's prefix
	table keyspace.Table
	lay   keyspace.Inc // the table's incarnation, once it exists (see resolve)
}

// resolve finds the incarnation the table's descriptor names.
func (o *observer) resolve(ctx context.Context) error {
	if o.lay.Name() != "" {
		return nil
	}
	data, _, err := objstore.ReadAll(ctx, o.store, o.table.Descriptor(), 1<<20)
	if err != nil {
		return err
	}
	var d struct {
		Incarnation string `json:"incarnation"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return err
	}
	o.lay, err = o.table.Incarnation(d.Incarnation)
	return err
}

type genRef struct {
	shard string
	gen   uint64
}

func (g genRef) String() string { return fmt.Sprintf("%s/%d", g.shard, g.gen) }

// baseState is the base directory as listed: committed versions and the
// data files present.
type baseState struct {
	latest uint64
	data   map[string]uint64 // data file name → the version it was written for
}

func (o *observer) base(ctx context.Context) (baseState, error) {
	st := baseState{data: map[string]uint64{}}
	if err := o.resolve(ctx); err != nil {
		return st, err
	}
	err := o.store.List(ctx, o.lay.Root()+"base/", objstore.ListOptions{}, func(e objstore.Entry) error {
		if v, ok := o.lay.ParseVersion(e.Key); ok {
			st.latest = max(st.latest, v)
		} else if name, _, ok := o.lay.ParseDataObject(e.Key); ok {
			st.data[name] = dataFileVersion(name)
		}
		return nil
	})
	return st, err
}

// dataFileVersion is the version a merge wrote a data file for: the merge
// names its files "<version:020>-<random>"; 0 if the name is otherwise.
func dataFileVersion(name string) uint64 {
	if len(name) < 21 || name[20] != '-' {
		return 0
	}
	v, err := strconv.ParseUint(name[:20], 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// uncommitted returns the data files written for a version above the
// latest committed one that were not in before: a merge between writing its
// files and committing them.
func (s baseState) uncommitted(before baseState) []string {
	var out []string
	for name, v := range s.data {
		if _, old := before.data[name]; !old && v > s.latest {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func (o *observer) manifest(ctx context.Context, v uint64) (*engine.Manifest, error) {
	if err := o.resolve(ctx); err != nil {
		return nil, err
	}
	data, _, err := objstore.ReadAll(ctx, o.store, o.lay.Version(v), 64<<20)
	if err != nil {
		return nil, err
	}
	var m engine.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("manifest %d: %w", v, err)
	}
	return &m, nil
}

// generations lists the WAL generations present.
func (o *observer) generations(ctx context.Context) ([]genRef, error) {
	seen := map[genRef]bool{}
	var out []genRef
	if err := o.resolve(ctx); err != nil {
		return nil, err
	}
	err := o.store.List(ctx, o.lay.WALPrefix(), objstore.ListOptions{}, func(e objstore.Entry) error {
		if k, ok := o.lay.ParseWAL(e.Key); ok && !k.Registry && !k.IsHead {
			g := genRef{k.Shard, k.Gen}
			if !seen[g] {
				seen[g] = true
				out = append(out, g)
			}
		}
		return nil
	})
	return out, err
}

// unreclaimed returns the generations present that version v merged.
func (o *observer) unreclaimed(ctx context.Context, v uint64) ([]genRef, error) {
	if v == 0 {
		return nil, nil
	}
	m, err := o.manifest(ctx, v)
	if err != nil {
		return nil, err
	}
	gens, err := o.generations(ctx)
	if err != nil {
		return nil, err
	}
	var out []genRef
	for _, g := range gens {
		if g.gen <= m.Watermarks[g.shard] {
			out = append(out, g)
		}
	}
	return out, nil
}

// mergeKill is what a SIGKILL of the merger interrupted.
type mergeKill struct {
	trigger     string   // what the test saw before it killed
	version     uint64   // latest committed version after the kill
	uncommitted []string // data files written for a version never committed
	unreclaimed []genRef // generations merged into version but not deleted
}

// midMerge reports whether the kill left a merge pass half done.
func (k mergeKill) midMerge() bool { return len(k.uncommitted) > 0 || len(k.unreclaimed) > 0 }

func (k mergeKill) String() string {
	switch {
	case len(k.uncommitted) > 0:
		return fmt.Sprintf("killed between writing data files and committing (%d uncommitted data files above version %d; trigger: %s)",
			len(k.uncommitted), k.version, k.trigger)
	case len(k.unreclaimed) > 0:
		return fmt.Sprintf("killed after committing version %d, before reclaiming %d of its generations %v (trigger: %s)",
			k.version, len(k.unreclaimed), k.unreclaimed, k.trigger)
	}
	return fmt.Sprintf("killed with no merge half done (version %d; trigger: %s)", k.version, k.trigger)
}

// watchMerge polls the base listing until a merge is in flight relative to
// before: a data file for a version not yet committed, or a version newer
// than before's (committed a moment ago, its reclamation running). It
// returns what it saw, or an error after d.
func (o *observer) watchMerge(ctx context.Context, before baseState, d time.Duration) (string, error) {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		cur, err := o.base(ctx)
		if err != nil {
			return "", err
		}
		if files := cur.uncommitted(before); len(files) > 0 {
			return fmt.Sprintf("data file %s written, version %d not committed", files[0], cur.latest+1), nil
		}
		if cur.latest > before.latest {
			return fmt.Sprintf("version %d committed", cur.latest), nil
		}
		<-tick.C
	}
	return "", fmt.Errorf("no merge seen in %v", d)
}

// afterKill describes the store after the merger was killed.
func (o *observer) afterKill(ctx context.Context, trigger string, before baseState) (mergeKill, error) {
	k := mergeKill{trigger: trigger}
	cur, err := o.base(ctx)
	if err != nil {
		return k, err
	}
	k.version, k.uncommitted = cur.latest, cur.uncommitted(before)
	k.unreclaimed, err = o.unreclaimed(ctx, cur.latest)
	return k, err
}

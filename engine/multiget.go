package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/internal/sched"
)

// GetManyOptions select what a multi-id read sees and how it runs.
type GetManyOptions struct {
	ReadOptions
	// Parallelism bounds the lookups one call runs at once (default
	// DefaultGetManyParallelism).
	Parallelism int
}

// DefaultGetManyParallelism is GetMany's default bound on lookups at once.
const DefaultGetManyParallelism = 16

// GetMany returns the metadata of the rows of ids, in the order of ids:
// out[i] is ids[i]'s row, or nil when the table holds no such row. An id
// given twice is looked up once and answered at each of its places.
//
// Every lookup is a Get's: the same resident-snapshot-then-refresh path,
// the same bounded recovery from files reclaimed under the read, so a row
// that exists is always found, as by Get. The view is shared by the ids
// of one call: every row acknowledged before the call began is visible,
// and the ids the resident snapshot does not hold share one refresh
// (absent ids cost no more than that). With opts.Version the version is
// checked once for the whole call (ErrVersionGone, ErrNoVersion).
//
// An invalid id fails the call (ErrInvalid, naming its index); so does any
// failure of a lookup other than the row's absence (a file still missing
// after the retries, the store failing): the first such error is
// returned, and no lookup starts after it.
func (t *Table) GetMany(ctx context.Context, ids []string, opts GetManyOptions) ([]*Record, error) {
	out, err := t.getMany(ctx, ids, opts)
	return onSuccessor(ctx, t, out, err, func(nt *Table) ([]*Record, error) { return nt.getMany(ctx, ids, opts) })
}

func (t *Table) getMany(ctx context.Context, ids []string, opts GetManyOptions) ([]*Record, error) {
	// The distinct ids, each with the places it answers.
	first := make(map[string]int, len(ids))
	var uniq []string
	for i, id := range ids {
		if err := rowfile.ValidateID(id); err != nil {
			return nil, fmt.Errorf("ids[%d]: %w", i, err)
		}
		if _, ok := first[id]; !ok {
			first[id] = len(uniq)
			uniq = append(uniq, id)
		}
	}
	if err := t.checkLive(); err != nil {
		return nil, err
	}
	par := opts.Parallelism
	if par <= 0 {
		par = DefaultGetManyParallelism
	}
	found := make([]*Record, len(uniq))
	var lookup func(ctx context.Context, id string, use func(context.Context, location) error) error
	if v := opts.Version; v > 0 {
		s, err := t.pinnedSnapshot(ctx, v)
		if err != nil {
			return nil, err
		}
		lookup = func(ctx context.Context, id string, use func(context.Context, location) error) error {
			return t.withPinnedIn(ctx, s, id, v, t.db.rt.Now(), use)
		}
	} else {
		view := t.newReadView(true)
		lookup = func(ctx context.Context, id string, use func(context.Context, location) error) error {
			var attempts int // per id, as for a Get
			return t.withRowIn(ctx, view, id, t.db.rt.Now(), &attempts, use)
		}
	}
	err := sched.Parallel(ctx, t.db.rt, len(uniq), par, func(ctx context.Context, i int) error {
		err := lookup(ctx, uniq[i], func(ctx context.Context, loc location) error {
			rec, err := t.readRow(ctx, loc)
			if err == nil {
				found[i] = rec
			}
			return err
		})
		if errors.Is(err, ErrNotFound) {
			return nil // absent: nil in its places
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]*Record, len(ids))
	for i, id := range ids {
		out[i] = found[first[id]]
	}
	return out, nil
}

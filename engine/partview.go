// Refreshing one partition: a point read of a partitioned table that the
// resident snapshot does not answer, and a commit's existence check, need
// only the view of the id's partition to be fresh, which costs one HEAD of
// its head whatever the number of partitions or writers (plus, once per
// ResidentMaxAge, a refresh of the whole table).

package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
)

func (t *Table) partRefresher(shard string) *refresher {
	t.partMu.Lock()
	defer t.partMu.Unlock()
	r := t.partRefresh[shard]
	if r == nil {
		r = &refresher{rt: t.db.rt, seq: &t.flights}
		t.partRefresh[shard] = r
	}
	return r
}

// refreshedPartition returns a snapshot whose view of shard was probed by a
// refresh that started after ticket (a ticket of any of the table's
// refreshers). Every row of the partition acknowledged before the ticket
// is in it: in its base (up to the base's watermark for the partition) or
// in the generations its head counted when probed.
func (t *Table) refreshedPartition(ctx context.Context, shard string, ticket uint64) (*snapshot, error) {
	return t.partRefresher(shard).after(ctx, ticket, false, func(ctx context.Context, id uint64, _ bool) (*snapshot, error) {
		s, err := t.refreshPartition(ctx, shard, id)
		if err != nil {
			return nil, t.noteGone(err)
		}
		return s, nil
	})
}

// refreshPartition probes shard's head and brings the resident snapshot's
// view of it up to that head. Anything it cannot settle with the resident
// base (no snapshot yet, a generation reclaimed since: merged into a newer
// base) it leaves to a whole refresh that probes for the newest base.
func (t *Table) refreshPartition(ctx context.Context, shard string, flight uint64) (*snapshot, error) {
	t.db.stats.Refreshes.Add(1)
	whole := func(probe bool) (*snapshot, error) {
		s, err := t.refreshSnapshot(ctx, flight, probe)
		if err != nil {
			return nil, err
		}
		t.install(s)
		return s, nil
	}
	cur := t.snap.Load()
	if cur == nil {
		return whole(false)
	}
	if err := t.checkLive(); err != nil {
		return nil, err
	}
	// A snapshot past ResidentMaxAge is checked against the registry in
	// the same round trip as the head (a drop, or a merge's new base,
	// shows there), and refreshed whole in the background when its base
	// probe is due: no read waits on a whole refresh's probes.
	now := t.db.rt.Now()
	stale := now.Sub(cur.checkedAt) > t.db.cfg.ResidentMaxAge
	var h head
	var err, regErr error
	var regAttrs objstore.Attrs
	if err := sched.Parallel(ctx, t.db.rt, 2, 2, func(ctx context.Context, i int) error {
		if i == 0 {
			h, err = readHead(ctx, t.db, t.keys, shard)
		} else if stale {
			regAttrs, regErr = t.db.store.Head(ctx, t.keys.Registry())
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var checked time.Time
	if stale {
		switch {
		case errors.Is(regErr, objstore.ErrNotFound):
			return nil, errDropped
		case regErr != nil:
			return nil, regErr
		case regAttrs.ETag != t.regSeen(cur):
			reg, _, err := readRegistry(ctx, t.db, t.keys)
			if errors.Is(err, objstore.ErrNotFound) || err == nil && reg.Dropped {
				return nil, errDropped
			}
			if err != nil {
				return nil, err
			}
			if reg.Base > cur.version() {
				return whole(true) // a merge committed: its base holds rows the WAL may have lost
			}
			t.regEtag.Store(&reg.etag)
		}
		checked = now
		if now.Sub(cur.baseProbedAt) >= t.db.cfg.BaseProbeInterval {
			t.refreshInBackground()
		}
	}
	switch {
	case errors.Is(err, errNoHead):
		// A partition never written, or an incarnation whose drop
		// deleted its heads: only the registry tells them apart.
		return whole(false)
	case err != nil:
		return nil, err
	case h.Dropped:
		return nil, errDropped
	}
	prev := cur.shards[shard]
	if prev != nil && !headAfter(h, prev.head) {
		if !checked.IsZero() {
			return t.installPartition(cur, shard, prev, checked), nil
		}
		return cur, nil // nothing new: cur already counts this head
	}
	sv := &shardView{head: h}
	var mu sync.Mutex
	fetches := t.pendingGens(shard, sv, prev, cur.base.m.watermark(shard), &mu)
	err = sched.Parallel(ctx, t.db.rt, len(fetches), 8, func(ctx context.Context, i int) error { return fetches[i](ctx) })
	if errors.Is(err, objstore.ErrNotFound) {
		t.db.stats.RefreshRetries.Add(1)
		return whole(true)
	}
	if err != nil {
		return nil, err
	}
	return t.installPartition(cur, shard, sv, checked), nil
}

// headAfter reports whether head a is later in its shard's chain than b.
func headAfter(a, b head) bool {
	if a.Gen != b.Gen {
		return a.Gen > b.Gen
	}
	if a.Sealed != b.Sealed {
		return a.Sealed
	}
	return a.Segs > b.Segs
}

// installPartition makes sv the resident snapshot's view of shard (unless
// the resident one is later already), less the generations the resident
// base holds, and returns the snapshot it installed. The rest of the
// snapshot, its base and its flight stay as they are, and its checkedAt
// moves to checked if later (the registry was checked then); from, the
// snapshot sv was built on, stands in for a resident one evicted meanwhile.
func (t *Table) installPartition(from *snapshot, shard string, sv *shardView, checked time.Time) *snapshot {
	for {
		cur := t.snap.Load()
		base := cur
		if base == nil {
			base = from
		}
		ns := *base
		ns.shards = make(map[string]*shardView, len(base.shards)+1)
		for k, v := range base.shards {
			ns.shards[k] = v
		}
		if old := base.shards[shard]; old == nil || headAfter(sv.head, old.head) {
			wm := base.base.m.watermark(shard)
			nv := &shardView{head: sv.head}
			for _, g := range sv.gens {
				if g.gen > wm {
					nv.gens = append(nv.gens, g)
				}
			}
			ns.shards[shard] = nv
		}
		if checked.After(ns.checkedAt) {
			ns.checkedAt = checked
		}
		ns.pendingGens = 0
		ns.account()
		if t.retiredErr() != nil {
			return &ns
		}
		if t.snap.CompareAndSwap(cur, &ns) {
			t.db.resident.Add(t, &ns, ns.size)
			return &ns
		}
	}
}

// regSeen is the registry ETag last checked (by a partition refresh) or
// read (by a whole one, into cur).
func (t *Table) regSeen(cur *snapshot) string {
	if p := t.regEtag.Load(); p != nil {
		return *p
	}
	if cur.reg != nil {
		return cur.reg.etag
	}
	return ""
}

// refreshInBackground starts a whole refresh no read waits for (one at a
// time): it probes for a newer base and prunes what the base now holds.
func (t *Table) refreshInBackground() {
	if !t.bgRefresh.CompareAndSwap(false, true) {
		return
	}
	t.db.rt.Go(func() {
		defer t.bgRefresh.Store(false)
		_, _ = t.refreshed(context.Background(), t.refresh.ticket(), false)
	})
}

// The heads the feed reads by, shared by every reader of a table in the
// process: long-polls wait on one probe of the partitions they watch, and
// the owner's own commits wake them at once.

package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rollstore/rollstore/internal/sched"
)

// feedWatch holds, per partition, the newest head the process has seen and
// when it was observed; while readers wait on some partitions, one loop
// probes those heads every FeedPollInterval, whatever the number of
// readers.
type feedWatch struct {
	mu      sync.Mutex
	heads   map[int]seenHead
	waiting map[int]int // readers waiting per partition
	running bool        // the probe loop runs
	// changed fires when a head moves; it is replaced after firing.
	changed sched.Event
}

// seenHead is a head and a time at or before which it was observed: it
// counts every segment acknowledged before then.
type seenHead struct {
	h  head
	at time.Time
}

func (t *Table) watch() *feedWatch {
	t.feedOnce.Do(func() {
		t.feedw = &feedWatch{heads: map[int]seenHead{}, waiting: map[int]int{}, changed: t.db.rt.NewEvent()}
	})
	return t.feedw
}

// note records a head observed at (or after) at, when it is later in the
// chain than the one known, and wakes the waiting readers.
func (w *feedWatch) note(rt sched.Runtime, p int, h head, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	old, ok := w.heads[p]
	switch {
	case !ok, headAfter(h, old.h):
		w.heads[p] = seenHead{h: h, at: at}
		w.changed.Fire()
		w.changed = rt.NewEvent()
	case h.etag == old.h.etag && at.After(old.at):
		w.heads[p] = seenHead{h: old.h, at: at}
	}
}

// feedHeads returns the head of each partition as observed after since:
// the one the process saw last when it was observed late enough (a probe
// for a waiting reader, or this process's own commit), else a HEAD of its
// own. A partition with no head yet has the zero head.
func (t *Table) feedHeads(ctx context.Context, parts []int, since time.Time) (map[int]head, error) {
	w := t.watch()
	out := make(map[int]head, len(parts))
	var probe []int
	w.mu.Lock()
	for _, p := range parts {
		if s, ok := w.heads[p]; ok && s.at.After(since) {
			out[p] = s.h
		} else {
			probe = append(probe, p)
		}
	}
	w.mu.Unlock()
	got, err := t.probeHeads(ctx, probe)
	if err != nil {
		return nil, err
	}
	for p, h := range got {
		out[p] = h
	}
	return out, nil
}

// knownHeads returns the heads of parts the process knows (nil if it knows
// not every one), and whether each was observed after since.
func (t *Table) knownHeads(parts []int, since time.Time) (map[int]head, bool) {
	w := t.watch()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[int]head, len(parts))
	fresh := true
	for _, p := range parts {
		s, ok := w.heads[p]
		if !ok {
			return nil, false
		}
		out[p] = s.h
		fresh = fresh && s.at.After(since)
	}
	return out, fresh
}

// probeHeads HEADs the heads of parts, in parallel, and notes them.
func (t *Table) probeHeads(ctx context.Context, parts []int) (map[int]head, error) {
	w := t.watch()
	at := t.db.rt.Now()
	heads := make([]head, len(parts))
	err := sched.Parallel(ctx, t.db.rt, len(parts), 32, func(ctx context.Context, i int) error {
		h, err := readHead(ctx, t.db, t.keys, PartitionName(parts[i]))
		if errors.Is(err, errNoHead) {
			return nil
		}
		heads[i] = h
		return err
	})
	if err != nil {
		return nil, err
	}
	t.db.stats.FeedProbes.Add(int64(len(parts)))
	out := make(map[int]head, len(parts))
	for i, p := range parts {
		out[p] = heads[i]
		w.note(t.db.rt, p, heads[i], at)
	}
	return out, nil
}

// feedNotify tells the waiting readers of a commit of this process: h is
// the head its swap installed, which began at swapAt.
func (t *Table) feedNotify(shard string, h head, swapAt time.Time) {
	p, ok := partitionIndex(shard)
	if !ok || t.partitions == 0 {
		return
	}
	t.watch().note(t.db.rt, p, h, swapAt)
}

// feedWait waits until the head of one of parts moves past the one read
// (or deadline fires, or ctx ends). The wait costs no store call of its
// own: the process's probe loop (one for all its waiting readers) and
// its own commits move the heads.
func (t *Table) feedWait(ctx context.Context, parts []int, read map[int]head, pos map[int]Position, deadline sched.Event) error {
	w := t.watch()
	w.mu.Lock()
	for _, p := range parts {
		w.waiting[p]++
	}
	if !w.running {
		w.running = true
		t.db.rt.Go(t.probeLoop)
	}
	w.mu.Unlock()
	t.db.stats.FeedWaiting.Add(1)
	defer func() {
		t.db.stats.FeedWaiting.Add(-1)
		w.mu.Lock()
		for _, p := range parts {
			if w.waiting[p]--; w.waiting[p] <= 0 {
				delete(w.waiting, p)
			}
		}
		w.mu.Unlock()
	}()
	for {
		w.mu.Lock()
		changed := w.changed
		moved := false
		for _, p := range parts {
			if s, ok := w.heads[p]; ok && headAfter(s.h, read[p]) && s.h.Rows > pos[p].Offset {
				moved = true
			}
		}
		w.mu.Unlock()
		if moved {
			return nil
		}
		if _, err := t.db.rt.Wait(ctx, changed, deadline); err != nil {
			return err
		}
		if deadline.Fired() {
			return nil
		}
	}
}

// probeLoop probes the heads readers wait on, every FeedPollInterval,
// until none waits.
func (t *Table) probeLoop() {
	w := t.watch()
	ctx := context.Background()
	for {
		w.mu.Lock()
		parts := make([]int, 0, len(w.waiting))
		for p := range w.waiting {
			parts = append(parts, p)
		}
		if len(parts) == 0 || t.retiredErr() != nil {
			w.running = false
			w.changed.Fire() // waiters of a retired table look again
			w.changed = t.db.rt.NewEvent()
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		t.db.stats.FeedRounds.Add(1)
		pctx, cancel := t.db.rt.WithTimeout(ctx, max(t.db.cfg.FeedPollInterval*4, 5*time.Second))
		if _, err := t.probeHeads(pctx, parts); err != nil {
			t.noteGone(err) //nolint:errcheck // a retired table ends the loop above
		}
		cancel()
		tick := t.db.rt.After(t.db.cfg.FeedPollInterval)
		t.db.rt.Wait(ctx, tick) //nolint:errcheck // a background context does not end
	}
}

// PartitionsAcked reports, per partition, how many rows it has
// acknowledged (the offset after its newest row) and when its head last
// moved, from heads observed after the call began.
func (t *Table) PartitionsAcked(ctx context.Context, parts []int) (acked map[int]uint64, latest map[int]time.Time, err error) {
	if t.partitions == 0 {
		return nil, nil, ErrNoFeed
	}
	for _, p := range parts {
		if p < 0 || p >= t.partitions {
			return nil, nil, errors.Join(ErrInvalid, errors.New("partition out of range"))
		}
	}
	heads, err := t.feedHeads(ctx, parts, t.db.rt.Now())
	if err != nil {
		return nil, nil, t.noteGone(err)
	}
	acked, latest = map[int]uint64{}, map[int]time.Time{}
	for p, h := range heads {
		acked[p], latest[p] = h.Rows, h.modified
	}
	return acked, latest, nil
}

// FeedWatch reports the partitions this process's feed readers wait on
// now, each with the rows acknowledged as of the newest head the process
// knows. A service relays it to the partitions' owners (AwaitFeed there),
// which learn of their commits at once, and probes when they answer
// (ProbeFeed): the readers then wake without waiting for the next probe.
func (t *Table) FeedWatch() map[int]uint64 {
	w := t.watch()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[int]uint64, len(w.waiting))
	for p := range w.waiting {
		out[p] = w.heads[p].h.Rows
	}
	return out
}

// AwaitFeed waits until one of the partitions of after is known to have
// acknowledged more rows than after says, or wait passes, and reports the
// rows known then per partition. A partition's owner knows of its own
// commits the moment they are acknowledged; a partition this process knows
// nothing of yet is probed once.
func (t *Table) AwaitFeed(ctx context.Context, after map[int]uint64, wait time.Duration) (map[int]uint64, error) {
	if t.partitions == 0 {
		return nil, ErrNoFeed
	}
	parts := make([]int, 0, len(after))
	for p := range after {
		if p < 0 || p >= t.partitions {
			return nil, fmt.Errorf("%w: partition %d out of range", ErrInvalid, p)
		}
		parts = append(parts, p)
	}
	w := t.watch()
	var unknown []int
	w.mu.Lock()
	for _, p := range parts {
		if _, ok := w.heads[p]; !ok {
			unknown = append(unknown, p)
		}
	}
	w.mu.Unlock()
	if _, err := t.probeHeads(ctx, unknown); err != nil {
		return nil, t.noteGone(err)
	}
	deadline := t.db.rt.After(wait)
	defer sched.Stop(deadline)
	for {
		w.mu.Lock()
		changed := w.changed
		known := make(map[int]uint64, len(parts))
		moved := false
		for _, p := range parts {
			known[p] = w.heads[p].h.Rows
			moved = moved || known[p] > after[p]
		}
		w.mu.Unlock()
		if moved || deadline.Fired() {
			return known, nil
		}
		if _, err := t.db.rt.Wait(ctx, changed, deadline); err != nil {
			return known, err
		}
	}
}

// ProbeFeed probes the heads of parts now, waking the readers waiting on
// them if they moved.
func (t *Table) ProbeFeed(ctx context.Context, parts []int) error {
	_, err := t.probeHeads(ctx, parts)
	return t.noteGone(err)
}

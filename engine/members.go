// Ownership of a partitioned table's partitions: the directory of its
// writers (members), their heartbeats, the owner of each partition, and
// handing a partition over when its owner changes.

package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
)

// memberList is a partitioned table's directory of writers: who may own
// partitions, and the address other processes forward writes to. Each
// writer keeps its own entry's heartbeat fresh; a writer whose heartbeat is
// older than the member timeout is not live, and its partitions go to the
// others.
//
// Ownership decided here is an agreement, not a lock: two processes that
// disagree for a moment (one has not seen a join yet) both take the
// partition, and the head's compare-and-swap chain fences one of them (its
// next commit fails, nothing of it visible). Correctness never rests on the
// heartbeats or on clocks; they only decide who should own what.
type memberList struct {
	Writers map[string]memberEntry `json:"writers"`

	etag string
}

type memberEntry struct {
	Addr string    `json:"addr,omitempty"`
	Beat time.Time `json:"beat"` // the writer's clock at its last heartbeat
	// Proc names the process holding the entry: a process restarted under
	// the writer's name takes the entry over, and its predecessor (a
	// zombie that still runs) sees that it was replaced and takes no
	// partition again.
	Proc string `json:"proc"`
}

// Owner names the writer that owns a partition.
type Owner struct {
	Partition string `json:"partition"`
	Writer    string `json:"writer"`
	Addr      string `json:"addr,omitempty"`
	// Self: this process is the owner.
	Self bool `json:"-"`
}

// NotOwnerError reports an append that reached a process that does not own
// its partition; Owner says who does (Writer empty: no live writer).
type NotOwnerError struct{ Owner Owner }

func (e *NotOwnerError) Error() string {
	if e.Owner.Writer == "" {
		return fmt.Sprintf("%v: partition %s has no live writer", ErrNotOwner, e.Owner.Partition)
	}
	return fmt.Sprintf("%v: partition %s is owned by %s", ErrNotOwner, e.Owner.Partition, e.Owner.Writer)
}

func (e *NotOwnerError) Is(target error) bool { return target == ErrNotOwner }

// membership is a table handle's view of its members and, when this
// process writes, its part in them.
type membership struct {
	mu     sync.Mutex
	view   *memberList
	readAt time.Time
	joined bool
	left   bool
	stop   sched.Event // ends the heartbeat loop
	done   sched.Event
}

func (t *Table) memberTimeout() time.Duration {
	if d := t.db.cfg.LeaseDuration; d > 0 {
		return d
	}
	return DefaultConfig().LeaseDuration
}

func readMembers(ctx context.Context, t *Table) (*memberList, error) {
	data, attrs, err := objstore.ReadAll(ctx, t.db.store, t.keys.Members(), t.db.cfg.MaxManifestBytes)
	if errors.Is(err, objstore.ErrNotFound) {
		return &memberList{Writers: map[string]memberEntry{}}, nil
	}
	if err != nil {
		return nil, err
	}
	var m memberList
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: members of %s: %w", ErrCorruptObject, t.Name(), err)
	}
	if m.Writers == nil {
		m.Writers = map[string]memberEntry{}
	}
	m.etag = attrs.ETag
	return &m, nil
}

// updateMembers applies fn by compare-and-swap until it lands or fn
// reports no change.
func updateMembers(ctx context.Context, t *Table, fn func(m *memberList) bool) (*memberList, error) {
	for attempt := 0; ; attempt++ {
		m, err := readMembers(ctx, t)
		if err != nil {
			return nil, err
		}
		if !fn(m) {
			return m, nil
		}
		body, _ := json.Marshal(m)
		opts := objstore.PutOptions{IfMatch: m.etag, Size: int64(len(body)), ContentType: "application/json"}
		if m.etag == "" {
			opts.IfMatch, opts.IfNotExists = "", true
		}
		attrs, err := t.db.store.Put(ctx, t.keys.Members(), bytes.NewReader(body), opts)
		if err == nil {
			m.etag = attrs.ETag
			return m, nil
		}
		if !errors.Is(err, objstore.ErrPrecondition) && (!retryable(err) || attempt >= 5) {
			return nil, fmt.Errorf("members of %s: %w", t.Name(), err)
		}
		if attempt == 50 {
			return nil, fmt.Errorf("members of %s: %d compare-and-swap attempts lost: %w", t.Name(), attempt+1, err)
		}
		window := uint64(2) << min(attempt, 7)
		if _, err := t.db.rt.Wait(ctx, t.db.rt.After(time.Duration(1+t.db.rt.Rand()%window)*time.Millisecond)); err != nil {
			return nil, err
		}
	}
}

// liveMembers lists, in name order, the writers whose heartbeat is recent,
// this process's own included while it is a member.
func (t *Table) liveMembers(m *memberList, self bool) []string {
	now := t.db.rt.Now()
	var out []string
	for name, e := range m.Writers {
		if (self && name == t.db.cfg.Shard) || now.Sub(e.Beat) < t.memberTimeout() {
			out = append(out, name)
		}
	}
	if self && !slices.Contains(out, t.db.cfg.Shard) {
		out = append(out, t.db.cfg.Shard)
	}
	slices.Sort(out)
	return out
}

// members returns the current view of the members, read again when older
// than the poll interval (or when fresh is set). A writer process joins
// first.
func (t *Table) members(ctx context.Context, fresh bool) (*memberList, bool, error) {
	ms := &t.membership
	if t.db.cfg.Shard != "" {
		if err := t.join(ctx); err != nil {
			return nil, false, err
		}
	}
	ms.mu.Lock()
	view, readAt, joined := ms.view, ms.readAt, ms.joined && !ms.left
	ms.mu.Unlock()
	if view != nil && !fresh && t.db.rt.Now().Sub(readAt) < t.db.cfg.MembersPollInterval {
		return view, joined, nil
	}
	now := t.db.rt.Now()
	m, err := readMembers(ctx, t)
	if err != nil {
		return nil, false, err
	}
	t.noteMembers(m, now)
	ms.mu.Lock()
	joined = ms.joined && !ms.left
	ms.mu.Unlock()
	return m, joined, nil
}

// noteMembers installs a view of the members read at when. A process whose
// entry names another process was replaced (restarted elsewhere under its
// name): it leaves, and its writers stop.
func (t *Table) noteMembers(m *memberList, when time.Time) {
	ms := &t.membership
	ms.mu.Lock()
	ms.view, ms.readAt = m, when
	e, listed := m.Writers[t.db.cfg.Shard]
	replaced := ms.joined && !ms.left && listed && e.Proc != t.db.proc
	if replaced {
		ms.left = true
	}
	ms.mu.Unlock()
	if replaced {
		err := fmt.Errorf("%w: %s: writer %s was restarted by another process", ErrFenced, t.Name(), t.db.cfg.Shard)
		t.db.cfg.Logger.Warn("replaced by a newer process under this writer's name", "table", t.Name(), "writer", t.db.cfg.Shard)
		for _, w := range t.allWriters() {
			w.fail(nil, err)
		}
	}
}

// Partitions is the table's partition count (0: a table created before
// partitions, whose shards are its writers).
func (t *Table) Partitions() int { return t.partitions }

// PartitionOf names the partition (shard) of id.
func (t *Table) PartitionOf(id string) string {
	if t.partitions == 0 {
		return t.db.cfg.Shard
	}
	return PartitionName(PartitionOf(id, t.partitions))
}

// Owner reports which writer owns id's partition. In a table without
// partitions every writer process owns its own shard.
func (t *Table) Owner(ctx context.Context, id string) (Owner, error) {
	return t.owner(ctx, t.PartitionOf(id), false)
}

func (t *Table) owner(ctx context.Context, shard string, fresh bool) (Owner, error) {
	if t.partitions == 0 {
		if t.db.cfg.Shard == "" {
			return Owner{Partition: shard}, ErrNoWriter
		}
		return Owner{Partition: shard, Writer: t.db.cfg.Shard, Self: true}, nil
	}
	m, joined, err := t.members(ctx, fresh)
	if err != nil {
		return Owner{Partition: shard}, err
	}
	return t.ownerIn(m, t.liveMembers(m, joined), joined, shard), nil
}

// ownerIn names the owner of shard among live, the live members of m.
func (t *Table) ownerIn(m *memberList, live []string, joined bool, shard string) Owner {
	name := rendezvous(shard, live)
	o := Owner{Partition: shard, Writer: name, Addr: m.Writers[name].Addr, Self: joined && name == t.db.cfg.Shard}
	if o.Self {
		o.Addr = t.db.cfg.Addr
	}
	return o
}

// Owners lists the owner of every partition, as this process sees them.
func (t *Table) Owners(ctx context.Context) ([]Owner, error) {
	out := make([]Owner, 0, t.partitions)
	for i := range t.partitions {
		o, err := t.owner(ctx, PartitionName(i), false)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// join adds this process to the members (once per handle) and starts its
// heartbeat.
func (t *Table) join(ctx context.Context) error {
	ms := &t.membership
	ms.mu.Lock()
	if ms.joined || ms.left {
		ms.mu.Unlock()
		return nil
	}
	ms.mu.Unlock()
	if err := t.wlock.Lock(ctx); err != nil {
		return err
	}
	defer t.wlock.Unlock()
	ms.mu.Lock()
	if ms.joined || ms.left {
		ms.mu.Unlock()
		return nil
	}
	ms.mu.Unlock()
	m, err := t.beat(ctx, true)
	if err != nil {
		return t.noteGone(err)
	}
	rt := t.db.rt
	ms.mu.Lock()
	ms.joined, ms.view, ms.readAt = true, m, rt.Now()
	ms.stop, ms.done = rt.NewEvent(), rt.NewEvent()
	ms.mu.Unlock()
	rt.Go(t.heartbeat)
	return nil
}

// beat writes this process's entry with a fresh heartbeat (claim: taking
// the entry over from a predecessor under the same name; otherwise only
// an entry that is still this process's); it also drops entries dead for
// many timeouts (writers gone for good).
func (t *Table) beat(ctx context.Context, claim bool) (*memberList, error) {
	if err := t.checkLive(); err != nil {
		return nil, err
	}
	now := t.db.rt.Now()
	name := t.db.cfg.Shard
	return updateMembers(ctx, t, func(m *memberList) bool {
		for n, e := range m.Writers {
			if n != name && now.Sub(e.Beat) > 20*t.memberTimeout() {
				delete(m.Writers, n)
			}
		}
		if e, ok := m.Writers[name]; ok && !claim && e.Proc != t.db.proc {
			return false // replaced: noteMembers stops this process
		}
		m.Writers[name] = memberEntry{Addr: t.db.cfg.Addr, Beat: now.UTC(), Proc: t.db.proc}
		return true
	})
}

// heartbeat keeps this process's entry fresh, reads the members every poll
// interval, and hands over the partitions this process holds but no longer
// owns (a writer joined, or came back).
func (t *Table) heartbeat() {
	ms := &t.membership
	defer ms.done.Fire()
	ctx := context.Background()
	rt := t.db.rt
	lastBeat := rt.Now()
	for {
		tick := rt.After(t.db.cfg.MembersPollInterval)
		i, err := rt.Wait(ctx, ms.stop, tick)
		sched.Stop(tick)
		if i == 0 || err != nil || t.checkLive() != nil {
			return
		}
		var m *memberList
		if rt.Now().Sub(lastBeat) >= t.memberTimeout()/3 {
			m, err = t.beat(ctx, false)
			if err == nil {
				lastBeat = rt.Now()
			}
		} else {
			m, err = readMembers(ctx, t)
		}
		if err != nil {
			if errors.Is(err, ErrTableNotFound) {
				return
			}
			t.db.cfg.Logger.Warn("reading the members", "table", t.Name(), "err", err)
			continue
		}
		t.noteMembers(m, rt.Now())
		t.handOver(ctx, m)
	}
}

// handOver stops (sealing their open generations) the writers of
// partitions this process holds but that m gives to another live writer.
func (t *Table) handOver(ctx context.Context, m *memberList) {
	live := t.liveMembers(m, true)
	for _, w := range t.runningWriters() {
		if owner := rendezvous(w.shard, live); owner != t.db.cfg.Shard {
			t.db.cfg.Logger.Info("handing a partition over", "table", t.Name(), "partition", w.shard, "to", owner)
			w.stop()
		}
	}
}

// leave removes this process from the members, so that the others take
// its partitions at once instead of after the member timeout.
func (t *Table) leave(ctx context.Context) {
	ms := &t.membership
	ms.mu.Lock()
	joined := ms.joined && !ms.left
	ms.left = true
	stop, done := ms.stop, ms.done
	ms.mu.Unlock()
	if !joined {
		return
	}
	stop.Fire()
	_, _ = t.db.rt.Wait(context.WithoutCancel(ctx), done)
	if t.checkLive() != nil {
		return
	}
	name := t.db.cfg.Shard
	_, err := updateMembers(ctx, t, func(m *memberList) bool {
		if _, ok := m.Writers[name]; !ok {
			return false
		}
		delete(m.Writers, name)
		return true
	})
	if err != nil {
		t.db.cfg.Logger.Warn("leaving the members", "table", t.Name(), "err", err)
	}
}

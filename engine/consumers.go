// Consumer groups of the feed: named consumers whose committed positions
// live in the store, and whose members split the partitions among them.

package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/rollstore/rollstore/engine/keyspace"
	"github.com/rollstore/rollstore/objstore"
)

// ErrRebalanced: a consumer-group member committed a cursor of an
// assignment that is no longer current (the group's members changed); it
// must resume from the group's committed positions.
var ErrRebalanced = errors.New("consumer group rebalanced")

// ErrGroupNotFound: no consumer group of that name.
var ErrGroupNotFound = errors.New("consumer group not found")

// Group is a consumer group as stored.
type Group struct {
	Name string
	// Epoch counts membership changes; assignments are a function of the
	// member names and the partition count, fixed per epoch.
	Epoch   uint64
	Members map[string]GroupMember
	// Committed holds the committed position per partition.
	Committed   map[int]Position
	CommittedAt time.Time
}

// GroupMember is one member of a group.
type GroupMember struct {
	Beat       time.Time
	Partitions []int // its assignment in the group's epoch
}

// Assignment is what a member reads: its partitions in the group's
// current epoch and where to start each (the committed positions).
type Assignment struct {
	Group, Member string
	Epoch         uint64
	Partitions    []int
	Start         Cursor
}

// GroupLag is a group's committed position in one partition, against what
// the partition has acknowledged.
type GroupLag struct {
	Partition  int
	Committed  uint64 // offset of the next row to deliver
	Acked      uint64
	LagRows    uint64
	LagSeconds float64
}

// GroupStatus is a group with its lag.
type GroupStatus struct {
	Group
	Lag        []GroupLag
	LagRows    uint64
	LagSeconds float64
}

// groupDoc is a consumer group's object (docs/format.md, "Consumer
// groups"). Every change is a compare-and-swap on its ETag, so members and
// named-consumer workers in any number of processes change it one at a
// time, each on the state the previous change left.
type groupDoc struct {
	Name        string                 `json:"name"`
	Epoch       uint64                 `json:"epoch"`
	Members     map[string]groupMember `json:"members"`
	Committed   map[int]groupPosition  `json:"committed"`
	CommittedAt time.Time              `json:"committed_at,omitzero"`
	// Writes names the newest changes (a random id each, oldest first), so
	// that a writer whose answer was lost finds its own change even after
	// others changed the object again: it then neither applies it twice
	// nor refuses what it already stored.
	Writes []string `json:"writes"`

	etag string
}

type groupMember struct {
	Beat time.Time `json:"beat"` // the clock of the process that served the member's last request
}

type groupPosition struct {
	Gen    uint64    `json:"gen"`
	Seg    uint64    `json:"seg"`
	Row    int       `json:"row"`
	Offset uint64    `json:"offset"`
	At     time.Time `json:"at,omitzero"`
}

// groupWritesKept bounds groupDoc.Writes: a lost answer is recognised as
// long as fewer changes than this followed it before the retry read.
const groupWritesKept = 16

func (p groupPosition) position() Position {
	return Position(p)
}

func storedPosition(p Position) groupPosition {
	p.At = p.At.UTC()
	return groupPosition(p)
}

// memberNames lists the members in the order the assignment uses.
func (g *groupDoc) memberNames() []string {
	return slices.Sorted(maps.Keys(g.Members))
}

// assigned lists member's partitions (none if it is not a member):
// partition p goes to the sorted members' p mod n-th.
func (g *groupDoc) assigned(member string, partitions int) []int {
	names := g.memberNames()
	i, ok := slices.BinarySearch(names, member)
	if !ok {
		return nil
	}
	var out []int
	for p := i; p < partitions; p += len(names) {
		out = append(out, p)
	}
	return out
}

// expire removes the members (other than keep) not heard from for the
// session timeout; it reports whether any was. The caller moves the epoch,
// once for all the membership changes of one write.
func (t *Table) expire(g *groupDoc, now time.Time, keep string) bool {
	changed := false
	for name, m := range g.Members {
		if name != keep && now.Sub(m.Beat) >= t.db.cfg.GroupSessionTimeout {
			delete(g.Members, name)
			changed = true
		}
	}
	return changed
}

// beatStale reports whether member's heartbeat is worth a write: older
// than a third of the session timeout, so a member polling often costs
// one GET per request and a write now and then.
func (t *Table) beatStale(g *groupDoc, member string, now time.Time) bool {
	return now.Sub(g.Members[member].Beat) >= t.db.cfg.GroupSessionTimeout/3
}

func (g *groupDoc) public(partitions int) Group {
	out := Group{Name: g.Name, Epoch: g.Epoch, Members: map[string]GroupMember{},
		Committed: map[int]Position{}, CommittedAt: g.CommittedAt}
	for name, m := range g.Members {
		out.Members[name] = GroupMember{Beat: m.Beat, Partitions: g.assigned(name, partitions)}
	}
	for p, pos := range g.Committed {
		out.Committed[p] = pos.position()
	}
	return out
}

// readGroup reads a group's object; nil if there is none.
func (t *Table) readGroup(ctx context.Context, key string) (*groupDoc, error) {
	data, attrs, err := objstore.ReadAll(ctx, t.db.store, key, t.db.cfg.MaxManifestBytes)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading consumer group %s: %w", key, err)
	}
	var g groupDoc
	if err := json.Unmarshal(data, &g); err != nil {
		return nil, fmt.Errorf("%w: consumer group %s: %w", ErrCorruptObject, key, err)
	}
	if g.Members == nil {
		g.Members = map[string]groupMember{}
	}
	if g.Committed == nil {
		g.Committed = map[int]groupPosition{}
	}
	g.etag = attrs.ETag
	return &g, nil
}

// updateGroup applies fn to the group by compare-and-swap until it lands
// or fn reports no change (or refuses). create makes an absent group an
// empty one (after checking that the incarnation still exists, so a
// handle of a dropped table does not write into it); otherwise an absent
// group is ErrGroupNotFound. fn must give the same answer when applied
// again to a state that already holds its change: a lost race is retried
// on the state the winner left.
func (t *Table) updateGroup(ctx context.Context, group string, create bool, fn func(g *groupDoc) (bool, error)) (*groupDoc, error) {
	key, err := t.keys.Consumer(group)
	if err != nil {
		return nil, err
	}
	// pending: ids of attempts whose answer was lost; one of them may
	// have landed.
	var pending []string
	for attempt := 0; ; attempt++ {
		if err := t.checkLive(); err != nil {
			return nil, err
		}
		g, err := t.readGroup(ctx, key)
		if err != nil {
			return nil, err
		}
		if g != nil && slices.ContainsFunc(g.Writes, func(id string) bool { return slices.Contains(pending, id) }) {
			return g, nil
		}
		if g == nil {
			if !create {
				return nil, fmt.Errorf("%w: %s in %s", ErrGroupNotFound, group, t.Name())
			}
			if err := t.checkIncarnation(ctx); err != nil {
				return nil, t.noteGone(err)
			}
			g = &groupDoc{Name: group, Members: map[string]groupMember{}, Committed: map[int]groupPosition{}}
		}
		changed, err := fn(g)
		if err != nil || !changed {
			return g, err
		}
		id := t.db.randomName()[:16]
		g.Writes = append(g.Writes, id)
		g.Writes = g.Writes[max(0, len(g.Writes)-groupWritesKept):]
		body, _ := json.Marshal(g)
		opts := objstore.PutOptions{IfMatch: g.etag, Size: int64(len(body)), ContentType: "application/json"}
		if g.etag == "" {
			opts.IfMatch, opts.IfNotExists = "", true
		}
		if err := t.db.point(ctx, hookGroupCAS); err != nil {
			return nil, err
		}
		attrs, err := t.db.store.Put(ctx, key, bytes.NewReader(body), opts)
		if err == nil {
			g.etag = attrs.ETag
			return g, nil
		}
		lost := errors.Is(err, objstore.ErrPrecondition) || errors.Is(err, objstore.ErrNotFound)
		switch {
		case !lost && !retryable(err) && len(pending) == 0:
			return nil, fmt.Errorf("consumer group %s of %s: %w", group, t.Name(), err)
		case !lost && (!retryable(err) || len(pending) >= 5):
			return nil, fmt.Errorf("%w: consumer group %s of %s: %w", ErrOutcomeUnknown, group, t.Name(), err)
		case attempt == 50:
			return nil, fmt.Errorf("consumer group %s of %s: %d compare-and-swap attempts lost: %w", group, t.Name(), attempt+1, err)
		case !lost:
			// No answer: it may have landed, which the next read tells.
			pending = append(pending, id)
		}
		window := uint64(2) << min(attempt, 7)
		if _, err := t.db.rt.Wait(ctx, t.db.rt.After(time.Duration(1+t.db.rt.Rand()%window)*time.Millisecond)); err != nil {
			return nil, err
		}
	}
}

// checkFeedTable fails for a table without partitions, which has no feed.
func (t *Table) checkFeedTable() error {
	if t.partitions == 0 {
		return fmt.Errorf("%w: %s", ErrNoFeed, t.Name())
	}
	return nil
}

// validMember checks a member name: the group-name alphabet.
func validMember(member string) error {
	if keyspace.ValidateShard(member) != nil {
		return fmt.Errorf("%w: consumer group member name %q: want 1..64 characters of [A-Za-z0-9_][A-Za-z0-9._-]*", ErrInvalidName, member)
	}
	return nil
}

// JoinGroup adds member to group (creating the group), or heartbeats it,
// and returns its assignment. Members not heard from for the session
// timeout are removed; every membership change moves the epoch.
func (t *Table) JoinGroup(ctx context.Context, group, member string) (Assignment, error) {
	a, err := t.joinGroup(ctx, group, member)
	return onSuccessor(ctx, t, a, err, func(nt *Table) (Assignment, error) { return nt.joinGroup(ctx, group, member) })
}

func (t *Table) joinGroup(ctx context.Context, group, member string) (Assignment, error) {
	if err := t.checkFeedTable(); err != nil {
		return Assignment{}, err
	}
	if err := validMember(member); err != nil {
		return Assignment{}, err
	}
	g, err := t.updateGroup(ctx, group, true, func(g *groupDoc) (bool, error) {
		now := t.db.rt.Now()
		_, listed := g.Members[member]
		if t.expire(g, now, member) || !listed {
			g.Epoch++
		} else if !t.beatStale(g, member, now) {
			return false, nil
		}
		g.Members[member] = groupMember{Beat: now.UTC()}
		return true, nil
	})
	if err != nil {
		return Assignment{}, err
	}
	parts := g.assigned(member, t.partitions)
	start := Cursor{Incarnation: t.Incarnation(), Partitions: t.partitions, Pos: map[int]Position{}, Group: group, Epoch: g.Epoch}
	for _, p := range parts {
		if pos, ok := g.Committed[p]; ok {
			start.Pos[p] = pos.position()
		}
	}
	return Assignment{Group: group, Member: member, Epoch: g.Epoch, Partitions: parts, Start: start}, nil
}

// CommitGroup stores c's positions as the group's committed positions.
// Positions only move forward: one before the committed one is ignored,
// so a retry, or a worker behind another, moves nothing. With member
// empty, group is a named consumer (created if absent) whose workers each
// commit their own partitions. With a member, the commit is refused with
// ErrRebalanced, storing nothing, unless c is of the group's current
// epoch and names only partitions assigned to member in it; it also
// heartbeats the member.
func (t *Table) CommitGroup(ctx context.Context, group, member string, c Cursor) (Group, error) {
	g, err := t.commitConsumer(ctx, group, member, c)
	return onSuccessor(ctx, t, g, err, func(nt *Table) (Group, error) { return nt.commitConsumer(ctx, group, member, c) })
}

func (t *Table) commitConsumer(ctx context.Context, group, member string, c Cursor) (Group, error) {
	if err := t.checkFeedTable(); err != nil {
		return Group{}, err
	}
	if member != "" {
		if err := validMember(member); err != nil {
			return Group{}, err
		}
	}
	if c.Incarnation != t.Incarnation() {
		return Group{}, &CursorExpiredError{Oldest: Cursor{Incarnation: t.Incarnation(), Partitions: t.partitions},
			Reason: fmt.Sprintf("the cursor is of incarnation %s of %s, which was dropped", c.Incarnation, t.Name())}
	}
	if c.Partitions != t.partitions {
		return Group{}, fmt.Errorf("%w: the cursor counts %d partitions, %s has %d", ErrBadCursor, c.Partitions, t.Name(), t.partitions)
	}
	for p := range c.Pos {
		if p < 0 || p >= t.partitions {
			return Group{}, fmt.Errorf("%w: partition %d out of range 0..%d", ErrBadCursor, p, t.partitions-1)
		}
	}
	g, err := t.updateGroup(ctx, group, true, func(g *groupDoc) (bool, error) {
		now := t.db.rt.Now()
		changed := false
		if member != "" {
			if err := checkCommitter(g, group, member, c, t.partitions); err != nil {
				return false, err
			}
			changed = t.beatStale(g, member, now)
		}
		// Expiring the others after the check: the commit is of the epoch
		// the store holds, whose assignment nobody else has read yet.
		if t.expire(g, now, member) {
			g.Epoch++
			changed = true
		}
		for p, pos := range c.Pos {
			if cur, ok := g.Committed[p]; !ok || cur.position().Before(pos) {
				g.Committed[p] = storedPosition(pos)
				g.CommittedAt = now.UTC()
				changed = true
			}
		}
		if changed && member != "" {
			g.Members[member] = groupMember{Beat: now.UTC()}
		}
		return changed, nil
	})
	if err != nil {
		return Group{}, err
	}
	return g.public(t.partitions), nil
}

// checkCommitter refuses a member's commit of an assignment that is not
// current in g.
func checkCommitter(g *groupDoc, group, member string, c Cursor, partitions int) error {
	if _, ok := g.Members[member]; !ok {
		return fmt.Errorf("%w: %s is not a member of group %s (epoch %d)", ErrRebalanced, member, group, g.Epoch)
	}
	if c.Group != group || c.Epoch != g.Epoch {
		return fmt.Errorf("%w: the cursor is of group %q epoch %d, group %s is at epoch %d", ErrRebalanced, c.Group, c.Epoch, group, g.Epoch)
	}
	mine := g.assigned(member, partitions)
	for p := range c.Pos {
		if !slices.Contains(mine, p) {
			return fmt.Errorf("%w: partition %d is not assigned to %s in epoch %d of group %s", ErrRebalanced, p, member, g.Epoch, group)
		}
	}
	return nil
}

// LeaveGroup removes member from group (moving the epoch, so its
// partitions go to the others at once). Leaving a group one is not a
// member of, or that does not exist, changes nothing.
func (t *Table) LeaveGroup(ctx context.Context, group, member string) error {
	err := t.leaveGroup(ctx, group, member)
	_, err = onSuccessor(ctx, t, struct{}{}, err, func(nt *Table) (struct{}, error) { return struct{}{}, nt.leaveGroup(ctx, group, member) })
	return err
}

func (t *Table) leaveGroup(ctx context.Context, group, member string) error {
	if err := t.checkFeedTable(); err != nil {
		return err
	}
	if err := validMember(member); err != nil {
		return err
	}
	_, err := t.updateGroup(ctx, group, false, func(g *groupDoc) (bool, error) {
		now := t.db.rt.Now()
		_, listed := g.Members[member]
		delete(g.Members, member)
		if t.expire(g, now, member) || listed {
			g.Epoch++
			return true, nil
		}
		return false, nil
	})
	if errors.Is(err, ErrGroupNotFound) {
		return nil
	}
	return err
}

// DeleteGroup deletes a group and its committed positions
// (ErrGroupNotFound if there is none). A member still reading the feed
// creates the group again, with no committed position.
func (t *Table) DeleteGroup(ctx context.Context, group string) error {
	err := t.deleteGroup(ctx, group)
	_, err = onSuccessor(ctx, t, struct{}{}, err, func(nt *Table) (struct{}, error) { return struct{}{}, nt.deleteGroup(ctx, group) })
	return err
}

func (t *Table) deleteGroup(ctx context.Context, group string) error {
	if err := t.checkFeedTable(); err != nil {
		return err
	}
	if err := t.checkLive(); err != nil {
		return err
	}
	key, err := t.keys.Consumer(group)
	if err != nil {
		return err
	}
	if _, err := t.db.store.Head(ctx, key); errors.Is(err, objstore.ErrNotFound) {
		return fmt.Errorf("%w: %s in %s", ErrGroupNotFound, group, t.Name())
	} else if err != nil {
		return fmt.Errorf("deleting consumer group %s of %s: %w", group, t.Name(), err)
	}
	if err := t.db.store.Delete(ctx, key); err != nil {
		return fmt.Errorf("deleting consumer group %s of %s: %w", group, t.Name(), err)
	}
	return nil
}

// Groups lists the table's consumer groups with their lag, by name (none
// for a table without partitions).
func (t *Table) Groups(ctx context.Context) ([]GroupStatus, error) {
	out, err := t.groups(ctx)
	return onSuccessor(ctx, t, out, err, func(nt *Table) ([]GroupStatus, error) { return nt.groups(ctx) })
}

func (t *Table) groups(ctx context.Context) ([]GroupStatus, error) {
	if t.partitions == 0 {
		return nil, nil
	}
	if err := t.checkLive(); err != nil {
		return nil, err
	}
	var keys []string
	err := t.db.store.List(ctx, t.keys.ConsumersPrefix(), objstore.ListOptions{}, func(e objstore.Entry) error {
		if _, ok := t.keys.ParseConsumer(e.Key); ok {
			keys = append(keys, e.Key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the consumer groups of %s: %w", t.Name(), err)
	}
	var docs []*groupDoc
	for _, key := range keys {
		g, err := t.readGroup(ctx, key)
		if err != nil {
			return nil, err
		}
		if g != nil { // nil: deleted since the listing
			docs = append(docs, g)
		}
	}
	if len(docs) == 0 {
		return nil, nil
	}
	acked, latest, err := t.PartitionsAcked(ctx, t.allPartitions())
	if err != nil {
		return nil, fmt.Errorf("consumer groups of %s: %w", t.Name(), err)
	}
	out := make([]GroupStatus, 0, len(docs))
	for _, g := range docs {
		out = append(out, t.groupStatus(g, acked, latest))
	}
	return out, nil
}

// GroupStatusOf reports one group with its lag (ErrGroupNotFound).
func (t *Table) GroupStatusOf(ctx context.Context, group string) (GroupStatus, error) {
	st, err := t.groupStatusOf(ctx, group)
	return onSuccessor(ctx, t, st, err, func(nt *Table) (GroupStatus, error) { return nt.groupStatusOf(ctx, group) })
}

func (t *Table) groupStatusOf(ctx context.Context, group string) (GroupStatus, error) {
	if err := t.checkFeedTable(); err != nil {
		return GroupStatus{}, err
	}
	if err := t.checkLive(); err != nil {
		return GroupStatus{}, err
	}
	key, err := t.keys.Consumer(group)
	if err != nil {
		return GroupStatus{}, err
	}
	g, err := t.readGroup(ctx, key)
	if err != nil {
		return GroupStatus{}, err
	}
	if g == nil {
		// A handle of a dropped table answers for the table, not the group.
		if err := t.checkIncarnation(ctx); errors.Is(err, errDropped) {
			return GroupStatus{}, t.noteGone(err)
		}
		return GroupStatus{}, fmt.Errorf("%w: %s in %s", ErrGroupNotFound, group, t.Name())
	}
	acked, latest, err := t.PartitionsAcked(ctx, t.allPartitions())
	if err != nil {
		return GroupStatus{}, fmt.Errorf("consumer group %s of %s: %w", group, t.Name(), err)
	}
	return t.groupStatus(g, acked, latest), nil
}

func (t *Table) allPartitions() []int {
	parts := make([]int, t.partitions)
	for i := range parts {
		parts[i] = i
	}
	return parts
}

// groupStatus measures g's lag in every partition: the rows acknowledged
// after its committed position (from offset 0 where it has none), and how
// much older the committed position's last row is than the partition's
// newest (0 when the group is not behind, or when nothing of the
// partition was committed yet, as the age of its unread rows is unknown).
func (t *Table) groupStatus(g *groupDoc, acked map[int]uint64, latest map[int]time.Time) GroupStatus {
	st := GroupStatus{Group: g.public(t.partitions), Lag: make([]GroupLag, 0, t.partitions)}
	for p := range t.partitions {
		pos := g.Committed[p]
		l := GroupLag{Partition: p, Committed: pos.Offset, Acked: acked[p]}
		if l.Acked > l.Committed {
			l.LagRows = l.Acked - l.Committed
			if !pos.At.IsZero() && latest[p].After(pos.At) {
				l.LagSeconds = latest[p].Sub(pos.At).Seconds()
			}
		}
		st.Lag = append(st.Lag, l)
		st.LagRows += l.LagRows
		st.LagSeconds = max(st.LagSeconds, l.LagSeconds)
	}
	return st
}

// CommittedPositions returns a group's (or named consumer's) committed
// position per partition: none for a group that does not exist.
func (t *Table) CommittedPositions(ctx context.Context, group string) (map[int]Position, error) {
	if err := t.checkFeedTable(); err != nil {
		return nil, err
	}
	key, err := t.keys.Consumer(group)
	if err != nil {
		return nil, err
	}
	g, err := t.readGroup(ctx, key)
	if err != nil || g == nil {
		return map[int]Position{}, t.noteGone(err)
	}
	out := make(map[int]Position, len(g.Committed))
	for p, pos := range g.Committed {
		out[p] = pos.position()
	}
	return out, nil
}

package engine

// Invariant: a consumer group's committed positions only move forward, and
// only through a member's current assignment. Partition p belongs to one
// member per epoch; a commit of an assignment that is no longer current
// stores nothing, so whoever takes the partition over starts exactly where
// the last accepted commit left it (no row skipped). Changes from any
// number of processes are applied one at a time (compare-and-swap), and a
// change whose answer was lost is applied once and not refused.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

// groupTimeout is the tests' session timeout: heartbeats are written when
// older than a third of it (20s).
const groupTimeout = time.Minute

// groupConfig is a reading process (no writer) on a table of partitions
// partitions, on the fake clock clk.
func groupConfig(clk *objstoretest.Clock, partitions int) Config {
	cfg := testConfig("")
	cfg.Partitions = partitions
	cfg.GroupSessionTimeout = groupTimeout
	cfg.Runtime = sched.WithClock(clk.Now)
	return cfg
}

// at is a position in a partition whose every segment holds one row, so
// offsets and (gen, seg, row) order alike.
func at(offset uint64) Position {
	return Position{Gen: 1, Seg: offset + 1, Offset: offset}
}

// cursorAt is a cursor of tb at the offsets given per partition, of a
// group's epoch (group empty: a named consumer's).
func cursorAt(tb *Table, group string, epoch uint64, offsets map[int]uint64) Cursor {
	c := Cursor{Incarnation: tb.Incarnation(), Partitions: tb.Partitions(), Pos: map[int]Position{}, Group: group, Epoch: epoch}
	for p, off := range offsets {
		c.Pos[p] = at(off)
	}
	return c
}

// stored reads the group's object as the store holds it (nil: none).
func stored(t *testing.T, tb *Table, group string) *groupDoc {
	t.Helper()
	key, err := tb.keys.Consumer(group)
	if err != nil {
		t.Fatal(err)
	}
	g, err := tb.readGroup(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// committedOffsets lists a group's committed offsets per partition.
func committedOffsets(t *testing.T, tb *Table, group string) map[int]uint64 {
	t.Helper()
	out := map[int]uint64{}
	if g := stored(t, tb, group); g != nil {
		for p, pos := range g.Committed {
			out[p] = pos.Offset
		}
	}
	return out
}

func mustJoin(t *testing.T, tb *Table, group, member string) Assignment {
	t.Helper()
	a, err := tb.JoinGroup(context.Background(), group, member)
	if err != nil {
		t.Fatalf("%s joins %s: %v", member, group, err)
	}
	return a
}

func mustCommit(t *testing.T, tb *Table, group, member string, c Cursor) Group {
	t.Helper()
	g, err := tb.CommitGroup(context.Background(), group, member, c)
	if err != nil {
		t.Fatalf("%s commits to %s: %v", member, group, err)
	}
	return g
}

func sameOffsets(got, want map[int]uint64) bool {
	if len(got) != len(want) {
		return false
	}
	for p, off := range want {
		if g, ok := got[p]; !ok || g != off {
			return false
		}
	}
	return true
}

func TestGroupAssignsPartitionsRoundRobinOverSortedMembers(t *testing.T) {
	clk := objstoretest.NewClock()
	e := newEnv(t, memory.New(), groupConfig(clk, 5))
	mustJoin(t, e.tb, "g", "w1")
	mustJoin(t, e.tb, "g", "w0")
	mustJoin(t, e.tb, "g", "w2")
	// Sorted members w0, w1, w2: partition p goes to the (p mod 3)-th.
	want := map[string][]int{"w0": {0, 3}, "w1": {1, 4}, "w2": {2}}
	for _, m := range []string{"w0", "w1", "w2"} {
		a := mustJoin(t, e.tb, "g", m)
		if a.Epoch != 3 || !slices.Equal(a.Partitions, want[m]) {
			t.Fatalf("%s: epoch %d partitions %v, want epoch 3 partitions %v", m, a.Epoch, a.Partitions, want[m])
		}
		s := a.Start
		if s.Incarnation != e.tb.Incarnation() || s.Partitions != 5 || s.Group != "g" || s.Epoch != 3 || len(s.Pos) != 0 {
			t.Fatalf("%s: start %+v, want the table's incarnation, 5 partitions, epoch 3, no position", m, s)
		}
	}
	// Every partition has exactly one member.
	g := stored(t, e.tb, "g").public(5)
	var all []int
	for name, m := range g.Members {
		if !slices.Equal(m.Partitions, want[name]) {
			t.Fatalf("stored %s: %v, want %v", name, m.Partitions, want[name])
		}
		all = append(all, m.Partitions...)
	}
	slices.Sort(all)
	if !slices.Equal(all, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("partitions assigned: %v", all)
	}
	// A start carries the committed positions of the member's partitions,
	// and only those; partitions never committed are absent.
	mustCommit(t, e.tb, "g", "w0", cursorAt(e.tb, "g", 3, map[int]uint64{0: 7}))
	mustCommit(t, e.tb, "g", "w1", cursorAt(e.tb, "g", 3, map[int]uint64{1: 4, 4: 9}))
	a := mustJoin(t, e.tb, "g", "w0")
	if len(a.Start.Pos) != 1 || a.Start.Pos[0] != at(7) {
		t.Fatalf("w0 starts at %+v, want partition 0 at offset 7 only", a.Start.Pos)
	}
	a = mustJoin(t, e.tb, "g", "w1")
	if len(a.Start.Pos) != 2 || a.Start.Pos[1] != at(4) || a.Start.Pos[4] != at(9) {
		t.Fatalf("w1 starts at %+v", a.Start.Pos)
	}
}

func TestGroupEpochMovesOnEveryMembershipChangeOnly(t *testing.T) {
	clk := objstoretest.NewClock()
	e, f := faultyEnv(t, memory.New(), groupConfig(clk, 4))
	ctx := context.Background()
	groupKey := faulty.KeyContains("/consumers/")
	puts := func() int { return f.CallsMatching(faulty.OpPut, groupKey) }
	epoch := func() uint64 { return stored(t, e.tb, "g").Epoch }

	if a := mustJoin(t, e.tb, "g", "w0"); a.Epoch != 1 || !slices.Equal(a.Partitions, []int{0, 1, 2, 3}) {
		t.Fatalf("first member: %+v", a)
	}
	if a := mustJoin(t, e.tb, "g", "w1"); a.Epoch != 2 || !slices.Equal(a.Partitions, []int{1, 3}) {
		t.Fatalf("second member: %+v", a)
	}

	// A heartbeat younger than a third of the timeout is answered from
	// one read, writing nothing.
	clk.Advance(groupTimeout/3 - time.Second)
	before, gets := puts(), f.CallsMatching(faulty.OpGet, groupKey)
	if a := mustJoin(t, e.tb, "g", "w0"); a.Epoch != 2 || !slices.Equal(a.Partitions, []int{0, 2}) {
		t.Fatalf("w0 heartbeat: %+v", a)
	}
	if n, g := puts()-before, f.CallsMatching(faulty.OpGet, groupKey)-gets; n != 0 || g != 1 {
		t.Fatalf("a fresh heartbeat made %d puts and %d gets, want 0 and 1", n, g)
	}
	// An older one is written, and is no membership change.
	clk.Advance(2 * time.Second)
	mustJoin(t, e.tb, "g", "w0")
	if n := puts() - before; n != 1 || epoch() != 2 {
		t.Fatalf("a due heartbeat: %d puts, epoch %d; want 1 put, epoch 2", n, epoch())
	}

	// Leaving moves the epoch once; leaving again changes nothing.
	if err := e.tb.LeaveGroup(ctx, "g", "w1"); err != nil {
		t.Fatal(err)
	}
	if epoch() != 3 {
		t.Fatalf("after w1 left: epoch %d, want 3", epoch())
	}
	before = puts()
	if err := e.tb.LeaveGroup(ctx, "g", "w1"); err != nil {
		t.Fatal(err)
	}
	if err := e.tb.LeaveGroup(ctx, "nothing-here", "w1"); err != nil {
		t.Fatalf("leaving a group that does not exist: %v", err)
	}
	if puts() != before || epoch() != 3 || stored(t, e.tb, "nothing-here") != nil {
		t.Fatalf("leaving twice wrote (%d puts), epoch %d", puts()-before, epoch())
	}
	if a := mustJoin(t, e.tb, "g", "w1"); a.Epoch != 4 {
		t.Fatalf("w1 rejoins at epoch %d, want 4", a.Epoch)
	}

	// w1 keeps its place by committing (a commit is a heartbeat too); w0
	// goes silent and is removed by the next request once its beat is a
	// timeout old: one membership change, one epoch.
	clk.Advance(groupTimeout / 2)
	mustCommit(t, e.tb, "g", "w1", cursorAt(e.tb, "g", 4, map[int]uint64{1: 3}))
	clk.Advance(groupTimeout / 2)
	a := mustJoin(t, e.tb, "g", "w1")
	if a.Epoch != 5 || !slices.Equal(a.Partitions, []int{0, 1, 2, 3}) {
		t.Fatalf("after w0 expired: %+v, want epoch 5 and every partition", a)
	}
	if g := stored(t, e.tb, "g"); len(g.Members) != 1 {
		t.Fatalf("members after expiry: %v", g.Members)
	}
	// The expired member's commit of its old assignment is refused.
	_, err := e.tb.CommitGroup(ctx, "g", "w0", cursorAt(e.tb, "g", 4, map[int]uint64{0: 5}))
	if !errors.Is(err, ErrRebalanced) {
		t.Fatalf("an expired member's commit: %v, want ErrRebalanced", err)
	}
	if got := committedOffsets(t, e.tb, "g"); !sameOffsets(got, map[int]uint64{1: 3}) {
		t.Fatalf("committed %v", got)
	}
}

// The hand-over race: member A read rows past its last commit, B joins
// (taking some of A's partitions), then A commits what it read. The commit
// is refused and stores nothing, so B starts exactly at A's last accepted
// commit: the rows A read but did not get to commit are delivered again,
// none is skipped.
func TestStaleMemberCommitAfterRebalanceStoresNothing(t *testing.T) {
	clk := objstoretest.NewClock()
	e := newEnv(t, memory.New(), groupConfig(clk, 4))
	ctx := context.Background()
	a := mustJoin(t, e.tb, "g", "a")
	mustCommit(t, e.tb, "g", "a", cursorAt(e.tb, "g", a.Epoch, map[int]uint64{0: 5, 1: 5, 2: 5, 3: 5}))
	read := cursorAt(e.tb, "g", a.Epoch, map[int]uint64{0: 9, 1: 9, 2: 9, 3: 9}) // A has read up to here

	b := mustJoin(t, e.tb, "g", "b")
	if b.Epoch != a.Epoch+1 || !slices.Equal(b.Partitions, []int{1, 3}) {
		t.Fatalf("b's assignment: %+v", b)
	}
	_, err := e.tb.CommitGroup(ctx, "g", "a", read)
	if !errors.Is(err, ErrRebalanced) {
		t.Fatalf("A's commit of epoch %d at epoch %d: %v, want ErrRebalanced", a.Epoch, b.Epoch, err)
	}
	want := map[int]uint64{0: 5, 1: 5, 2: 5, 3: 5}
	if got := committedOffsets(t, e.tb, "g"); !sameOffsets(got, want) {
		t.Fatalf("committed after the refused commit: %v, want %v", got, want)
	}
	if len(b.Start.Pos) != 2 || b.Start.Pos[1] != at(5) || b.Start.Pos[3] != at(5) {
		t.Fatalf("B starts at %+v, want partitions 1 and 3 at offset 5", b.Start.Pos)
	}

	// A rejoins and resumes its own partitions from the committed ones.
	a = mustJoin(t, e.tb, "g", "a")
	if a.Epoch != b.Epoch || !slices.Equal(a.Partitions, []int{0, 2}) || a.Start.Pos[0] != at(5) || a.Start.Pos[2] != at(5) {
		t.Fatalf("A's new assignment: %+v", a)
	}
	mustCommit(t, e.tb, "g", "a", cursorAt(e.tb, "g", a.Epoch, map[int]uint64{0: 9, 2: 9}))
	mustCommit(t, e.tb, "g", "b", cursorAt(e.tb, "g", b.Epoch, map[int]uint64{1: 6, 3: 7}))
	want = map[int]uint64{0: 9, 1: 6, 2: 9, 3: 7}
	if got := committedOffsets(t, e.tb, "g"); !sameOffsets(got, want) {
		t.Fatalf("committed: %v, want %v", got, want)
	}
}

// A member's commit is refused, storing nothing (not even its own
// partitions' positions), unless the cursor is of the group's current
// epoch, the member is a member, and every partition it names is the
// member's.
func TestGroupCommitRefusedUnlessCurrentAssignment(t *testing.T) {
	clk := objstoretest.NewClock()
	e := newEnv(t, memory.New(), groupConfig(clk, 4))
	mustJoin(t, e.tb, "g", "w0")
	ep := mustJoin(t, e.tb, "g", "w1").Epoch
	mustCommit(t, e.tb, "g", "w0", cursorAt(e.tb, "g", ep, map[int]uint64{0: 2}))
	before := stored(t, e.tb, "g")
	for name, c := range map[string]struct {
		member string
		cursor Cursor
	}{
		"another member's partition": {"w0", cursorAt(e.tb, "g", ep, map[int]uint64{0: 4, 1: 4})},
		"an older epoch":             {"w0", cursorAt(e.tb, "g", ep-1, map[int]uint64{0: 4})},
		"a newer epoch":              {"w0", cursorAt(e.tb, "g", ep+1, map[int]uint64{0: 4})},
		"another group's cursor":     {"w0", cursorAt(e.tb, "h", ep, map[int]uint64{0: 4})},
		"a named consumer's cursor":  {"w0", cursorAt(e.tb, "", 0, map[int]uint64{0: 4})},
		"not a member":               {"w9", cursorAt(e.tb, "g", ep, map[int]uint64{0: 4})},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := e.tb.CommitGroup(context.Background(), "g", c.member, c.cursor)
			if !errors.Is(err, ErrRebalanced) {
				t.Fatalf("%v, want ErrRebalanced", err)
			}
			after := stored(t, e.tb, "g")
			if after.etag != before.etag {
				t.Fatalf("a refused commit wrote the group: %+v", after)
			}
		})
	}
}

// Workers of one named consumer commit their own partitions; one behind
// the other (or a retry of an old cursor) never moves a partition back.
func TestNamedConsumerPositionsOnlyMoveForward(t *testing.T) {
	clk := objstoretest.NewClock()
	e, f := faultyEnv(t, memory.New(), groupConfig(clk, 4))
	other := newEnv(t, e.store, groupConfig(clk, 4)) // the second worker's process
	ctx := context.Background()
	puts := func() int { return f.CallsMatching(faulty.OpPut, faulty.KeyContains("/consumers/")) }

	mustCommit(t, e.tb, "n", "", cursorAt(e.tb, "", 0, map[int]uint64{0: 10, 2: 4}))
	mustCommit(t, other.tb, "n", "", cursorAt(other.tb, "", 0, map[int]uint64{1: 7, 3: 1}))
	// The first worker commits an old cursor naming every partition: what
	// is behind is ignored, what is ahead moves.
	g := mustCommit(t, e.tb, "n", "", cursorAt(e.tb, "", 0, map[int]uint64{0: 3, 1: 2, 2: 6, 3: 1}))
	want := map[int]uint64{0: 10, 1: 7, 2: 6, 3: 1}
	if got := committedOffsets(t, e.tb, "n"); !sameOffsets(got, want) {
		t.Fatalf("committed %v, want %v", got, want)
	}
	if g.Committed[2] != at(6) || g.Committed[0] != at(10) || g.Epoch != 0 || len(g.Members) != 0 {
		t.Fatalf("the commit answered %+v", g)
	}
	// A retry of a commit that landed writes nothing.
	before := puts()
	mustCommit(t, e.tb, "n", "", cursorAt(e.tb, "", 0, map[int]uint64{0: 3, 1: 2, 2: 6, 3: 1}))
	if puts() != before {
		t.Fatalf("a retry wrote the group %d times", puts()-before)
	}

	// Cursors that do not fit the table are refused, storing nothing.
	bad := cursorAt(e.tb, "", 0, map[int]uint64{4: 1})
	if _, err := e.tb.CommitGroup(ctx, "n", "", bad); !errors.Is(err, ErrBadCursor) {
		t.Fatalf("partition out of range: %v, want ErrBadCursor", err)
	}
	bad = cursorAt(e.tb, "", 0, map[int]uint64{0: 20})
	bad.Partitions = 8
	if _, err := e.tb.CommitGroup(ctx, "n", "", bad); !errors.Is(err, ErrBadCursor) {
		t.Fatalf("another partition count: %v, want ErrBadCursor", err)
	}
	if got := committedOffsets(t, e.tb, "n"); !sameOffsets(got, want) || puts() != before {
		t.Fatalf("a refused cursor changed the group: %v", got)
	}
}

// Two processes commit at once: one is held between its read of the group
// and its compare-and-swap while the other's commit lands. The held one's
// swap fails, and it applies its change again to the group as the other
// left it: both commits stand.
func TestConcurrentGroupCommitsFromTwoProcessesBothLand(t *testing.T) {
	forStores(t, testConcurrentGroupCommits, true)
}

func testConcurrentGroupCommits(t *testing.T, sc storeCase) {
	clk := objstoretest.NewClock()
	store := sc.open(t)
	a := newEnv(t, store, groupConfig(clk, 4))
	b := newEnv(t, store, groupConfig(clk, 4))
	for _, named := range []bool{true, false} {
		group, ma, mb := "members", "w0", "w1"
		if named {
			group, ma, mb = "named", "", ""
		}
		t.Run(group, func(t *testing.T) {
			var epoch uint64
			if !named {
				mustJoin(t, a.tb, group, ma)
				epoch = mustJoin(t, b.tb, group, mb).Epoch
			}
			held := a.hooks.Pause(hookGroupCAS)
			casBefore := a.hooks.Count(hookGroupCAS)
			done := await(func() error {
				_, err := a.tb.CommitGroup(context.Background(), group, ma, cursorAt(a.tb, group, epoch, map[int]uint64{0: 11, 2: 12}))
				return err
			})
			if err := held.Wait(waitCtx(t)); err != nil {
				t.Fatal(err)
			}
			mustCommit(t, b.tb, group, mb, cursorAt(b.tb, group, epoch, map[int]uint64{1: 21, 3: 22}))
			held.Release()
			if err := <-done; err != nil {
				t.Fatalf("the held commit: %v", err)
			}
			if n := a.hooks.Count(hookGroupCAS) - casBefore; n != 2 {
				t.Fatalf("the held commit made %d compare-and-swap attempts, want 2 (lost one, landed one)", n)
			}
			want := map[int]uint64{0: 11, 1: 21, 2: 12, 3: 22}
			if got := committedOffsets(t, a.tb, group); !sameOffsets(got, want) {
				t.Fatalf("committed %v, want %v", got, want)
			}
			if g := stored(t, a.tb, group); g.Epoch != epoch {
				t.Fatalf("epoch %d, want %d: commits are no membership change", g.Epoch, epoch)
			}
		})
	}
}

// A change whose answer was lost after it landed is recognised by its id on
// the retry's read: it is applied once (one epoch step for one join), and a
// commit that landed before another process changed the group is not
// refused for that change.
func TestGroupChangeWhoseAnswerWasLostLandsOnce(t *testing.T) {
	forStores(t, testGroupLostAnswer, false)
}

func testGroupLostAnswer(t *testing.T, sc storeCase) {
	clk := objstoretest.NewClock()
	store := sc.open(t)
	e, f := faultyEnv(t, store, groupConfig(clk, 4))
	other := newEnv(t, store, groupConfig(clk, 4))
	groupKey := faulty.KeyContains("/consumers/")
	puts := func() int { return f.CallsMatching(faulty.OpPut, groupKey) }
	errReset := errors.New("connection reset")

	rule := f.LoseResponse(faulty.OpPut, groupKey, errReset)
	if a := mustJoin(t, e.tb, "g", "w0"); a.Epoch != 1 {
		t.Fatalf("a join whose answer was lost: epoch %d, want 1", a.Epoch)
	}
	if rule.Fired() != 1 || puts() != 1 {
		t.Fatalf("lost answers %d, puts %d; want 1 and 1 (the retry read found the join)", rule.Fired(), puts())
	}

	mustJoin(t, other.tb, "g", "w1")
	ep := stored(t, e.tb, "g").Epoch
	rule = f.LoseResponse(faulty.OpPut, groupKey, errReset)
	mustCommit(t, e.tb, "g", "w0", cursorAt(e.tb, "g", ep, map[int]uint64{0: 3}))
	if rule.Fired() != 1 {
		t.Fatal("the lost answer was not exercised")
	}

	// The commit lands, then another process changes the group (w2
	// joins, moving the epoch) before the committer hears anything: its
	// retry finds its change under a newer one.
	overtaken := f.Hook(faulty.OpPut, faulty.After, groupKey, func(ctx context.Context, _ string) error {
		mustJoin(t, other.tb, "g", "w2")
		return errOvertaken
	})
	g, err := e.tb.CommitGroup(context.Background(), "g", "w0", cursorAt(e.tb, "g", ep, map[int]uint64{0: 8, 2: 9}))
	if err != nil {
		t.Fatalf("a commit that landed before a rebalance: %v, want success", err)
	}
	if overtaken.Fired() != 1 {
		t.Fatal("the overtaken answer was not exercised")
	}
	if g.Epoch != ep+1 {
		t.Fatalf("answered epoch %d, want %d (the group as it is now)", g.Epoch, ep+1)
	}
	if got := committedOffsets(t, e.tb, "g"); !sameOffsets(got, map[int]uint64{0: 8, 2: 9}) {
		t.Fatalf("committed %v", got)
	}
}

// A table dropped and created again is a new incarnation: a cursor of
// the old one is refused (with the new table's oldest cursor), through a
// handle of either incarnation, and the old groups are gone.
func TestGroupCursorOfDroppedIncarnationIsRefused(t *testing.T) {
	clk := objstoretest.NewClock()
	e := newEnv(t, memory.New(), groupConfig(clk, 4))
	ctx := context.Background()
	old := e.tb
	a := mustJoin(t, old, "g", "w0")
	mustCommit(t, old, "g", "w0", cursorAt(old, "g", a.Epoch, map[int]uint64{0: 5}))
	oldCursor := cursorAt(old, "g", a.Epoch, map[int]uint64{0: 9})

	nt := recreateTable(t, e.db)
	for name, tb := range map[string]*Table{"new handle": nt, "old handle": old} {
		for _, member := range []string{"", "w0"} {
			_, err := tb.CommitGroup(ctx, "g", member, oldCursor)
			var ce *CursorExpiredError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCursorExpired) {
				t.Fatalf("%s, member %q: %v, want a CursorExpiredError", name, member, err)
			}
			if ce.Oldest.Incarnation != nt.Incarnation() || ce.Oldest.Partitions != 4 {
				t.Fatalf("%s: oldest cursor %+v, want the new incarnation's", name, ce.Oldest)
			}
		}
	}
	if g := stored(t, nt, "g"); g != nil {
		t.Fatalf("the new incarnation has the old group: %+v", g)
	}
	if _, err := nt.GroupStatusOf(ctx, "g"); !errors.Is(err, ErrGroupNotFound) {
		t.Fatalf("status of the old group: %v, want ErrGroupNotFound", err)
	}
	// Joining through the old handle joins the table as it is now.
	a = mustJoin(t, old, "g", "w0")
	if a.Epoch != 1 || a.Start.Incarnation != nt.Incarnation() || len(a.Start.Pos) != 0 {
		t.Fatalf("joining after the drop: %+v", a)
	}
}

func TestGroupNamesAreCheckedAndTablesWithoutPartitionsHaveNoGroups(t *testing.T) {
	clk := objstoretest.NewClock()
	mem := memory.New()
	e := newEnv(t, mem, groupConfig(clk, 4))
	ctx := context.Background()
	c := cursorAt(e.tb, "", 0, map[int]uint64{0: 1})
	for _, bad := range [][2]string{{"", "w0"}, {"../x", "w0"}, {".g", "w0"}, {"g", "a b"}, {"g", "-w"}, {"g", strings.Repeat("w", 65)}, {strings.Repeat("g", 65), "w0"}} {
		group, member := bad[0], bad[1]
		if _, err := e.tb.JoinGroup(ctx, group, member); !errors.Is(err, ErrInvalidName) {
			t.Fatalf("join %q %q: %v, want ErrInvalidName", group, member, err)
		}
		if _, err := e.tb.CommitGroup(ctx, group, member, c); !errors.Is(err, ErrInvalidName) {
			t.Fatalf("commit %q %q: %v, want ErrInvalidName", group, member, err)
		}
		if err := e.tb.LeaveGroup(ctx, group, member); !errors.Is(err, ErrInvalidName) {
			t.Fatalf("leave %q %q: %v, want ErrInvalidName", group, member, err)
		}
	}
	n := 0
	_ = mem.List(ctx, e.tb.keys.ConsumersPrefix(), objstore.ListOptions{}, func(objstore.Entry) error { n++; return nil })
	if n != 0 {
		t.Fatalf("bad names wrote %d objects", n)
	}

	legacy := newEnv(t, memory.New(), testConfig(""))
	if legacy.tb.Partitions() != 0 {
		t.Fatal("testConfig's table has partitions")
	}
	if _, err := legacy.tb.JoinGroup(ctx, "g", "w0"); !errors.Is(err, ErrNoFeed) {
		t.Fatalf("join on a table without partitions: %v, want ErrNoFeed", err)
	}
	if _, err := legacy.tb.CommitGroup(ctx, "g", "", Cursor{Incarnation: legacy.tb.Incarnation()}); !errors.Is(err, ErrNoFeed) {
		t.Fatalf("commit on a table without partitions: %v, want ErrNoFeed", err)
	}
	if gs, err := legacy.tb.Groups(ctx); err != nil || len(gs) != 0 {
		t.Fatalf("groups of a table without partitions: %v %v", gs, err)
	}
}

func TestDeletedGroupForgetsItsPositions(t *testing.T) {
	clk := objstoretest.NewClock()
	e := newEnv(t, memory.New(), groupConfig(clk, 4))
	ctx := context.Background()
	a := mustJoin(t, e.tb, "g", "w0")
	mustCommit(t, e.tb, "g", "w0", cursorAt(e.tb, "g", a.Epoch, map[int]uint64{0: 5}))
	if err := e.tb.DeleteGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if err := e.tb.DeleteGroup(ctx, "g"); !errors.Is(err, ErrGroupNotFound) {
		t.Fatalf("deleting it again: %v, want ErrGroupNotFound", err)
	}
	if _, err := e.tb.GroupStatusOf(ctx, "g"); !errors.Is(err, ErrGroupNotFound) {
		t.Fatalf("status: %v, want ErrGroupNotFound", err)
	}
	if err := e.tb.LeaveGroup(ctx, "g", "w0"); err != nil || stored(t, e.tb, "g") != nil {
		t.Fatalf("leaving a deleted group: %v (it must not come back)", err)
	}
	a = mustJoin(t, e.tb, "g", "w0")
	if a.Epoch != 1 || len(a.Start.Pos) != 0 {
		t.Fatalf("joining again: %+v, want a new group", a)
	}
}

// idsInPartition returns n ids of partition p (of partitions).
func idsInPartition(p, partitions, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if id := fmt.Sprintf("row-%d", i); PartitionOf(id, partitions) == p {
			out = append(out, id)
		}
	}
	return out
}

// A group's lag in a partition is the rows acknowledged after its
// committed position (all of them where it committed nothing), and how
// much older its last delivered row is than the partition's newest.
func TestGroupLagCountsRowsAckedAfterTheCommittedPosition(t *testing.T) {
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	w := newEnv(t, mem, partConfig("w0", clk, 4))
	ctx := context.Background()
	for _, id := range idsInPartition(0, 4, 3) {
		if err := appendID(w.tb, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := appendID(w.tb, idsInPartition(1, 4, 1)[0]); err != nil {
		t.Fatal(err)
	}
	r := newEnv(t, mem, groupConfig(clk, 4))
	c := cursorAt(r.tb, "", 0, map[int]uint64{0: 1, 2: 0})
	p0 := c.Pos[0]
	p0.At = clk.Now().Add(-10 * time.Second) // the first row was acked 10s before the newest
	c.Pos[0] = p0
	mustCommit(t, r.tb, "n", "", c)
	mustJoin(t, r.tb, "idle", "w0")

	st, err := r.tb.GroupStatusOf(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	want := []GroupLag{
		{Partition: 0, Committed: 1, Acked: 3, LagRows: 2, LagSeconds: 10},
		{Partition: 1, Committed: 0, Acked: 1, LagRows: 1},
		{Partition: 2},
		{Partition: 3},
	}
	if !slices.Equal(st.Lag, want) || st.LagRows != 3 || st.LagSeconds != 10 {
		t.Fatalf("lag %+v (%d rows, %gs), want %+v (3 rows, 10s)", st.Lag, st.LagRows, st.LagSeconds, want)
	}

	all, err := r.tb.Groups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Name != "idle" || all[1].Name != "n" {
		t.Fatalf("groups %+v, want idle and n", all)
	}
	if all[0].LagRows != 4 || all[0].LagSeconds != 0 || all[0].Members["w0"].Partitions == nil {
		t.Fatalf("the idle group: %+v", all[0])
	}
	if !slices.Equal(all[1].Lag, want) {
		t.Fatalf("listed lag %+v", all[1].Lag)
	}
}

// The hand-over race over the feed itself: what a member reads after a
// rebalance starts exactly after the rows of the last accepted commit, so
// every acknowledged row of a partition is delivered in order to whichever
// member holds it, none skipped; the rows read under a refused commit are
// delivered again.
func TestGroupHandOverOverTheFeedSkipsNoRow(t *testing.T) {
	clk := objstoretest.NewClock()
	mem := memory.New()
	w := newEnv(t, mem, feedConfig("w0", clk, 2, time.Hour))
	ackedIDs := map[int][]string{}
	for p := range 2 {
		for _, id := range idsInPartition(p, 2, 6) {
			if err := appendID(w.tb, id); err != nil {
				t.Fatal(err)
			}
			ackedIDs[p] = append(ackedIDs[p], id)
		}
	}
	cfg := groupConfig(clk, 2)
	cfg.FeedRetention = time.Hour
	r := newEnv(t, mem, cfg)
	ctx := context.Background()
	// delivered holds, per partition, the rows of the pages whose cursor
	// was committed, then what each member read after the rebalance.
	delivered := map[int][]string{}
	read := func(from Cursor, parts []int, max int) (*FeedPage, []FeedRow) {
		t.Helper()
		page, err := r.tb.Feed(ctx, FeedOptions{Cursor: &from, Partitions: parts, MaxRows: max})
		if err != nil {
			t.Fatal(err)
		}
		return page, page.Rows
	}
	keep := func(rows []FeedRow) {
		for _, row := range rows {
			delivered[row.Partition] = append(delivered[row.Partition], row.Record.ID)
		}
	}

	a := mustJoin(t, r.tb, "g", "a")
	page, rows := read(a.Start, a.Partitions, 5)
	if page.Next.Group != "g" || page.Next.Epoch != a.Epoch {
		t.Fatalf("the feed's cursor lost the group: %+v", page.Next)
	}
	mustCommit(t, r.tb, "g", "a", page.Next)
	keep(rows)
	page, _ = read(page.Next, a.Partitions, 5) // read, not committed yet

	b := mustJoin(t, r.tb, "g", "b")
	if _, err := r.tb.CommitGroup(ctx, "g", "a", page.Next); !errors.Is(err, ErrRebalanced) {
		t.Fatalf("A's commit after B joined: %v, want ErrRebalanced", err)
	}
	a = mustJoin(t, r.tb, "g", "a")
	for _, m := range []Assignment{a, b} {
		from := m.Start
		for {
			page, rows := read(from, m.Partitions, 3)
			if len(rows) == 0 {
				break
			}
			mustCommit(t, r.tb, "g", m.Member, page.Next)
			keep(rows)
			from = page.Next
		}
	}
	for p, ids := range ackedIDs {
		if !slices.Equal(delivered[p], ids) {
			t.Fatalf("partition %d: delivered %v, acknowledged %v", p, delivered[p], ids)
		}
	}
	st, err := r.tb.GroupStatusOf(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if st.LagRows != 0 || st.Committed[0].Offset != 6 || st.Committed[1].Offset != 6 {
		t.Fatalf("after draining: lag %d, committed %+v", st.LagRows, st.Committed)
	}
}

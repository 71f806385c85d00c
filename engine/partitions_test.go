package engine

// Invariant: each id has one home. In a partitioned table an id belongs to
// one partition, the partition to one owner agreed among the live writers,
// and only the head's compare-and-swap chain decides what the partition
// holds; so one id is acknowledged with one content, whichever process
// received each append and whatever the processes believe about ownership.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/metered"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

// partConfig is testConfig for a partitioned table on the fake clock clk;
// members are read only when a test asks (a long poll interval keeps the
// heartbeat loop out of the schedule).
func partConfig(name string, clk *objstoretest.Clock, partitions int) Config {
	cfg := testConfig(name)
	cfg.Partitions = partitions
	cfg.Addr = name + ":7070"
	cfg.MembersPollInterval = time.Hour
	cfg.LeaseDuration = 15 * time.Second
	cfg.Runtime = sched.WithClock(clk.Now)
	return cfg
}

// idOwnedBy returns an id whose partition owner is writer, as tb sees the
// members.
func idOwnedBy(t *testing.T, tb *Table, writer string) string {
	t.Helper()
	for i := 0; i < 10000; i++ {
		id := fmt.Sprintf("id-%d", i)
		o, err := tb.Owner(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if o.Writer == writer {
			return id
		}
	}
	t.Fatalf("no id owned by %s", writer)
	return ""
}

// forward is what the service does with an append that reached a process
// not owning its partition: store the payload there, commit the record at
// the owner.
func forward(ctx context.Context, from, owner *Table, rec Record, payload []byte) (AppendResult, error) {
	st, nt, err := from.Stage(ctx, rec, bytes.NewReader(payload), int64(len(payload)))
	if err != nil {
		return AppendResult{}, err
	}
	if nt != from {
		return AppendResult{}, fmt.Errorf("moved to another incarnation")
	}
	res, err := owner.Commit(ctx, []*Staged{st})
	var be *BatchError
	if errors.As(err, &be) {
		err = be.Err
	}
	if err != nil {
		return AppendResult{}, err
	}
	return res[0], nil
}

func TestIDMapsToOnePartitionStably(t *testing.T) {
	// The documented hash: FNV-1a 64 of the id's bytes, modulo the count.
	// These values are part of the format; the Python client's tests hold
	// the same table.
	for _, c := range []struct {
		id   string
		n    int
		want int
	}{
		{"", 1, 0},
		{"", 16, 5},
		{"", 256, 37},
		{"", 1000, 37},
		{"a", 16, 12},
		{"a", 256, 140},
		{"a", 1000, 996},
		{"rollout-000001", 16, 2},
		{"rollout-000001", 256, 66},
		{"run-1/step-0", 16, 14},
		{"run-1/step-0", 1000, 126},
		{"ü-日本", 16, 1},
		{"ü-日本", 256, 145},
		{"ü-日本", 1000, 113},
	} {
		if got := PartitionOf(c.id, c.n); got != c.want {
			t.Errorf("PartitionOf(%q, %d) = %d, want %d", c.id, c.n, got, c.want)
		}
	}
	if PartitionName(3) != "p0003" {
		t.Errorf("PartitionName(3) = %q", PartitionName(3))
	}
	if i, ok := partitionIndex("p0012"); !ok || i != 12 {
		t.Errorf("partitionIndex(p0012) = %d, %v", i, ok)
	}
	if _, ok := partitionIndex("w0"); ok {
		t.Error("a writer's shard parsed as a partition")
	}
}

func TestRendezvousMovesOnlyTheJoinersPartitions(t *testing.T) {
	before := map[string]string{}
	for i := range 256 {
		p := PartitionName(i)
		before[p] = rendezvous(p, []string{"a", "b", "c"})
	}
	counts := map[string]int{}
	for i := range 256 {
		p := PartitionName(i)
		now := rendezvous(p, []string{"a", "b", "c", "d"})
		counts[now]++
		if now != before[p] && now != "d" {
			t.Errorf("%s moved from %s to %s when d joined", p, before[p], now)
		}
	}
	for _, w := range []string{"a", "b", "c", "d"} {
		if counts[w] < 32 || counts[w] > 96 {
			t.Errorf("writer %s owns %d of 256 partitions: badly spread %v", w, counts[w], counts)
		}
	}
}

// Two processes receive one id with different content at the same moment;
// the one that does not own the partition forwards. Exactly one is
// acknowledged, the other is a conflict, and both processes serve the
// acknowledged content.
func TestOneIDToTwoProcessesIsAcknowledgedOnce(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	a := newEnv(t, mem, partConfig("a", clk, 4))
	b := newEnv(t, mem, partConfig("b", clk, 4))
	for _, e := range []*env{a, b, a} { // a again: it joined before b
		if _, _, err := e.tb.members(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 20 {
		id := idOwnedBy(t, a.tb, "a") + fmt.Sprintf("-%d", round)
		o, err := a.tb.Owner(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		owner, other := a, b
		if o.Writer == "b" {
			owner, other = b, a
		}
		if ob, _ := other.tb.Owner(ctx, id); ob.Writer != o.Writer {
			t.Fatalf("%s: the processes disagree on the owner: %s and %s", id, o.Writer, ob.Writer)
		}
		if _, err := other.tb.Append(ctx, Record{ID: id, RolloutID: "x"}, strings.NewReader("x"), 1); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("append to the process not owning %s: %v, want ErrNotOwner", id, err)
		}
		// Hold the owner's commit after its existence check: the direct
		// append is first.
		held := owner.hooks.Pause(hookChecked, hook.Times(1))
		type answer struct {
			res AppendResult
			err error
		}
		direct, forwarded := make(chan answer, 1), make(chan answer, 1)
		go func() {
			res, err := owner.tb.Append(ctx, Record{ID: id, RolloutID: "direct"}, strings.NewReader("direct"), 6)
			direct <- answer{res, err}
		}()
		_ = held.Wait(ctx)
		go func() {
			res, err := forward(ctx, other.tb, owner.tb, Record{ID: id, RolloutID: "forwarded"}, []byte("forwarded-bytes"))
			forwarded <- answer{res, err}
		}()
		// Whether the forwarded append waits behind the held one or comes
		// after its commit, it meets the held one's row.
		held.Release()
		d, f := <-direct, <-forwarded
		if d.err != nil || !d.res.Created {
			t.Fatalf("%s: the first append: %+v %v", id, d.res, d.err)
		}
		if !errors.Is(f.err, ErrConflict) {
			t.Fatalf("%s: the second append, other content: %+v %v, want ErrConflict", id, f.res, f.err)
		}
		for _, e := range []*env{a, b} {
			got, err := readPayload(e.tb, id)
			if err != nil || string(got) != "direct" {
				t.Fatalf("%s read on %s: %q %v", id, e.db.cfg.Shard, got, err)
			}
		}
	}
}

// A process that still believes it owns a partition (its view of the
// members is stale: the others saw its heartbeat lapse) has checked an
// append and is about to commit it when another process takes the
// partition and commits the same id with other content. The head's chain
// fences the first: one content acknowledged.
func TestStaleOwnerIsFencedByTheNewOwner(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	a := newEnv(t, mem, partConfig("a", clk, 2))
	if _, _, err := a.tb.members(ctx, true); err != nil {
		t.Fatal(err)
	}
	id := "stale-owner"
	// a alone: it owns every partition.
	a.put("warm-"+id, 10)
	held := a.hooks.Pause(hookChecked, hook.Times(1))
	done := make(chan error, 1)
	go func() {
		_, err := a.tb.Append(ctx, Record{ID: id, RolloutID: "from-a"}, strings.NewReader("aaaa"), 4)
		done <- err
	}()
	_ = held.Wait(ctx)
	// a stalls past the member timeout; b starts and sees a dead.
	clk.Advance(20 * time.Second)
	b := newEnv(t, mem, partConfig("b", clk, 2))
	if o, err := b.tb.Owner(ctx, id); err != nil || !o.Self {
		t.Fatalf("b's view of %s's owner: %+v %v, want b", id, o, err)
	}
	res, err := b.tb.Append(ctx, Record{ID: id, RolloutID: "from-b"}, strings.NewReader("bbbbbb"), 6)
	if err != nil || !res.Created {
		t.Fatalf("b's append: %+v %v", res, err)
	}
	held.Release()
	if err := <-done; !errors.Is(err, ErrFenced) && !errors.Is(err, ErrConflict) {
		t.Fatalf("a's append after b took the partition: %v, want ErrFenced (or a conflict)", err)
	}
	for _, e := range []*env{a, b} {
		got, err := readPayload(e.tb, id)
		if err != nil || string(got) != "bbbbbb" {
			t.Fatalf("read on %s: %q %v, want b's bytes", e.db.cfg.Shard, got, err)
		}
	}
	// The warm row a acknowledged before is still there.
	b.mustRead("warm-"+id, 10)
}

// A writer restarted under its name takes its partitions back at once:
// partitions carry no lease to wait out, and the head swap fences the
// predecessor (a zombie still running), whose next commit fails; having
// lost its entry in the members, it takes no partition again.
func TestRestartUnderTheSameNameWritesAtOnce(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	old := newEnv(t, mem, partConfig("w0", clk, 4))
	old.put("before", 5000)
	// The old process hangs (no Close); its successor starts at once.
	fresh := newEnv(t, mem, partConfig("w0", clk, 4))
	fresh.put("after", 5000)
	fresh.mustRead("before", 5000)
	// The successor takes a partition when it first writes to it: once it
	// wrote to every one, the predecessor can commit to none.
	taken := map[string]bool{}
	for i := 0; len(taken) < 4; i++ {
		id := fmt.Sprintf("fresh-%d", i)
		if p := fresh.tb.PartitionOf(id); !taken[p] {
			fresh.put(id, 10)
			taken[p] = true
		}
	}
	for i := range 16 {
		// Fenced where it still ran a writer; elsewhere it learns it was
		// replaced and names its successor as the owner to forward to.
		_, err := old.tb.Append(ctx, Record{ID: fmt.Sprintf("zombie-%d", i), RolloutID: "z"}, strings.NewReader("z"), 1)
		var noe *NotOwnerError
		if !errors.Is(err, ErrFenced) && !(errors.As(err, &noe) && noe.Owner.Writer == "w0" && !noe.Owner.Self) {
			t.Fatalf("the predecessor's append %d: %v, want ErrFenced or its successor named as the owner", i, err)
		}
	}
	if _, err := fresh.tb.Get(ctx, "after", ReadOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A writer joining takes the partitions rendezvous gives it: the holder
// hands them over (sealing) once it reads the members, and every row
// acknowledged before stays readable.
func TestJoiningWriterGetsItsPartitionsHandedOver(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	a := newEnv(t, mem, partConfig("a", clk, 8))
	var ids []string
	for i := range 40 {
		id := fmt.Sprintf("row-%d", i)
		a.put(id, 100)
		ids = append(ids, id)
	}
	held := len(a.tb.runningWriters())
	if held != 8 {
		t.Fatalf("a runs %d writers, want all 8 partitions", held)
	}
	b := newEnv(t, mem, partConfig("b", clk, 8))
	if _, _, err := b.tb.members(ctx, true); err != nil {
		t.Fatal(err)
	}
	m, _, err := a.tb.members(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	a.tb.handOver(ctx, m)
	waitFor(t, func() bool {
		for _, w := range a.tb.allWriters() {
			if o := rendezvous(w.shard, []string{"a", "b"}); o == "b" && a.tb.liveWriter(w.shard) != nil {
				return false
			}
		}
		return true
	})
	moved := 0
	for i := range 40 {
		id := fmt.Sprintf("new-%d", i)
		o, err := b.tb.Owner(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		e := a
		if o.Writer == "b" {
			e, moved = b, moved+1
		}
		e.put(id, 100)
		ids = append(ids, id)
	}
	if moved == 0 {
		t.Fatal("no partition moved to b")
	}
	for _, e := range []*env{a, b} {
		for _, id := range ids {
			e.mustRead(id, 100)
		}
	}
}

// waitFor polls cond (a state another goroutine reaches) with a generous
// deadline: a verdict never depends on the machine's speed.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 30s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

var _ objstore.Bucket = (*memory.Bucket)(nil)

// callCounter counts the store calls made while on is set.
type callCounter struct {
	mu    sync.Mutex
	on    bool
	calls []string
}

func (c *callCounter) observe(_ context.Context, call *metered.Call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.on {
		c.calls = append(c.calls, string(call.Op)+" "+call.Key)
	}
}

func (c *callCounter) during(f func()) []string {
	c.mu.Lock()
	c.on, c.calls = true, nil
	c.mu.Unlock()
	f()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = false
	return c.calls
}

// The costs that make partitions worth having, counted in store calls
// (not timed): an absent id costs one HEAD of its partition's head however
// many partitions are active, and an owner's append costs its segment and
// its head swap, its existence check answered from its own view.
func TestPartitionedCostsDoNotGrowWithPartitions(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	var cc callCounter
	store := metered.Wrap(memory.New(memory.WithClock(clk.Now)), metered.Options{Observe: cc.observe})
	cfg := partConfig("w0", clk, 64)
	cfg.ResidentMaxAge = time.Hour // the periodic whole refresh is not what this counts
	cfg.BaseProbeInterval = time.Hour
	e := newEnv(t, store, cfg)
	for i := range 400 { // every partition active
		e.put(fmt.Sprintf("warm-%d", i), 10)
	}
	if n := len(e.tb.runningWriters()); n != 64 {
		t.Fatalf("%d partitions written, want 64", n)
	}
	for i := range 20 {
		id := fmt.Sprintf("absent-%d", i)
		calls := cc.during(func() {
			if _, err := e.tb.Get(ctx, id, ReadOptions{}); !errors.Is(err, ErrNotFound) {
				t.Fatalf("absent id: %v", err)
			}
		})
		want := []string{"head " + e.tb.keys.Head(e.tb.PartitionOf(id))}
		if !slices.Equal(calls, want) {
			t.Fatalf("absent id %s: calls %q, want %q", id, calls, want)
		}
	}
	appends := 0
	for i := 0; appends < 20; i++ {
		id := fmt.Sprintf("new-%d", i)
		p := e.tb.PartitionOf(id)
		if i < 20 {
			// First appends after the warm-up: each writer's view catches
			// up with its head once.
			e.put(id, 10)
			continue
		}
		appends++
		calls := cc.during(func() { e.put(id, 10) })
		if len(calls) != 2 || !strings.HasPrefix(calls[0], "put ") || calls[1] != "put "+e.tb.keys.Head(p) {
			t.Fatalf("append %s: calls %q, want its segment's put and its head's", id, calls)
		}
	}
}

// A staged append comes from another process: the owner commits it only
// if its payload is what it claims (inline bytes matching their size and
// checksum, or an existing payload object of this table of that size).
func TestForwardedAppendIsCheckedByTheOwner(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	e := newEnv(t, mem, partConfig("w0", clk, 4))
	big := bytes.Repeat([]byte("b"), 10<<10) // above the 4 KiB inline limit
	st, _, err := e.tb.Stage(ctx, Record{ID: "big", RolloutID: "r"}, bytes.NewReader(big), int64(len(big)))
	if err != nil || st.Record.PayloadRef == "" {
		t.Fatalf("stage: %+v %v", st, err)
	}
	small, _, err := e.tb.Stage(ctx, Record{ID: "small", RolloutID: "r"}, strings.NewReader("abc"), 3)
	if err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(s *Staged){
		"missing object":      func(s *Staged) { s.Record.PayloadRef += "x" },
		"object of elsewhere": func(s *Staged) { s.Record.PayloadRef = "elsewhere/payloads/p0000/x" },
		"wrong size":          func(s *Staged) { s.Record.PayloadSize++ },
	} {
		bad := *st
		mutate(&bad)
		if _, err := e.tb.Commit(ctx, []*Staged{&bad}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	bad := *small
	bad.Record.Payload = []byte("abd")
	if _, err := e.tb.Commit(ctx, []*Staged{&bad}); !errors.Is(err, ErrInvalid) {
		t.Errorf("inline bytes not matching their checksum: %v, want ErrInvalid", err)
	}
	if _, err := e.tb.Get(ctx, "big", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("a refused forward left a row: %v", err)
	}
}

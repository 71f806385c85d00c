package engine

// A read that begins after an acknowledgement sees it (doc.go, steps 1, 3
// and 5, and "Reads"). Readers find shards through the registry and the
// heads, without listing; every shard that may acknowledge stays active in
// the registry whatever its registrations race (a fenced owner's late
// claim, a lost answer, many writers at once, an idle writer registering
// again); a resident snapshot serves hits without a refresh, and a miss
// joins only a refresh that began after it.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

// Read-after-write across processes: a write acknowledged by one process is
// visible to a read that begins afterwards on another, even if that reader
// refreshed a moment before.
func TestReadAfterWriteAcrossProcesses(t *testing.T) {
	forStores(t, testReadAfterWriteAcrossProcesses, true)
}

func testReadAfterWriteAcrossProcesses(t *testing.T, sc storeCase) {
	store := sc.open(t)
	w := newEnv(t, store, testConfig("s0"))
	r := newEnv(t, store, testConfig(""))
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("id-%d", i)
		if _, err := r.tb.Get(context.Background(), id, ReadOptions{}); !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
		w.put(id, i*300)
		r.mustRead(id, i*300)
		if i%7 == 6 {
			w.merge()
		}
	}
}

// A segment acknowledged while a refresh is under way (after its probe) is
// not in that refresh, so a read that began before the acknowledgement may
// miss it; a read that begins after it waits out that refresh and sees it.
func TestDiscoverySegmentLandsBetweenProbeAndRead(t *testing.T) {
	store := memory.New()
	w := newEnv(t, store, testConfig("s0"))
	w.put("warm", 1)
	r := newEnv(t, store, testConfig(""))
	r.mustRead("warm", 1)
	r.db.cfg.ResidentMaxAge = time.Nanosecond // every read refreshes
	gate := r.hooks.Pause(hookRefreshAfterHeads)
	early := await(func() error { _, err := r.tb.Get(context.Background(), "x", ReadOptions{}); return err })
	if err := gate.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	w.put("x", 100) // acknowledged after the paused refresh probed the heads
	late := await(func() error { _, err := readPayload(r.tb, "x"); return err })
	gate.Release()
	if err := <-early; err != nil && !errors.Is(err, ErrNotFound) {
		t.Fatalf("the read that began before the write: %v", err)
	}
	if err := <-late; err != nil {
		t.Fatalf("a read that began after the acknowledgement: %v", err)
	}
}

// A shard that appears (its first writer registers) is found by readers at
// their next refresh, without listing.
func TestDiscoveryNewShard(t *testing.T) {
	fb := faulty.New(memory.New())
	w0 := newEnv(t, fb, testConfig("s0"))
	w0.put("a", 10)
	r := newEnv(t, fb, testConfig(""))
	r.mustRead("a", 10)
	lists := fb.Calls(faulty.OpList)
	w1 := newEnv(t, fb, testConfig("s1"))
	w1.put("b", 10)
	r.db.cfg.ResidentMaxAge = time.Nanosecond
	r.mustRead("b", 10)
	if _, err := r.tb.Get(context.Background(), "absent", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if n := fb.Calls(faulty.OpList) - lists; n > 2 { // the writers' version probes list once each at most
		t.Fatalf("discovery listed %d times", n)
	}
}

// A generation sealed (and a new one started) between a refresh's probe
// and its loading of layouts: the refresh uses what the head it read said,
// and the next one finds the rest.
func TestDiscoveryGenerationSealedBetweenProbeAndLayout(t *testing.T) {
	store := memory.New()
	w := newEnv(t, store, testConfig("s0"))
	w.put("a", 10)
	r := newEnv(t, store, testConfig(""))
	r.db.cfg.ResidentMaxAge = time.Nanosecond
	gate := r.hooks.Pause(hookRefreshAfterHeads)
	first := await(func() error { _, err := readPayload(r.tb, "a"); return err })
	if err := gate.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := w.tb.Flush(context.Background()); err != nil { // seals the generation the probe saw open
		t.Fatal(err)
	}
	w.put("b", 10)
	gate.Release()
	if err := <-first; err != nil {
		t.Fatalf("read of a row of the generation sealed meanwhile: %v", err)
	}
	r.mustRead("a", 10)
	r.mustRead("b", 10)
}

// A reader whose resident snapshot is a version behind serves a hit from
// it without a refresh; a miss refreshes and moves the snapshot on.
func TestStaleHitServedWithoutRefreshMissRefreshes(t *testing.T) {
	forStores(t, testStaleHitServedWithoutRefreshMissRefreshes, true)
}

func testStaleHitServedWithoutRefreshMissRefreshes(t *testing.T, sc storeCase) {
	store := sc.open(t)
	e := newEnv(t, store, testConfig("s0"))
	walRow(t, e, "old", 10)
	e.merge()
	reader := newEnv(t, store, testConfig(""))
	reader.mustRead("old", 10)
	if v := reader.tb.snap.Load().version(); v != 1 {
		t.Fatalf("reader at version %d", v)
	}
	walRow(t, e, "new", 10)
	e.merge() // version 2, unknown to the reader
	refreshes := reader.db.Stats().Refreshes.Load()
	reader.mustRead("old", 10)
	if v := reader.tb.snap.Load().version(); v != 1 || reader.db.Stats().Refreshes.Load() != refreshes {
		t.Fatalf("a stale hit advanced the snapshot (version %d)", v)
	}
	reader.mustRead("new", 10)
	if v := reader.tb.snap.Load().version(); v != 2 {
		t.Fatalf("a miss did not refresh: version %d", v)
	}
}

// A refresh already running when a read begins cannot be joined by it.
func TestRefresherDoesNotJoinOlderFlight(t *testing.T) {
	r := refresher{rt: sched.Real, seq: new(atomic.Uint64)}
	release := make(chan struct{})
	started := make(chan uint64, 4)
	run := func(ctx context.Context, id uint64, _ bool) (*snapshot, error) {
		started <- id
		if id == 1 {
			<-release
		}
		return &snapshot{flight: id}, nil
	}
	first := make(chan *snapshot, 1)
	go func() {
		s, _ := r.after(context.Background(), 0, false, run)
		first <- s
	}()
	if id := <-started; id != 1 {
		t.Fatalf("first flight %d", id)
	}
	ticket := r.ticket() // a read beginning now, while flight 1 runs
	second := make(chan *snapshot, 1)
	go func() {
		s, _ := r.after(context.Background(), ticket, false, run)
		second <- s
	}()
	close(release)
	if s := <-first; s.flight != 1 {
		t.Fatalf("first got flight %d", s.flight)
	}
	if s := <-second; s.flight != 2 {
		t.Fatalf("the later read joined flight %d, want a fresh one", s.flight)
	}
}

// Registry swaps that lose (two writers registering at once) or lose
// their answer are applied again; no registration is lost.
func TestDiscoveryRegistryCASLost(t *testing.T) {
	mem := memory.New()
	fa := faulty.New(mem)
	a := newEnv(t, fa, testConfig("s0"))
	b := newEnv(t, mem, testConfig("s1"))
	held := fa.Pause(faulty.OpPut, faulty.Before, faulty.KeyContains("_registry.json"))
	aDone := await(func() error { return appendID(a.tb, "a") })
	mustWait(t, held)
	if err := appendID(b.tb, "b"); err != nil { // b registers while a's swap is held
		t.Fatal(err)
	}
	fa.LoseResponse(faulty.OpPut, faulty.KeyContains("_registry.json"), errors.New("connection reset"))
	held.Release() // a's swap fails its condition, its retry's answer is lost; both are retried
	if err := <-aDone; err != nil {
		t.Fatalf("writer whose registry swaps lost: %v", err)
	}
	r := newEnv(t, mem, testConfig(""))
	checkAll(t, r.tb, map[string]int{"a": 100, "b": 100})
	reg, _, err := readRegistry(context.Background(), r.db, r.tb.keys)
	if err != nil || !reg.Shards["s0"].Active || !reg.Shards["s1"].Active {
		t.Fatalf("registry: %+v %v", reg, err)
	}
}

// Writers of many shards starting together
// (a StatefulSet rolled) all register, whatever their collisions on the
// registry's compare-and-swap, and every row is acknowledged and read back.
func TestManyWritersRegisterAtOnce(t *testing.T) {
	fb := faulty.New(memory.New())
	newEnv(t, fb, testConfig("")) // creates the table
	// Slow registry round trips widen every collision window.
	fb.Latency(faulty.OpAny, faulty.KeyContains("_registry.json"), 3*time.Millisecond, faulty.Always())
	const n = 24
	var envs []*env
	for i := range n {
		envs = append(envs, newEnv(t, fb, testConfig(fmt.Sprintf("s%02d", i))))
	}
	var results []chan error
	for i, e := range envs {
		id := fmt.Sprintf("row-%02d", i)
		results = append(results, await(func() error { return appendID(e.tb, id) }))
	}
	want := map[string]int{}
	for i, ch := range results {
		if err := <-ch; err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
		want[fmt.Sprintf("row-%02d", i)] = 100
	}
	checkAll(t, newEnv(t, fb, testConfig("")).tb, want)
}

// A new owner that was itself fenced while taking the shard removes from
// the registry only the writers that came before it, never its successor:
// readers keep probing a shard whose writer keeps acknowledging, so a read
// that starts after an acknowledgement finds it (doc.go, step 2).
//
//  1. fencedOwnersLateClaim: A, then B (held before its "only me" swap),
//     then C take s0; C acknowledges c1; B's swap is applied to the
//     registry as C left it, and must leave C registered.
//  2. B's process shuts down cleanly (B never committed: its only append
//     was an identical retry), and B leaves the registry.
//  3. A reader builds its view, C acknowledges c2, and the reader's next
//     reads of c2 (at once, and past ResidentMaxAge) find it.
func TestFencedOwnerKeepsItsSuccessorRegistered(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	b, c := fencedOwnersLateClaim(t, mem, clk, func(*faulty.Bucket) {})
	if err := b.db.Close(ctx); err != nil { // B leaves the registry
		t.Fatal(err)
	}

	r := newEnv(t, mem, leaseConfig("", clk))
	r.mustRead("c1", 100) // r's view: s0 idle in the registry
	if err := appendID(c.tb, "c2"); err != nil {
		t.Fatalf("C's append: %v", err)
	}
	reg, _, err := readRegistry(ctx, r.db, r.tb.keys)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := readHead(ctx, r.db, r.tb.keys, "s0")
	if _, err := readPayload(r.tb, "c2"); err != nil {
		t.Errorf("read after c2 was acknowledged: %v (registry s0=%+v, head owner %s gen %d segs %d)",
			err, reg.Shards["s0"], h.Owner, h.Gen, h.Segs)
	}
	clk.Advance(10 * time.Second) // past ResidentMaxAge and BaseProbeInterval: still missed
	if _, err := readPayload(r.tb, "c2"); err != nil {
		t.Errorf("read of c2 %v later: %v", 10*time.Second, err)
	}
}

// A fenced owner's late "only me" registry update, whose answer is lost,
// races its successor's claim (fencedOwnersLateClaim): the retry
// re-applies it to the registry as the successor left it. The successor
// stays registered, so a reader whose view saw the shard settle still
// probes it and finds every row the successor acknowledges afterwards.
func TestFencedOwnersLateClaimWithLostAnswerKeepsSuccessor(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	// B's held claim fails its condition (C moved the registry), then
	// lands with its answer lost.
	var lost *faulty.Rule
	b, c := fencedOwnersLateClaim(t, mem, clk, func(fb *faulty.Bucket) {
		lost = fb.LoseResponse(faulty.OpPut, faulty.KeyContains("_registry.json"), errors.New("connection reset"), faulty.Skip(1))
	})
	if lost.Fired() != 1 {
		t.Fatalf("B's late claim lost %d answers, want 1", lost.Fired())
	}
	if err := b.db.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r := newEnv(t, mem, leaseConfig("", clk))
	r.mustRead("c1", 100)
	for i, id := range []string{"c2", "c3"} {
		if err := appendID(c.tb, id); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Duration(i+1) * 2 * time.Second)
		r.mustRead(id, 100)
	}
	reg, _, err := readRegistry(ctx, r.db, r.tb.keys)
	if err != nil || !reg.Shards["s0"].Active {
		t.Fatalf("s0 while C owns it: %+v %v", reg.Shards["s0"], err)
	}
}

// A reader's refresh probes a shard's head, then stalls; meanwhile the
// writer acknowledges, leaves the active set (it closes), a second writer
// takes the shard (registers again), acknowledges and leaves too. Every
// read that begins after an acknowledgement finds the row, and later
// refreshes (the shard idle, unchanged) keep finding them without a probe.
func TestIdleReRegisterAgainstAStalledRefresh(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	fr := faulty.New(mem)
	t.Cleanup(fr.Reset)
	w := newEnv(t, mem, testConfig("s0"))
	w.put("a", 100)
	r := newEnv(t, fr, testConfig(""))
	r.mustRead("a", 100)
	r.db.cfg.ResidentMaxAge = time.Nanosecond // every read refreshes
	gate := r.hooks.Pause(hookRefreshAfterHeads)
	early := await(func() error { _, err := r.tb.Get(ctx, "y", ReadOptions{}); return err })
	mustWait(t, gate)
	w.put("y", 100)
	if err := w.db.Close(ctx); err != nil { // seals, leaves the active set
		t.Fatal(err)
	}
	w2 := newEnv(t, mem, testConfig("s0"))
	w2.put("z", 100)
	if err := w2.db.Close(ctx); err != nil {
		t.Fatal(err)
	}
	reg, _, err := readRegistry(ctx, r.db, r.tb.keys)
	if err != nil || reg.Shards["s0"].Active {
		t.Fatalf("s0 after both writers left: %+v %v", reg.Shards["s0"], err)
	}
	gate.Release()
	if err := <-early; err != nil && !errors.Is(err, ErrNotFound) {
		t.Fatalf("the read that began before y: %v", err)
	}
	for _, id := range []string{"a", "y", "z"} {
		r.mustRead(id, 100)
	}
	heads := fr.CallsMatching(faulty.OpHead, faulty.KeyContains("/s0/_head.json"))
	for _, id := range []string{"a", "y", "z"} {
		r.mustRead(id, 100)
	}
	if _, err := r.tb.Get(ctx, "absent", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if n := fr.CallsMatching(faulty.OpHead, faulty.KeyContains("/s0/_head.json")) - heads; n != 0 {
		t.Fatalf("the idle, unchanged shard was probed %d times", n)
	}
}

package engine

// A drop ends one incarnation, the one the descriptor names when the drop
// reads it (doc.go, step 8, and "Keys and incarnations"): writers of it, in
// any process, fail their next head swap; no row of it is served once the
// drop is seen; a table created meanwhile keeps its rows whatever else
// runs (a second drop, a stale handle, CollectDropped); a process still
// acting on the old incarnation (a paused merge, a stale handle, a cached
// layout) touches dead keys only. A create or drop whose answer is lost
// never leaves a half-created or half-dropped table.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

// A drop is seen by every process: the dropping process's writer and
// another process's reader answer ErrTableNotFound; the drop leaves only
// its tombstones, which CollectDropped removes.
func TestDropSeenByOtherProcess(t *testing.T) {
	store := memory.New()
	a := newEnv(t, store, testConfig("s0"))
	b := newEnv(t, store, testConfig(""))
	a.put("x", 10)
	b.mustRead("x", 10)
	ctx := context.Background()
	if err := a.db.DropTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.tb.Append(ctx, Record{ID: "y", RolloutID: "r"}, strings.NewReader(""), 0); !errors.Is(err, ErrTableNotFound) {
		t.Fatalf("append to a dropped table: %v", err)
	}
	if _, err := b.tb.Get(ctx, "x", ReadOptions{}); !errors.Is(err, ErrTableNotFound) {
		t.Fatalf("other process reading a dropped table: %v", err)
	}
	// The drop leaves only its tombstones (the registry and the head of
	// each shard, which fence writers of the dropped incarnation
	// elsewhere); collecting dropped incarnations removes them.
	left := func() []string {
		var keys []string
		_ = store.List(ctx, "t/", objstore.ListOptions{}, func(e objstore.Entry) error { keys = append(keys, e.Key); return nil })
		return keys
	}
	if keys := left(); len(keys) != 2 || !strings.HasSuffix(keys[0], "/wal/_registry.json") || !strings.HasSuffix(keys[1], "/wal/s0/_head.json") {
		t.Fatalf("objects left after drop: %v", keys)
	}
	if n, err := a.db.CollectDropped(ctx, 0); err != nil || n != 2 {
		t.Fatalf("CollectDropped = %d, %v", n, err)
	}
	if keys := left(); len(keys) != 0 {
		t.Fatalf("objects left after collecting: %v", keys)
	}
}

// A drop by another process does not leave this process's writer holding
// the shard: the re-created table takes writes at once from any
// process, and this process's next write reaches the new table.
func TestRemoteDropReleasesTheWriter(t *testing.T) {
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	p1 := newEnv(t, mem, leaseConfig("s0", clk))
	if err := appendID(p1.tb, "x"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p2 := newEnv(t, mem, leaseConfig("s0", clk))
	dropAndCreate(t, p2.db)
	// The shard is free in the new incarnation: p2 writes to it at once.
	tb2, err := p2.db.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := appendID(tb2, "y"); err != nil {
		t.Fatalf("write to the re-created table: %v", err)
	}
	if err := tb2.Flush(ctx); err != nil { // gives the shard back
		t.Fatal(err)
	}
	if err := p2.db.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// p1's old handle notices the drop and writes to the new table.
	clk.Advance(2 * time.Second)
	if err := appendID(p1.tb, "z"); err != nil {
		t.Fatalf("the old writer's process after the drop: %v", err)
	}
	r := newEnv(t, mem, leaseConfig("", clk))
	checkAll(t, r.tb, map[string]int{"y": 100, "z": 100})
}

// A drop deletes the descriptor it read only (DeleteIfMatch): a create
// that lands between the drop's read and its delete (it replaces the
// descriptor of the tombstoned incarnation, as CreateTable does for a drop
// that has not finished) keeps its table and every row acknowledged to it.
//
//  1. P1 drops t (incarnation I1): tombstones the registry and heads,
//     reads the descriptor (names I1) ... and stalls before its Delete.
//  2. P2 creates t: the descriptor names I1, whose registry is a
//     tombstone, so P2 replaces it (If-Match) with I2: success.
//  3. P2 appends x: acknowledged.
//  4. P1's conditional delete of the descriptor fails: I2 stays, x reads
//     back in every process (and CollectDropped leaves it).
func TestDropKeepsATableCreatedMeanwhile(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	seed := newEnv(t, mem, testConfig("s0"))
	seed.put("old", 10)

	p1, f1 := faultyEnv(t, mem, testConfig(""))
	p2 := newEnv(t, mem, testConfig("s1"))
	created := false
	f1.Hook(faulty.OpDelete, faulty.Before, faulty.KeyContains("_table.json"), func(context.Context, string) error {
		// P1 has read the descriptor (it named I1); P2 creates t now.
		if err := p2.db.CreateTable(ctx, "t"); err != nil {
			t.Errorf("P2's create of the dropped table: %v", err)
			return nil
		}
		tb, err := p2.db.Table(ctx, "t")
		if err != nil {
			t.Errorf("P2 opens t: %v", err)
			return nil
		}
		if _, err := tb.Append(ctx, Record{ID: "x", RolloutID: "r"}, bytes.NewReader(payloadFor("x", 100)), 100); err != nil {
			t.Errorf("P2's append to the new table: %v", err)
			return nil
		}
		created = true
		return nil
	})
	if err := p1.db.DropTable(ctx, "t"); err != nil {
		t.Fatalf("drop: %v", err)
	}
	if !created {
		t.Fatal("the create did not run between the drop's read and delete of the descriptor")
	}
	r := openDB(t, mem, testConfig(""))
	tb, err := r.Table(ctx, "t")
	if err != nil {
		t.Fatalf("P2's CreateTable succeeded and x was acknowledged, yet the table is gone: %v", err)
	}
	got, err := readPayload(tb, "x")
	if err != nil || !bytes.Equal(got, payloadFor("x", 100)) {
		t.Fatalf("acknowledged x after the concurrent drop: %v", err)
	}
}

// Two drops of one incarnation, with a create landing between them: P1
// read the descriptor (I1) and fenced I1, then stalls; P2 drops I1 to the
// end; P3 creates t (I2, a plain create-if-absent: the name was free) and
// acknowledges x; P1 resumes: its conditional delete leaves I2's
// descriptor, and its delete of I1's objects does not touch I2's.
func TestTwoDropsAndACreateBetween(t *testing.T) {
	forStores(t, func(t *testing.T, sc storeCase) {
		ctx := context.Background()
		store := sc.open(t)
		seed := newEnv(t, store, testConfig("s0"))
		seed.put("old", 10)
		p1 := newEnv(t, store, testConfig(""))
		p2 := newEnv(t, store, testConfig(""))
		p3 := newEnv(t, store, testConfig("s1"))
		ran := false
		p1.hooks.Do(hookDropFenced, func(context.Context) error {
			if err := p2.db.DropTable(ctx, "t"); err != nil {
				t.Errorf("P2's drop: %v", err)
			}
			if err := p3.db.CreateTable(ctx, "t"); err != nil {
				t.Errorf("P3's create: %v", err)
				return nil
			}
			tb, err := p3.db.Table(ctx, "t")
			if err != nil {
				t.Errorf("P3 opens t: %v", err)
				return nil
			}
			if err := appendID(tb, "x"); err != nil {
				t.Errorf("P3 appends x: %v", err)
			}
			ran = true
			return nil
		})
		if err := p1.db.DropTable(ctx, "t"); err != nil {
			t.Fatalf("P1's drop: %v", err)
		}
		if !ran {
			t.Fatal("the interleaving did not run")
		}
		r := newEnv(t, store, testConfig(""))
		got, err := readPayload(r.tb, "x")
		if err != nil || len(got) != 100 {
			t.Fatalf("x, acknowledged to the table P3 created, after P1's late drop step: %v", err)
		}
		if _, err := r.tb.Get(ctx, "old", ReadOptions{}); !errors.Is(err, ErrNotFound) {
			t.Errorf("old, of the dropped incarnation: %v, want ErrNotFound", err)
		}
	}, false)
}

// A drop through a process whose handle is of an incarnation another
// process already dropped (and created again) drops the incarnation the
// descriptor names, the table as it is now, not the dead one it cached: a
// drop that reports success leaves no table behind.
func TestDropThroughStaleHandleDropsTheCurrentTable(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	p1 := newEnv(t, mem, testConfig("")) // caches its handle of I1
	p2 := newEnv(t, mem, testConfig("s0"))
	tb2 := recreateTable(t, p2.db)
	if err := appendID(tb2, "x"); err != nil {
		t.Fatal(err)
	}
	if p1.tb.Incarnation() == tb2.Incarnation() {
		t.Fatal("not a new incarnation")
	}
	derr := p1.db.DropTable(ctx, "t")
	r := openDB(t, mem, testConfig(""))
	if derr != nil {
		t.Fatalf("drop through the stale handle: %v", derr)
	}
	if _, err := r.Table(ctx, "t"); !errors.Is(err, ErrTableNotFound) {
		t.Errorf("DropTable(t) returned success, yet t (incarnation %s): %v", tb2.Incarnation(), err)
	}
}

// A drop whose registry tombstone lands but whose answer is lost (a
// connection reset) never half-drops the table: either it completes and
// reports success (the test has nothing more to check), or it reports
// failure and the table is whole: another process reads the acknowledged
// x, and a CreateTable ("ensure the table exists") fails instead of
// replacing it.
func TestDropLostTombstoneAnswerNeverHalfDrops(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := newEnv(t, mem, testConfig("s0"))
	w.put("x", 10)

	admin, fa := faultyEnv(t, mem, testConfig(""))
	fa.LoseResponse(faulty.OpPut, faulty.KeyContains("_registry.json"), errors.New("connection reset"))
	derr := admin.db.DropTable(ctx, "t")
	if derr == nil {
		t.Skip("the drop reported success: nothing to show")
	}
	rdb := openDB(t, mem, testConfig(""))
	tb, err := rdb.Table(ctx, "t")
	if err != nil {
		t.Fatalf("after a failed drop: %v", err)
	}
	if _, err := readPayload(tb, "x"); err != nil {
		t.Errorf("the drop failed (%v), yet the acknowledged x reads as: %v", derr, err)
	}
	if err := rdb.CreateTable(ctx, "t"); err == nil {
		t.Errorf("the drop failed, yet CreateTable replaced the existing table")
	}
}

// A drop whose conditional delete of the descriptor lands but whose answer
// is lost reports the failure. A retried drop drops whatever table is
// current, as asked; here nothing was created meanwhile, so the retry
// answers ErrTableNotFound (the table is gone), a create afterwards works,
// and CollectDropped removes what the first drop left.
func TestDropLostDescriptorDeleteAnswer(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	seed := newEnv(t, mem, testConfig("s0"))
	seed.put("old", 10)
	p, f := faultyEnv(t, mem, testConfig(""))
	errLost := errors.New("answer lost")
	lost := f.LoseResponse(faulty.OpDelete, faulty.KeyContains("_table.json"), errLost)
	if err := p.db.DropTable(ctx, "t"); !errors.Is(err, errLost) {
		t.Fatalf("drop with a lost answer: %v, want the lost answer", err)
	}
	if lost.Fired() != 1 {
		t.Fatal("the rule did not fire")
	}
	if err := p.db.DropTable(ctx, "t"); !errors.Is(err, ErrTableNotFound) {
		t.Errorf("retried drop: %v, want ErrTableNotFound", err)
	}
	if err := p.db.CreateTable(ctx, "t"); err != nil {
		t.Fatalf("create after the drop: %v", err)
	}
	if _, err := p.db.CollectDropped(ctx, 0); err != nil {
		t.Fatal(err)
	}
	tb, err := p.db.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Get(ctx, "old", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("old after drop and create: %v", err)
	}
}

// A drop whose descriptor read fails transiently does nothing and says so;
// a live handle of this process is not retired by the failed drop.
func TestDropWhoseDescriptorReadFailsDoesNothing(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	p, f := faultyEnv(t, mem, testConfig("s0"))
	p.put("a", 10)
	errBusy := errors.New("throttled")
	f.Fail(faulty.OpGet, faulty.KeyContains("_table.json"), errBusy)
	if err := p.db.DropTable(ctx, "t"); !errors.Is(err, errBusy) {
		t.Fatalf("drop: %v, want the read's failure", err)
	}
	if err := p.tb.checkLive(); err != nil {
		t.Fatalf("handle retired by a drop that did not happen: %v", err)
	}
	p.put("b", 10)
	p.mustRead("a", 10)
	p.mustRead("b", 10)
}

// CollectDropped lists a table's incarnations after reading its descriptor:
// a table created in between is named by no descriptor it read. It reads
// the descriptor again before deleting each incarnation, so the new table
// keeps its rows.
func TestCollectDroppedSparesATableCreatedMeanwhile(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := newEnv(t, mem, testConfig("s0"))
	w.put("old", 10)
	if err := w.db.DropTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	fb := faulty.New(mem)
	t.Cleanup(fb.Reset)
	c := openDB(t, fb, testConfig(""))
	var created *env
	fb.Hook(faulty.OpList, faulty.Before, faulty.Key("t/"), func(context.Context, string) error {
		// The descriptor was read (none: dropped); t is created again now.
		created = newEnv(t, mem, testConfig("s1"))
		created.put("x", 100)
		return nil
	})
	if _, err := c.CollectDropped(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if created == nil {
		t.Fatal("the create did not run between the descriptor's read and the listing")
	}
	newEnv(t, mem, testConfig("")).mustRead("x", 100)
}

// A create that stalls between its registry and its descriptor for more
// than half the orphan grace may find its registry collected (its
// incarnation was named by no descriptor, and old): it must not report
// success for a table that reads as dropped. A retry creates it.
func TestSlowCreateLosingItsRegistryFails(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	fb := faulty.New(mem)
	t.Cleanup(fb.Reset)
	cfg := leaseConfig("s0", clk)
	db := openDB(t, fb, cfg)
	other := openDB(t, mem, leaseConfig("", clk))
	fb.Hook(faulty.OpPut, faulty.Before, faulty.KeyContains("_table.json"), func(context.Context, string) error {
		clk.Advance(cfg.OrphanGrace + time.Minute) // the create stalls
		if _, err := other.CollectDropped(ctx, cfg.OrphanGrace); err != nil {
			t.Errorf("collect: %v", err)
		}
		return nil
	})
	if err := db.CreateTable(ctx, "t"); !errors.Is(err, ErrTooSlow) {
		t.Fatalf("a create whose registry was collected while it stalled: %v, want ErrTooSlow", err)
	}
	if err := db.CreateTable(ctx, "t"); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	tb, err := db.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := appendID(tb, "x"); err != nil {
		t.Fatalf("append to the re-created table: %v", err)
	}
}

// A new owner seals its predecessor's generation, reading the segments to
// build the seal record, while another process drops the table and deletes
// them: the append that took the shard answers with the drop
// (ErrTableNotFound), never the store's bare not-found. Simulator seeds
// 12578, 13386 and 24576 found this.
func TestSealMeetingADropAnswersTheDrop(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	ownerWithA1(t, mem, clk)
	clk.Advance(16 * time.Second) // A stalls; its lease lapses
	b, fb := faultyEnv(t, mem, leaseConfig("s0", clk))
	dropper := newEnv(t, mem, leaseConfig("", clk))
	dropped := false
	fb.Hook(faulty.OpGetRange, faulty.Before, faulty.KeyContains("/wal/s0/"), func(context.Context, string) error {
		if !dropped {
			dropped = true
			if err := dropper.db.DropTable(ctx, "t"); err != nil {
				t.Errorf("drop: %v", err)
			}
		}
		return nil
	}, faulty.Always())
	err := appendID(b.tb, "b1")
	if !dropped {
		t.Fatalf("B took the shard without reading A's segments (%v)", err)
	}
	if !errors.Is(err, ErrTableNotFound) {
		t.Fatalf("B's append, whose seal met the drop: %v, want ErrTableNotFound", err)
	}
}

// A merge paused after writing its data, across a drop and a re-create,
// commits into the dead incarnation's key space (or notices the drop); it
// cannot touch the new table's versions or generations.
func TestMergePausedAfterDataAcrossDropAndRecreate(t *testing.T) {
	store := memory.New()
	old := newEnv(t, store, testConfig("s0"))
	walRow(t, old, "old", 10)
	gate := old.hooks.Pause(hookMergeAfterData)
	merged := await(func() error { _, err := old.tb.Merge(context.Background(), MergeOptions{}); return err })
	if err := gate.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	admin := newEnv(t, store, testConfig(""))
	dropAndCreate(t, admin.db)
	w := newEnv(t, store, testConfig("s1"))
	walRow(t, w, "new1", 10)
	walRow(t, w, "new2", 20<<10)
	gate.Release()
	<-merged // its commit lands in the dead incarnation, or it notices the drop
	w.merge()
	checkAll(t, w.tb, map[string]int{"new1": 10, "new2": 20 << 10})
	checkAll(t, newEnv(t, store, testConfig("")).tb, map[string]int{"new1": 10, "new2": 20 << 10})
}

// A merge paused in its reclaim while another process drops the table and
// creates it again: the paused merge finishes against dead keys only, and
// the new table's rows are intact for every handle, the stale one included.
func TestMergePausedInReclaimAcrossDropAndRecreate(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := newEnv(t, mem, testConfig("s0"))
	walRow(t, w, "old1", 1000)
	walRow(t, w, "old2", 20<<10)
	m := newEnv(t, mem, testConfig(""))
	gate := m.hooks.Pause(hookMidReclaim)
	done := await(func() error { _, err := m.tb.Merge(ctx, MergeOptions{}); return err })
	mustWait(t, gate)
	admin := newEnv(t, mem, testConfig(""))
	dropAndCreate(t, admin.db)
	w2 := newEnv(t, mem, testConfig("s1"))
	w2.put("new1", 1000)
	walRow(t, w2, "new2", 20<<10)
	gate.Release()
	if err := <-done; err != nil && !errors.Is(err, ErrTableNotFound) {
		t.Fatalf("the merge across the drop: %v", err)
	}
	want := map[string]int{"new1": 1000, "new2": 20 << 10}
	checkAll(t, newEnv(t, mem, testConfig("")).tb, want)
	tb, err := m.db.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Merge(ctx, MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	checkAll(t, tb, want)
	if _, err := tb.Get(ctx, "old1", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the dropped table's row: %v", err)
	}
}

// A merger's handle from before a drop and re-create neither merges
// the new table with what it cached of the old one nor loses its rows.
func TestStaleMergerHandleAfterRecreate(t *testing.T) {
	store := memory.New()
	w := newEnv(t, store, testConfig("s0"))
	walRow(t, w, "x", 10)
	m := newEnv(t, store, testConfig(""))
	if res, err := m.tb.Merge(context.Background(), MergeOptions{}); err != nil || res.Version != 1 {
		t.Fatalf("first merge: %+v %v", res, err)
	}
	ctx := context.Background()
	w2 := recreateTable(t, w.db)
	for _, id := range []string{"p", "q"} {
		if _, err := w2.Append(ctx, Record{ID: id, RolloutID: "r-" + id, Sequence: 1}, bytes.NewReader(payloadFor(id, 10)), 10); err != nil {
			t.Fatal(err)
		}
	}
	if err := w2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.tb.Merge(ctx, MergeOptions{}); !errors.Is(err, ErrTableNotFound) {
		t.Fatalf("merge through the dropped incarnation's handle: %v", err)
	}
	tb, err := m.db.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	res, err := tb.Merge(ctx, MergeOptions{})
	if err != nil || res.Rows != 2 {
		t.Fatalf("merge of the new table: %+v %v", res, err)
	}
	checkAll(t, tb, map[string]int{"p": 10, "q": 10})
}

// A table dropped and created again: another process neither serves the
// old incarnation's cached rows nor misses the new ones, through its old
// handle or a new one.
func TestRecreatedTableNotServedFromStaleCache(t *testing.T) {
	store := memory.New()
	w := newEnv(t, store, testConfig("s0"))
	r := newEnv(t, store, testConfig(""))
	w.put("x", 10)
	r.mustRead("x", 10) // r caches the layout of t/wal/s0/…1/…0.arrow
	ctx := context.Background()
	w2tb := recreateTable(t, w.db)
	if _, err := w2tb.Append(ctx, Record{ID: "y", RolloutID: "r"}, bytes.NewReader(payloadFor("y", 10)), 10); err != nil {
		t.Fatal(err)
	}
	// r's old handle notices the drop and serves the table as it is now.
	if got, err := readPayload(r.tb, "y"); err != nil || !bytes.Equal(got, payloadFor("y", 10)) {
		t.Fatalf("old handle after recreate: %v", err)
	}
	if _, err := r.tb.Get(ctx, "x", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("old handle serves a dropped row: %v", err)
	}
	tb, err := r.db.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := readPayload(tb, "y"); err != nil || !bytes.Equal(got, payloadFor("y", 10)) {
		t.Fatalf("new row: %v", err)
	}
	if _, err := tb.Get(ctx, "x", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("dropped row still served: %v", err)
	}
}

// A payload read whose object vanishes mid-stream because the table was
// dropped meanwhile answers from the table as it is now: ErrNotFound when
// it was created again without the row (the table exists; "table not
// found" would be false), ErrTableNotFound when it was not.
func TestPayloadReadAcrossDrop(t *testing.T) {
	for _, recreate := range []bool{true, false} {
		t.Run(fmt.Sprintf("recreate=%v", recreate), func(t *testing.T) {
			ctx := context.Background()
			mem := memory.New()
			fb := faulty.New(mem)
			w := newEnv(t, fb, testConfig("s0"))
			w.put("x", 20<<10) // external: its own object
			other := newEnv(t, mem, testConfig(""))
			fail := fb.FailRead(faulty.OpGetRange, faulty.KeyContains("/payloads/"), 100, objstore.ErrNotFound)
			p, err := w.tb.OpenPayload(ctx, "x", 0, -1, ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if err := other.db.DropTable(ctx, "t"); err != nil {
				t.Fatal(err)
			}
			if recreate {
				if err := other.db.CreateTable(ctx, "t"); err != nil {
					t.Fatal(err)
				}
			}
			_, err = io.ReadAll(p)
			if fail.Fired() != 1 {
				t.Fatalf("the mid-stream loss fired %d times", fail.Fired())
			}
			want := ErrTableNotFound
			if recreate {
				want = ErrNotFound
			}
			if !errors.Is(err, want) || (recreate && errors.Is(err, ErrTableNotFound)) {
				t.Fatalf("read across the drop: %v, want %v", err, want)
			}
		})
	}
}

// A read whose retries run out because a drop deleted the incarnation's
// files under it answers with the drop, never ErrMissingFile (a 500): the
// last attempt fails after the drop, on a snapshot refreshed before it.
// Simulator seed 507024 found this (a body failing mid-stream).
func TestRetriesSpentByADropAnswerTheDrop(t *testing.T) {
	for _, midStream := range []bool{false, true} {
		t.Run(fmt.Sprintf("mid-stream=%v", midStream), func(t *testing.T) {
			ctx := context.Background()
			mem := memory.New()
			w := newEnv(t, mem, testConfig("s0"))
			w.put("x", 20<<10) // external: its own object
			w.merge()
			fb := faulty.New(mem)
			r := newEnv(t, fb, testConfig(""))
			if midStream {
				// Every open of the payload delivers 100 bytes, then loses it.
				fb.FailRead(faulty.OpGetRange, faulty.KeyContains("/payloads/"), 100, objstore.ErrNotFound, faulty.Times(10))
			} else {
				fb.Fail(faulty.OpGetRange, faulty.KeyContains("/payloads/"), objstore.ErrNotFound, faulty.Times(10))
			}
			// The last attempt locates the row, then the drop runs.
			located := 0
			r.hooks.Do(hookReadLocated, func(context.Context) error {
				if located++; located == maxRetries+1 {
					return w.db.DropTable(ctx, "t")
				}
				return nil
			}, hook.Always())
			p, err := r.tb.OpenPayload(ctx, "x", 0, -1, ReadOptions{})
			if err == nil {
				_, err = io.ReadAll(p)
				p.Close()
			}
			if located != maxRetries+1 {
				t.Fatalf("the row was located %d times, want %d (%v)", located, maxRetries+1, err)
			}
			if !errors.Is(err, ErrTableNotFound) || errors.Is(err, ErrMissingFile) {
				t.Fatalf("retries spent across a drop: %v, want ErrTableNotFound", err)
			}
		})
	}
}

// A pinned read through a handle opened before a drop never serves the
// dropped incarnation once the table was created again, even while the
// dropped incarnation's manifest survives (the drop stopped after its
// tombstones; CollectDropped has not run): version 1 of the table as it
// is now does not exist.
//
//  1. A table with x is merged into version 1; reader R reads x pinned
//     at version 1 (R's handle is the first incarnation).
//  2. An admin's drop tombstones the registry and heads and then its
//     process dies (point drop:fenced) before deleting the descriptor and
//     the incarnation's objects.
//  3. The table is created again (the dropped incarnation's descriptor
//     is replaced): empty.
//  4. Beyond ResidentMaxAge, R reads x pinned at version 1, through the
//     handle db.Table gives it: not the dropped row.
func TestPinnedReadNeverServesADroppedIncarnation(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	store := memory.New(memory.WithClock(clk.Now))
	cfg := leaseConfig("s0", clk)
	w := newEnv(t, store, cfg)
	walRow(t, w, "x", 10)
	if v := w.merge().Version; v != 1 {
		t.Fatalf("version %d", v)
	}
	r := newEnv(t, store, leaseConfig("", clk))
	if _, err := r.tb.Get(ctx, "x", ReadOptions{Version: 1}); err != nil {
		t.Fatal(err)
	}
	admin := newEnv(t, store, leaseConfig("", clk))
	admin.hooks.Fail(hookDropFenced, errCrash)
	if err := admin.db.DropTable(ctx, "t"); !errors.Is(err, errCrash) {
		t.Fatalf("drop: %v", err)
	}
	again := newEnv(t, store, leaseConfig("", clk)) // creates the table again
	if again.tb.Incarnation() == r.tb.Incarnation() {
		t.Fatal("not created again")
	}
	clk.Advance(time.Minute) // far beyond ResidentMaxAge
	tb, err := r.db.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := tb.Get(ctx, "x", ReadOptions{Version: 1}); err == nil {
		t.Errorf("pinned read of the re-created table returns the dropped row %q (incarnation %s, current %s)",
			rec.ID, tb.Incarnation(), again.tb.Incarnation())
	}
	if _, err := again.tb.Get(ctx, "x", ReadOptions{Version: 1}); err == nil {
		t.Fatal("the new incarnation has a version 1")
	}
}

// A pinned read through a handle of a dropped incarnation, of a version
// the table as it is now has committed, never answers a definitive "no
// such version" (ErrNoVersion, ErrNotFound, ErrVersionGone) because one
// HEAD of the descriptor fails transiently: a failed descriptor check is
// not read as "not dropped". Simulator seed 210314 found this.
//
//  1. R opens the table (incarnation I1). The table is dropped and created
//     again (I2), and I2 commits version 1 holding x.
//  2. R reads x pinned at version 1: I1's manifest 1 is missing, and the
//     HEAD of the descriptor that would tell I1 is dropped fails
//     (throttled).
func TestPinnedReadThroughDroppedHandleSurvivesDescriptorFailure(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	fr := faulty.New(mem)
	t.Cleanup(fr.Reset)
	w := newEnv(t, mem, testConfig("s0"))
	r := newEnv(t, fr, testConfig(""))
	tb := recreateTable(t, w.db)
	if _, err := tb.Append(ctx, Record{ID: "x", RolloutID: "r"}, bytes.NewReader(payloadFor("x", 10)), 10); err != nil {
		t.Fatal(err)
	}
	if err := tb.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := tb.Merge(ctx, MergeOptions{}); err != nil || res.Version != 1 {
		t.Fatalf("merge: %+v %v", res, err)
	}
	fr.Fail(faulty.OpHead, faulty.KeyContains("_table.json"), objstore.ErrThrottled)
	_, err := r.tb.Get(ctx, "x", ReadOptions{Version: 1})
	if errors.Is(err, ErrNoVersion) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrVersionGone) {
		t.Errorf("pinned read of committed version 1 after a transient descriptor failure: %v", err)
	}
}

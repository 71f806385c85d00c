package engine

// An answer matches what landed. A put or head swap whose answer is lost
// is resolved from what the store holds (the writer's own segment or head,
// the new owner's seal); one that cannot be checked is ErrOutcomeUnknown,
// never a refusal of a row that may be visible, and a retry of the same
// rows is answered from what landed. A lost answer never makes the engine
// delete what may be committed (a merger's files, an append's payload, a
// created table's registry).

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

// A put whose response was lost may have landed: the writer tells its own
// landed segment (and its own head swap) from another writer's, so the
// append is acknowledged once, with one copy of the row.
func TestLostSegmentResponse(t *testing.T) { forStores(t, testLostSegmentResponse, false) }

func testLostSegmentResponse(t *testing.T, sc storeCase) {
	for _, key := range []string{".arrow", "_head.json"} {
		t.Run(key, func(t *testing.T) {
			fb := faulty.New(sc.open(t))
			e := newEnv(t, fb, testConfig("s0"))
			e.put("warm", 1)
			rule := fb.LoseResponse(faulty.OpPut, faulty.KeyContains(key), errors.New("connection reset"))
			e.put("a", 10)
			if rule.Fired() != 1 {
				t.Fatalf("the lost response was not exercised (%d)", rule.Fired())
			}
			e.put("b", 10)
			// The retry of a finds the row: an identical retry, not a second copy.
			res, err := e.tb.Append(context.Background(), Record{ID: "a", RolloutID: "r-a", Sequence: 1}, bytes.NewReader(payloadFor("a", 10)), 10)
			if err != nil || res.Created {
				t.Fatalf("retry: %+v %v", res, err)
			}
			m := e.merge()
			if m.Rows != 3 || m.Duplicates != 0 {
				t.Fatalf("merge: %+v", m)
			}
			checkAll(t, e.tb, map[string]int{"warm": 1, "a": 10, "b": 10})
		})
	}
}

// A head swap whose outcome is unknown (no answer, and on the retry the head
// had moved) is resolved from the counts: here it did not land, and the new
// owner sealed the generation without it, so the append is refused with
// ErrFenced (not "outcome unknown") and the row is never visible. The e2e
// test found this (a writer continued after SIGSTOP).
func TestUnknownHeadSwapResolvedFromTheSeal(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	a, fa := faultyEnv(t, mem, leaseConfig("s0", clk))
	if err := appendID(a.tb, "a1"); err != nil {
		t.Fatal(err)
	}
	fa.Hook(faulty.OpPut, faulty.Before, faulty.KeyContains("/s0/_head.json"), func(context.Context, string) error {
		// A's lease lapses before its swap counting a2 is sent; B takes
		// the shard, sealing A's generation at a1. A's try gets no answer.
		clk.Advance(16 * time.Second)
		b := newEnv(t, mem, leaseConfig("s0", clk))
		if err := appendID(b.tb, "b1"); err != nil {
			t.Errorf("B takes the shard: %v", err)
		}
		return errors.New("connection reset: no answer")
	})
	err := appendID(a.tb, "a2")
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("A's swap did not land and B's seal does not count it: %v, want ErrFenced", err)
	}
	r := newEnv(t, mem, leaseConfig("", clk))
	if _, err := r.tb.Get(ctx, "a2", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused a2: %v, want ErrNotFound", err)
	}
	r.mustRead("a1", 100)
	r.mustRead("b1", 100)
}

// A head swap that lands but whose answer is lost, with another process
// moving the head before the resend: the store's answer is "outcome
// unknown" (errOvertaken; see TestLostResponseOvertaken in objstore/azure),
// not a precondition failure, and the writer resolves it from the new
// owner's seal. It never answers ErrFenced ("not written") for a row the
// head counted: a refused append must not be visible.
//
//  1. A owns s0, a1 is acknowledged; A's lease lapses while it appends a2.
//  2. A writes a2's segment and swaps the head to count it: the swap
//     lands; before A hears back, B takes the shard (sealing A's
//     generation at the head's count, which includes a2).
//  3. A's answer is "outcome unknown".
//  4. A answers a2 with success (B's seal record counts it: A resolves the
//     unknown outcome from the counts); a2 is visible, and stays so after
//     the merge.
func TestLostHeadSwapAnswerOvertakenResolvedFromTheSeal(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	a, fa := faultyEnv(t, mem, leaseConfig("s0", clk))
	if err := appendID(a.tb, "a1"); err != nil {
		t.Fatal(err)
	}
	var b *env
	fa.Hook(faulty.OpPut, faulty.After, faulty.KeyContains("/s0/_head.json"), func(context.Context, string) error {
		// A's swap counting a2 has landed; B takes the shard before A's
		// resend, which then fails its condition.
		clk.Advance(16 * time.Second)
		b = newEnv(t, mem, leaseConfig("s0", clk))
		if err := appendID(b.tb, "b1"); err != nil {
			t.Errorf("B takes the shard: %v", err)
		}
		return errOvertaken
	})
	aerr := appendID(a.tb, "a2")
	if aerr != nil {
		// The seal B wrote counts a2: A resolves its unknown outcome from it.
		t.Errorf("A's swap counting a2 landed, and B's seal counts it: A answered %v, want success", aerr)
	}
	r := newEnv(t, mem, leaseConfig("", clk))
	if _, err := r.tb.Get(ctx, "a2", ReadOptions{}); err != nil {
		t.Fatalf("read a2, which the head counted: %v", err)
	}
	b.merge()
	if _, err := r.tb.Get(ctx, "a2", ReadOptions{}); err != nil {
		t.Errorf("after the merge: a2: %v", err)
	}
}

// A head swap whose answer is lost and cannot be checked (every retry and
// every HEAD of the head fails): the writer answers ErrOutcomeUnknown and
// stops. The same rows retried on the same process (a new writer, which
// seals the generation at the head's count) are answered from what
// landed: an identical retry is Created=false with the acknowledged bytes,
// a different content is ErrConflict, and nothing is duplicated.
func TestUncheckableHeadSwapThenRetryOfTheSameRows(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w, fb := faultyEnv(t, mem, testConfig("s0"))
	w.put("a", 100)
	throttled := objstore.ErrThrottled
	w.hooks.Do(hookAfterSegment, func(context.Context) error {
		// The swap counting b lands, its answer is lost, and every check
		// of the outcome fails.
		fb.LoseResponse(faulty.OpPut, faulty.KeyContains("/s0/_head.json"), errors.New("connection reset"))
		fb.Fail(faulty.OpPut, faulty.KeyContains("/s0/_head.json"), throttled, faulty.Skip(1), faulty.Times(3))
		fb.Fail(faulty.OpHead, faulty.KeyContains("/s0/_head.json"), throttled, faulty.Times(4)) // the swap's checks, then the counts
		return nil
	})
	_, err := w.tb.Append(ctx, Record{ID: "b", RolloutID: "r-b", Sequence: 1}, bytes.NewReader(payloadFor("b", 100)), 100)
	if !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("append whose head swap answer was lost: %v, want ErrOutcomeUnknown", err)
	}
	res, err := w.tb.Append(ctx, Record{ID: "b", RolloutID: "r-b", Sequence: 1}, bytes.NewReader(payloadFor("b", 100)), 100)
	if err != nil || res.Created {
		t.Fatalf("identical retry after the unknown outcome: %+v %v, want Created=false", res, err)
	}
	if _, err := w.tb.Append(ctx, Record{ID: "b", RolloutID: "r-b", Sequence: 1}, bytes.NewReader(payloadFor("other", 100)), 100); !errors.Is(err, ErrConflict) {
		t.Fatalf("different content for b: %v, want ErrConflict", err)
	}
	w.put("c", 100)
	r := newEnv(t, mem, testConfig(""))
	checkAll(t, r.tb, map[string]int{"a": 100, "b": 100, "c": 100})
	w.merge()
	checkAll(t, r.tb, map[string]int{"a": 100, "b": 100, "c": 100})
	if st, _ := r.tb.Status(ctx); st.Rows != 3 || st.Duplicates != 0 {
		t.Fatalf("status: rows %d duplicates %d", st.Rows, st.Duplicates)
	}
}

// A head swap that landed but whose answer is lost and cannot be checked
// leaves the append's outcome unknown: its external payload survives for
// the retry that finds the landed row.
func TestUnknownOutcomeKeepsExternalPayload(t *testing.T) {
	fb := faulty.New(memory.New())
	e := newEnv(t, fb, testConfig("s0"))
	size := 20 << 10 // external
	e.put("warm", 1)
	// The head swap lands but its answer is lost, and the writer cannot
	// look: the outcome is unknown.
	e.hooks.Do(hookHeadCAS, func(context.Context) error {
		fb.LoseResponse(faulty.OpPut, faulty.KeyContains("_head.json"), errors.New("connection reset"))
		fb.Fail(faulty.OpHead, faulty.KeyContains("_head.json"), objstore.ErrThrottled, faulty.Times(8))
		return nil
	})
	if err := appendSized(e.tb, "x", size); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("unknown outcome reported as %v", err)
	}
	fb.Reset()
	if err := appendSized(e.tb, "x", size); err != nil { // the client's identical retry
		t.Fatal(err)
	}
	e.mustRead("x", size)
	e.merge()
	e.mustRead("x", size)
}

// A merger whose manifest create lands, but whose answer is lost, and whose
// resend finds the manifest gone (collected by retention meanwhile): the
// store's answer is "outcome unknown", and the merger keeps the data files
// it wrote, which every later version carries (the orphan sweep removes
// them if the commit did not land). No acknowledged row answers
// ErrMissingFile.
//
//  1. x is acknowledged and sealed. M1 (no lease: two mergers) writes
//     file F (x) and creates manifest 1: it lands.
//  2. Before M1 hears back, M2 merges y and z (versions 2 and 3, both
//     carrying F) and collects version 1 (RetainVersions 2).
//  3. M1's answer is "outcome unknown": it keeps F and gives up the pass.
//  4. x, y and z (in versions 2 and 3, x via F) read back.
func TestLostCommitAnswerKeepsItsFiles(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := newEnv(t, mem, testConfig("s0"))
	walRow(t, w, "x", 1000)
	m1, f1, m2 := twoMergers(t, mem, testConfig(""))
	f1.Hook(faulty.OpPut, faulty.After, faulty.KeyContains("/base/_versions/"), func(context.Context, string) error {
		for _, id := range []string{"y", "z"} {
			walRow(t, w, id, 1000)
			if _, err := m2.tb.Merge(ctx, MergeOptions{}); err != nil {
				t.Errorf("M2's merge: %v", err)
			}
		}
		if _, err := mem.Head(ctx, m1.tb.keys.Version(1)); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("version 1 not collected: %v", err)
		}
		return errOvertaken // the resend's 409, and its HEAD found nothing
	})
	if _, err := m1.tb.Merge(ctx, MergeOptions{}); err != nil {
		t.Logf("M1's merge: %v", err)
	}
	r := newEnv(t, mem, testConfig(""))
	for _, id := range []string{"x", "y", "z"} {
		got, err := readPayload(r.tb, id)
		if err != nil || !bytes.Equal(got, payloadFor(id, 1000)) {
			t.Errorf("acknowledged %s after M1's lost commit: %v", id, err)
		}
	}
}

// A CreateTable whose descriptor write (create-if-absent, after the new
// incarnation's registry) lands but whose answer is lost never leaves a
// half-created table: either the create reports an error and the table
// cannot be opened, or the table it opens takes appends. The registry of
// the incarnation the descriptor names is never deleted under it (which
// would make every append and read answer "table not found").
func TestCreateTableLostAnswerLeavesAWritableTable(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	fb := faulty.New(mem)
	t.Cleanup(fb.Reset)
	db := openDB(t, fb, testConfig("s0"))
	fb.LoseResponse(faulty.OpPut, faulty.KeyContains("_table.json"), errors.New("connection reset"))
	cerr := db.CreateTable(ctx, "t")
	tb, err := db.Table(ctx, "t")
	if err != nil {
		if cerr == nil {
			t.Fatalf("CreateTable succeeded, yet the table cannot be opened: %v", err)
		}
		return // the table does not exist: consistent with the error
	}
	if err := appendID(tb, "x"); err != nil {
		t.Errorf("the table exists after the failed create (db.Table opens it) but cannot be written: %v", err)
	}
}

// A create whose descriptor landed, but whose answer was lost and whose
// check of the outcome failed too, reports an error; the caller's retry
// must then succeed on that table, not answer ErrTableExists for the
// table its own first call created. Simulator seed 511531 found this.
func TestCreateTableRetryAfterUnknownOutcome(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	fb := faulty.New(mem)
	db := openDB(t, fb, testConfig("s0"))
	fb.LoseResponse(faulty.OpPut, faulty.KeyContains("_table.json"), errors.New("connection reset"), faulty.Times(1))
	fb.Fail(faulty.OpGet, faulty.KeyContains("_table.json"), objstore.ErrThrottled, faulty.Times(1))
	if err := db.CreateTable(ctx, "t"); err == nil {
		t.Fatal("CreateTable succeeded although its outcome could not be checked")
	}
	if err := db.CreateTable(ctx, "t"); err != nil {
		t.Fatalf("the retry of a create whose outcome was unknown: %v, want success", err)
	}
	tb, err := db.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := appendID(tb, "x"); err != nil {
		t.Fatalf("writing the created table: %v", err)
	}
	registries := 0
	for _, k := range mem.Keys() {
		if strings.HasSuffix(k, "/wal/_registry.json") {
			registries++
		}
	}
	if registries != 1 {
		t.Fatalf("%d registries left, want 1 (the retry's own is an orphan)", registries)
	}
	// Another process's table is still another's.
	other := openDB(t, mem, testConfig(""))
	if err := other.CreateTable(ctx, "t"); !errors.Is(err, ErrTableExists) {
		t.Fatalf("another process creating the existing table: %v, want ErrTableExists", err)
	}
}

package engine

// Adversarial review, session 15: interleavings across processes that the
// earlier reviews did not force (concurrent drop and create, lost answers
// on compare-and-swaps that another process overtakes, two mergers, the
// sweep against in-flight commits, retention against held snapshots).
// Every interleaving is forced with pause points, faulty rules or hooks;
// none depends on timing.

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

// A drop read the descriptor, saw its own incarnation, and deleted the
// descriptor without a condition. A create that landed in between (it
// replaces the descriptor of the tombstoned incarnation, as CreateTable
// does for a drop that has not finished) had its descriptor deleted by the
// drop: the created table, and every row acknowledged to it, was gone. The
// drop now deletes the descriptor it read only (DeleteIfMatch).
//
//  1. P1 drops t (incarnation I1): tombstones the registry and heads,
//     reads the descriptor (names I1) ... and stalls before its Delete.
//  2. P2 creates t: the descriptor names I1, whose registry is a
//     tombstone, so P2 replaces it (If-Match) with I2: success.
//  3. P2 appends x: acknowledged.
//  4. P1's conditional delete of the descriptor fails: I2 stays, x reads
//     back. (Before: it deleted I2's descriptor, every process answered
//     ErrTableNotFound, and CollectDropped would delete x.)
func TestReview15DropKeepsATableCreatedMeanwhile(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	seed := newEnv(t, mem, testConfig("s0"))
	seed.put("old", 10)

	f1 := faulty.New(mem)
	t.Cleanup(f1.Reset)
	p1 := newEnv(t, f1, testConfig(""))
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
	r, err := Open(mem, testConfig(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(ctx) })
	tb, err := r.Table(ctx, "t")
	if err != nil {
		t.Fatalf("P2's CreateTable succeeded and x was acknowledged, yet the table is gone: %v", err)
	}
	got, err := readPayload(tb, "x")
	if err != nil || !bytes.Equal(got, payloadFor("x", 100)) {
		t.Fatalf("acknowledged x after the concurrent drop: %v", err)
	}
}

// errOvertaken is what a store answers for a conditional Put that may have
// landed before another write replaced it (Azure: the SDK's resend after a
// lost answer fails its condition, and the blob is not this Put's): not
// ErrPrecondition, which would promise that nothing was written.
var errOvertaken = errors.New("outcome unknown: the condition failed on a resend and the object is not this Put's")

// A head swap that lands but whose answer is lost, with another process
// moving the head before the resend. The review found Azure's backend
// answering ErrPrecondition here (objstore/azure/write.go, putConditional,
// now TestLostResponseOvertaken there), and casHead took a precondition on
// its first attempt as "another writer moved the head first": the writer
// answered ErrFenced ("not written") for a row the head counted, a refused
// append that is visible. With the store's answer "outcome unknown", the
// writer must not refuse the row.
//
//  1. A owns s0, a1 is acknowledged; A's lease lapses while it appends a2.
//  2. A writes a2's segment and swaps the head to count it: the swap
//     lands; before A hears back, B takes the shard (sealing A's
//     generation at the head's count, which includes a2).
//  3. A's answer is "outcome unknown".
//  4. A answers a2 with success (B's seal record counts it: A resolves the
//     unknown outcome from the counts); a2 is visible, and stays so after
//     the merge.
func TestReview15LostHeadSwapAnswerOvertaken(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	fa := faulty.New(mem)
	t.Cleanup(fa.Reset)
	a := newEnv(t, fa, leaseConfig("s0", clk))
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

// A merger whose manifest create lands, but whose answer is lost, and whose
// resend finds the manifest gone (collected by retention meanwhile). The
// review found Azure's backend answering ErrPrecondition here ("not found"
// taken for "someone else's commit"), and the merger deleted the data files
// it wrote, which every later version carries: an acknowledged row
// answered ErrMissingFile. With the store's answer "outcome unknown", the
// merger keeps its files (the orphan sweep removes them if the commit did
// not land).
//
//  1. x is acknowledged and sealed. M1 (no lease: two mergers) writes
//     file F (x) and creates manifest 1: it lands.
//  2. Before M1 hears back, M2 merges y and z (versions 2 and 3, both
//     carrying F) and collects version 1 (RetainVersions 2).
//  3. M1's answer is "outcome unknown": it keeps F and gives up the pass.
//  4. x, y and z (in versions 2 and 3, x via F) read back.
func TestReview15LostCommitKeepsItsFiles(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := newEnv(t, mem, testConfig("s0"))
	walRow(t, w, "x", 1000)
	cfg := testConfig("")
	cfg.LeaseDuration = -1
	f1 := faulty.New(mem)
	t.Cleanup(f1.Reset)
	m1 := newEnv(t, f1, cfg)
	m2 := newEnv(t, mem, cfg)
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

// A head swap whose answer is lost and cannot be checked (every retry and
// every HEAD of the head fails): the writer answers ErrOutcomeUnknown and
// stops. The same rows retried on the same process (a new writer, which
// seals the generation at the head's count) are answered from what
// landed: an identical retry is Created=false with the acknowledged bytes,
// a different content is ErrConflict, and nothing is duplicated.
func TestReview15LostHeadSwapThenRetryOfTheSameRows(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	fb := faulty.New(mem)
	t.Cleanup(fb.Reset)
	w := newEnv(t, fb, testConfig("s0"))
	w.put("a", 100)
	throttled := objstore.ErrThrottled
	w.hooks.Do("write:after-segment", func(context.Context) error {
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

// Two mergers (no lease): M1 commits version 1 and stops at
// merge:after-commit; M2 commits version 2 and reclaims every merged
// generation; M1 then reclaims and collects from what is there. Nothing
// lost or doubled, and a third merge converges.
func TestReview15TwoMergersOneStalledAfterCommit(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := newEnv(t, mem, testConfig("s0"))
	cfg := testConfig("")
	cfg.LeaseDuration = -1
	m1 := newEnv(t, mem, cfg)
	m2 := newEnv(t, mem, cfg)
	walRow(t, w, "a", 1000)
	walRow(t, w, "b", 20<<10)
	gate := m1.hooks.Pause("merge:after-commit")
	done := await(func() error { _, err := m1.tb.Merge(ctx, MergeOptions{}); return err })
	mustWait(t, gate)
	walRow(t, w, "c", 1000)
	res, err := m2.tb.Merge(ctx, MergeOptions{})
	if err != nil || res.Version != 2 || len(res.Reclaimed) != 3 {
		t.Fatalf("M2's merge: %+v %v", res, err)
	}
	gate.Release()
	if err := <-done; err != nil {
		t.Fatalf("M1 after M2 reclaimed its generations: %v", err)
	}
	acked := map[string]int{"a": 1000, "b": 20 << 10, "c": 1000}
	checkAll(t, m1.tb, acked)
	checkAll(t, newEnv(t, mem, testConfig("")).tb, acked)
	if res, err := m1.tb.Merge(ctx, MergeOptions{}); err != nil || res.Version != 0 {
		t.Fatalf("third merge: %+v %v", res, err)
	}
	if st, _ := m1.tb.Status(ctx); st.Rows != 3 || st.Duplicates != 0 || len(st.Pending) != 0 {
		t.Fatalf("status: %+v", st)
	}
}

// A pinned read paused after locating its row while merges compact the
// version's file away and retention collects the version and that file:
// the read answers ErrVersionGone, never another version's rows, a 404 or
// a missing file; the retained versions answer their content.
func TestReview15PinnedReadAcrossCompactionAndCollection(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	cfg := testConfig("s0")
	cfg.CompactMaxFiles = 2
	w := newEnv(t, mem, cfg)
	walRow(t, w, "x", 1000)
	if v := w.merge().Version; v != 1 {
		t.Fatalf("version %d", v)
	}
	r := newEnv(t, mem, testConfig(""))
	gate := r.hooks.Pause("read:located")
	type got struct {
		rec *Record
		err error
	}
	ch := make(chan got, 1)
	go func() {
		rec, err := r.tb.Get(ctx, "x", ReadOptions{Version: 1})
		ch <- got{rec, err}
	}()
	mustWait(t, gate)
	compacted := 0
	for i, id := range []string{"y", "z", "u"} {
		walRow(t, w, id, 1000)
		res := w.merge()
		compacted += res.CompactedFiles
		if res.Version != uint64(i+2) {
			t.Fatalf("merge %d: %+v", i, res)
		}
	}
	if compacted == 0 {
		t.Fatal("no compaction happened")
	}
	if _, err := mem.Head(ctx, w.tb.keys.Version(1)); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("version 1 still retained: %v", err)
	}
	gate.Release()
	g := <-ch
	if !errors.Is(g.err, ErrVersionGone) {
		t.Fatalf("pinned read of collected version 1: %+v %v, want ErrVersionGone", g.rec, g.err)
	}
	for _, v := range []uint64{3, 4} {
		p, err := r.tb.OpenPayload(ctx, "x", 0, -1, ReadOptions{Version: v})
		if err != nil {
			t.Fatalf("pinned read of x at retained version %d: %v", v, err)
		}
		var buf bytes.Buffer
		_, err = buf.ReadFrom(p)
		p.Close()
		if err != nil || !bytes.Equal(buf.Bytes(), payloadFor("x", 1000)) {
			t.Fatalf("pinned payload of x at version %d: %v", v, err)
		}
	}
	if _, err := r.tb.Get(ctx, "u", ReadOptions{Version: 3}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("u at version 3 (merged in 4): %v, want ErrNotFound", err)
	}
}

// A merge paused in its reclaim while another process drops the table and
// creates it again: the paused merge finishes against dead keys only, and
// the new table's rows are intact for every handle, the stale one included.
func TestReview15DropDuringReclaim(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := newEnv(t, mem, testConfig("s0"))
	walRow(t, w, "old1", 1000)
	walRow(t, w, "old2", 20<<10)
	m := newEnv(t, mem, testConfig(""))
	gate := m.hooks.Pause("merge:mid-reclaim")
	done := await(func() error { _, err := m.tb.Merge(ctx, MergeOptions{}); return err })
	mustWait(t, gate)
	admin := newEnv(t, mem, testConfig(""))
	if err := admin.db.DropTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := admin.db.CreateTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
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

// A fenced owner's late "only me" registry update, whose answer is lost,
// races its successor's claim: the retry re-applies it to the registry as
// the successor left it. The successor stays registered, so a reader
// whose view saw the shard settle still probes it and finds every row the
// successor acknowledges afterwards.
func TestReview15FencedOwnersLateRegistryUpdateLostAnswer(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	a := newEnv(t, mem, leaseConfig("s0", clk))
	if err := appendID(a.tb, "a1"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(16 * time.Second)
	fb := faulty.New(mem)
	t.Cleanup(fb.Reset)
	b := newEnv(t, fb, leaseConfig("s0", clk))
	// B's second registry swap is recover's claim (only=true).
	held := fb.Pause(faulty.OpPut, faulty.Before, faulty.KeyContains("_registry.json"), faulty.Skip(1))
	lost := fb.LoseResponse(faulty.OpPut, faulty.KeyContains("_registry.json"), errors.New("connection reset"), faulty.Skip(1))
	bDone := await(func() error { return appendID(b.tb, "a1") })
	mustWait(t, held)
	clk.Advance(16 * time.Second)
	c := newEnv(t, mem, leaseConfig("s0", clk))
	if err := appendID(c.tb, "c1"); err != nil {
		t.Fatal(err)
	}
	held.Release() // fails its condition (C moved the registry), then lands with its answer lost
	if err := <-bDone; err != nil {
		t.Fatalf("B: %v", err)
	}
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
func TestReview15IdleReRegisterAgainstAStalledRefresh(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	fr := faulty.New(mem)
	t.Cleanup(fr.Reset)
	w := newEnv(t, mem, testConfig("s0"))
	w.put("a", 100)
	r := newEnv(t, fr, testConfig(""))
	r.mustRead("a", 100)
	r.db.cfg.ResidentMaxAge = time.Nanosecond // every read refreshes
	gate := r.hooks.Pause("refresh:after-heads")
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

// The orphan sweep runs while a writer's segment put is in flight, its
// external payload uploaded long enough ago that a later sweep could take
// it: the writer refuses the commit (ErrTooSlow) rather than count a row
// whose payload may be swept, the refused row never becomes visible, the
// sweeps never delete anything a head counts, and a retry writes it anew.
func TestReview15SweepAgainstSegmentPutInFlight(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	fa := faulty.New(mem)
	t.Cleanup(fa.Reset)
	a := newEnv(t, fa, leaseConfig("s0", clk))
	if err := appendSized(a.tb, "a1", 20<<10); err != nil {
		t.Fatal(err)
	}
	inFlight := fa.Pause(faulty.OpPut, faulty.Before, faulty.KeyContains(".arrow"))
	late := await(func() error { return appendSized(a.tb, "x", 20<<10) })
	mustWait(t, inFlight)
	grace := a.db.cfg.OrphanGrace
	clk.Advance(grace/2 + time.Minute) // x's payload is older than half the grace
	s := newEnv(t, mem, leaseConfig("", clk))
	if _, err := s.tb.Sweep(ctx, grace); err != nil {
		t.Fatal(err)
	}
	inFlight.Release()
	if err := <-late; !errors.Is(err, ErrTooSlow) {
		t.Fatalf("commit of a payload older than half the grace: %v, want ErrTooSlow", err)
	}
	if _, err := s.tb.Get(ctx, "x", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused x: %v", err)
	}
	clk.Advance(2 * grace)
	if _, err := s.tb.Sweep(ctx, grace); err != nil {
		t.Fatal(err)
	}
	b := newEnv(t, mem, leaseConfig("s0", clk))
	if err := appendSized(b.tb, "b1", 20<<10); err != nil { // seals a's generation without x
		t.Fatal(err)
	}
	clk.Advance(2 * grace)
	if _, err := s.tb.Sweep(ctx, grace); err != nil {
		t.Fatal(err)
	}
	if _, err := s.tb.Get(ctx, "x", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused x after the takeover: %v", err)
	}
	if err := appendSized(b.tb, "x", 20<<10); err != nil {
		t.Fatalf("retry of x: %v", err)
	}
	want := map[string]int{"a1": 20 << 10, "b1": 20 << 10, "x": 20 << 10}
	checkAll(t, newEnv(t, mem, leaseConfig("", clk)).tb, want)
	b.merge()
	clk.Advance(2 * grace)
	if _, err := s.tb.Sweep(ctx, grace); err != nil {
		t.Fatal(err)
	}
	checkAll(t, newEnv(t, mem, leaseConfig("", clk)).tb, want)
}

// A drop through a process whose handle is of an incarnation another
// process already dropped (and created again) dropped the dead incarnation
// only and reported success, while the table it was asked to drop stayed
// with its rows. The drop now drops the incarnation the descriptor names.
func TestReview15DropThroughStaleHandleDropsTheTableAsItIsNow(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	p1 := newEnv(t, mem, testConfig("")) // caches its handle of I1
	p2 := newEnv(t, mem, testConfig("s0"))
	if err := p2.db.DropTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := p2.db.CreateTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	tb2, err := p2.db.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := appendID(tb2, "x"); err != nil {
		t.Fatal(err)
	}
	if p1.tb.Incarnation() == tb2.Incarnation() {
		t.Fatal("not a new incarnation")
	}
	derr := p1.db.DropTable(ctx, "t")
	r, err := Open(mem, testConfig(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(ctx) })
	if derr != nil {
		t.Fatalf("drop through the stale handle: %v", derr)
	}
	if _, err := r.Table(ctx, "t"); !errors.Is(err, ErrTableNotFound) {
		t.Errorf("DropTable(t) returned success, yet t (incarnation %s): %v", tb2.Incarnation(), err)
	}
}

package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/faulty"
)

var errCrash = errors.New("simulated crash")

// checkAll asserts every acknowledged id reads back byte-equal, and that a
// scan of the latest view holds each exactly once and nothing else.
func checkAll(t *testing.T, tb *Table, acked map[string]int) {
	t.Helper()
	for id, n := range acked {
		got, err := readPayload(tb, id)
		if err != nil {
			t.Fatalf("acknowledged %s: %v", id, err)
		}
		if !bytes.Equal(got, payloadFor(id, n)) {
			t.Fatalf("acknowledged %s: wrong bytes", id)
		}
	}
	var buf bytes.Buffer
	if err := tb.Scan(context.Background(), &buf, ScanOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	if err := rowfile.ReadStream(&buf, func(_ int, r rowfile.Record) error { seen[r.ID]++; return nil }); err != nil {
		t.Fatal(err)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("%s scanned %d times", id, c)
		}
		if _, ok := acked[id]; !ok {
			t.Fatalf("unacknowledged %s visible", id)
		}
	}
	if len(seen) != len(acked) {
		t.Fatalf("scan has %d rows, %d acknowledged", len(seen), len(acked))
	}
}

func TestMergeCrashPointsConverge(t *testing.T) { forStores(t, testMergeCrashPointsConverge, true) }

func testMergeCrashPointsConverge(t *testing.T, sc storeCase) {
	for _, point := range []string{"merge:after-data", "merge:after-commit", "merge:mid-reclaim"} {
		t.Run(point, func(t *testing.T) {
			store := sc.open(t)
			e := newEnv(t, store, testConfig("s0"))
			acked := map[string]int{}
			for i := 0; i < 12; i++ {
				id := fmt.Sprintf("id-%02d", i)
				e.put(id, i*900)
				acked[id] = i * 900
				if i%4 == 3 {
					if err := e.tb.Flush(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
			}
			e.hooks.Fail(point, errCrash)
			if _, err := e.tb.Merge(context.Background(), MergeOptions{}); !errors.Is(err, errCrash) {
				t.Fatalf("merge did not stop at %s: %v", point, err)
			}
			checkAll(t, e.tb, acked) // nothing lost or doubled in between
			// The next merge, in a fresh process, converges.
			next := newEnv(t, store, testConfig(""))
			if _, err := next.tb.Merge(context.Background(), MergeOptions{}); err != nil {
				t.Fatal(err)
			}
			checkAll(t, next.tb, acked)
			if keys := next.walKeys(); len(keys) != 0 {
				t.Fatalf("WAL left after convergence: %v", keys)
			}
			st, _ := next.tb.Status(context.Background())
			if st.Rows != int64(len(acked)) || len(st.Pending) != 0 {
				t.Fatalf("status: %+v", st)
			}
			// Crashed data files are orphans; the sweep removes them.
			if _, err := next.tb.Sweep(context.Background(), 0); err != nil {
				t.Fatal(err)
			}
			live := map[string]bool{}
			m, _ := next.tb.loadManifest(context.Background(), st.Version)
			for _, f := range m.Files {
				live[f.Name] = true
			}
			_ = store.List(context.Background(), next.tb.keys.DataPrefix(), objstore.ListOptions{}, func(en objstore.Entry) error {
				if name, _, _ := next.tb.keys.ParseDataObject(en.Key); !live[name] {
					t.Errorf("orphan data file %s survived the sweep", en.Key)
				}
				return nil
			})
			checkAll(t, next.tb, acked)
		})
	}
}

func TestWriteCrashPoints(t *testing.T) { forStores(t, testWriteCrashPoints, true) }

func testWriteCrashPoints(t *testing.T, sc storeCase) {
	for _, point := range []string{"write:after-payload", "write:before-segment"} {
		t.Run(point, func(t *testing.T) {
			store := sc.open(t)
			e := newEnv(t, store, testConfig("s0"))
			acked := map[string]int{"before": 10 << 10}
			e.put("before", 10<<10)
			e.hooks.Fail(point, errCrash)
			_, err := e.tb.Append(context.Background(), Record{ID: "lost", RolloutID: "r"}, bytes.NewReader(payloadFor("lost", 10<<10)), 10<<10)
			if !errors.Is(err, errCrash) {
				t.Fatalf("append did not stop at %s: %v", point, err)
			}
			e.put("after", 10<<10)
			acked["after"] = 10 << 10
			e.merge()
			checkAll(t, e.tb, acked)
			// The crashed append's payload object is an orphan: swept.
			res, err := e.tb.Sweep(context.Background(), 0)
			if err != nil {
				t.Fatal(err)
			}
			if point == "write:after-payload" && res.Payloads != 1 {
				t.Fatalf("sweep removed %d payloads, want 1", res.Payloads)
			}
			checkAll(t, e.tb, acked)
			// The client's retry of the unacknowledged append succeeds.
			e.put("lost", 10<<10)
			acked["lost"] = 10 << 10
			checkAll(t, e.tb, acked)
		})
	}
}

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

func TestAppendsDuringMergeNotBlockedNorLost(t *testing.T) {
	forStores(t, testAppendsDuringMergeNotBlockedNorLost, false)
}

func testAppendsDuringMergeNotBlockedNorLost(t *testing.T, sc storeCase) {
	store := sc.open(t)
	e := newEnv(t, store, testConfig("s0"))
	acked := map[string]int{}
	for i := 0; i < 5; i++ {
		id := fmt.Sprintf("pre-%d", i)
		e.put(id, 100)
		acked[id] = 100
	}
	if err := e.tb.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	gate := e.hooks.Pause("merge:after-data")
	merged := make(chan error, 1)
	merger := newEnv(t, store, testConfig(""))
	merger.hooks = e.hooks
	go func() {
		_, err := e.tb.Merge(context.Background(), MergeOptions{})
		merged <- err
	}()
	if err := gate.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	// While the merge is held after writing its data files: appends are
	// acknowledged, and a generation is sealed.
	for i := 0; i < 5; i++ {
		id := fmt.Sprintf("during-%d", i)
		e.put(id, 5000)
		acked[id] = 5000
	}
	if err := e.tb.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	gate.Release()
	if err := <-merged; err != nil {
		t.Fatal(err)
	}
	checkAll(t, e.tb, acked)
	st, _ := e.tb.Status(context.Background())
	if len(st.Pending) != 1 || !st.Pending[0].Sealed || st.PendingRows != 5 {
		t.Fatalf("the generation sealed during the merge was dropped: %+v", st)
	}
	e.merge()
	checkAll(t, e.tb, acked)
}

func TestConcurrentMergersNoDuplicates(t *testing.T) {
	forStores(t, testConcurrentMergersNoDuplicates, true)
}

func testConcurrentMergersNoDuplicates(t *testing.T, sc storeCase) {
	store := sc.open(t)
	w := newEnv(t, store, testConfig("s0"))
	acked := map[string]int{}
	for g := 0; g < 4; g++ {
		for i := 0; i < 5; i++ {
			id := fmt.Sprintf("g%d-%d", g, i)
			w.put(id, 300*i)
			acked[id] = 300 * i
		}
		if err := w.tb.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Four processes; hold all four before their commit so they race on it.
	// Leases off: with them, the merger lease would serialise the four
	// (TestMergerLeaseSingleton); here the commit's create-if-absent alone
	// must keep them from duplicating rows.
	var envs []*env
	var gates []*faultyGate
	cfg := testConfig("")
	cfg.LeaseDuration = -1
	for i := 0; i < 4; i++ {
		fb := faulty.New(store)
		envs = append(envs, newEnv(t, fb, cfg))
		gates = append(gates, &faultyGate{fb.Pause(faulty.OpPut, faulty.Before, faulty.KeyContains("/base/_versions/"))})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for _, e := range envs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.tb.Merge(context.Background(), MergeOptions{})
			errs <- err
		}()
	}
	for _, g := range gates {
		if err := g.Wait(waitCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range gates {
		g.Release()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	checkAll(t, w.tb, acked)
	st, _ := w.tb.Status(context.Background())
	if st.Rows != int64(len(acked)) || st.Duplicates != 0 {
		t.Fatalf("status after concurrent merges: rows %d dups %d", st.Rows, st.Duplicates)
	}
	var conflicts int64
	for _, e := range envs {
		conflicts += e.db.Stats().MergeConflicts.Load()
	}
	if conflicts == 0 {
		t.Fatal("the four merges never raced on a commit")
	}
}

type faultyGate struct{ *faulty.Gate }

func TestTwoShardsOneBaseAndCrossShardDuplicate(t *testing.T) {
	forStores(t, testTwoShardsOneBaseAndCrossShardDuplicate, false)
}

func testTwoShardsOneBaseAndCrossShardDuplicate(t *testing.T, sc storeCase) {
	store := sc.open(t)
	a := newEnv(t, store, testConfig("a"))
	b := newEnv(t, store, testConfig("b"))
	acked := map[string]int{}
	for i := 0; i < 6; i++ {
		for _, e := range []*env{a, b} {
			id := fmt.Sprintf("%s-%d", e.db.cfg.Shard, i)
			e.put(id, i*100)
			acked[id] = i * 100
		}
	}
	// The same id slipping through on both shards: both existence checks
	// pass before either commits.
	gates := []*hook.Gate{a.hooks.Pause("write:checked"), b.hooks.Pause("write:checked")}
	errs := make(chan error, 2)
	for _, e := range []*env{a, b} {
		go func() {
			_, err := e.tb.Append(context.Background(), Record{ID: "dup", RolloutID: "from-" + e.db.cfg.Shard, ContentType: "x"}, strings.NewReader("p"), 1)
			errs <- err
		}()
	}
	for _, g := range gates {
		if err := g.Wait(waitCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range gates {
		g.Release()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	before, err := a.tb.Get(context.Background(), "dup", ReadOptions{})
	if err != nil || before.RolloutID != "from-a" {
		t.Fatalf("WAL read of the duplicate: %+v %v", before, err)
	}
	for _, e := range []*env{a, b} {
		if err := e.tb.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	res := a.merge()
	if len(res.Merged) != 2 || res.Duplicates != 1 {
		t.Fatalf("merge: %+v", res)
	}
	after, err := b.tb.Get(context.Background(), "dup", ReadOptions{})
	if err != nil || after.RolloutID != "from-a" {
		t.Fatalf("merge kept %+v, readers saw from-a", after)
	}
	m, _ := a.tb.loadManifest(context.Background(), res.Version)
	if m.Watermarks["a"] == 0 || m.Watermarks["b"] == 0 || m.Duplicates != 1 {
		t.Fatalf("manifest: %+v", m)
	}
	acked["dup"] = -1
	for id, n := range acked {
		if n < 0 {
			continue
		}
		if got, err := readPayload(b.tb, id); err != nil || !bytes.Equal(got, payloadFor(id, n)) {
			t.Fatalf("%s: %v", id, err)
		}
	}
}

func TestBoundedPassLeftoversAndOversizedGeneration(t *testing.T) {
	forStores(t, testBoundedPassLeftoversAndOversizedGeneration, false)
}

func testBoundedPassLeftoversAndOversizedGeneration(t *testing.T, sc storeCase) {
	store := sc.open(t)
	cfg := testConfig("s0")
	cfg.InlineMax = 64 << 10
	e := newEnv(t, store, cfg)
	acked := map[string]int{}
	// Three generations of ~40 KiB each.
	for g := 0; g < 3; g++ {
		for i := 0; i < 4; i++ {
			id := fmt.Sprintf("g%d-%d", g, i)
			e.put(id, 10<<10)
			acked[id] = 10 << 10
		}
		if err := e.tb.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	// Each generation is about 57 KiB of segments: two fit the budget.
	res, err := e.tb.Merge(ctx, MergeOptions{MaxBytes: 150 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Merged) != 2 || !res.Leftover {
		t.Fatalf("bounded pass: %+v", res)
	}
	checkAll(t, e.tb, acked)
	res, err = e.tb.Merge(ctx, MergeOptions{MaxBytes: 150 << 10})
	if err != nil || len(res.Merged) != 1 || res.Leftover {
		t.Fatalf("second pass: %+v %v", res, err)
	}
	// One generation larger than the whole budget is merged whole, alone.
	for i := 0; i < 8; i++ {
		id := fmt.Sprintf("big-%d", i)
		e.put(id, 60<<10)
		acked[id] = 60 << 10
	}
	if err := e.tb.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	res, err = e.tb.Merge(ctx, MergeOptions{MaxBytes: 10 << 10})
	if err != nil || len(res.Merged) != 1 || res.Rows != 8 {
		t.Fatalf("oversized generation: %+v %v", res, err)
	}
	checkAll(t, e.tb, acked)
}

func TestOrphanSweepRespectsGrace(t *testing.T) { forStores(t, testOrphanSweepRespectsGrace, false) }

func testOrphanSweepRespectsGrace(t *testing.T, sc storeCase) {
	store := sc.open(t)
	e := newEnv(t, store, testConfig("s0"))
	e.hooks.Fail("write:after-payload", errCrash)
	_, _ = e.tb.Append(context.Background(), Record{ID: "x", RolloutID: "r"}, bytes.NewReader(payloadFor("x", 50<<10)), 50<<10)
	res, err := e.tb.Sweep(context.Background(), time.Hour)
	if err != nil || res.Payloads != 0 {
		t.Fatalf("young orphan swept: %+v %v", res, err)
	}
	res, err = e.tb.Sweep(context.Background(), 0)
	if err != nil || res.Payloads != 1 {
		t.Fatalf("old orphan kept: %+v %v", res, err)
	}
}

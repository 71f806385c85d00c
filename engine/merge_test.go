package engine

// A merge moves sealed generations into the next base version without
// losing, doubling or skipping a row (doc.go, step 6): a crash at any point
// converges on the next merge, appends go on during a merge, concurrent
// mergers (with or without the lease) commit each row once, a watermark
// never passes a generation, a bounded pass leaves the rest for the next,
// and one id on two shards is kept once.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

// A merge that crashes after writing its data, after its commit, or in
// the middle of its reclaim loses and doubles nothing; the next merge, in
// a fresh process, converges (no WAL left, every row in the base), and the
// sweep removes the crashed merge's orphan data files.
func TestMergeCrashPointsConverge(t *testing.T) { forStores(t, testMergeCrashPointsConverge, true) }

func testMergeCrashPointsConverge(t *testing.T, sc storeCase) {
	for _, point := range []string{hookMergeAfterData, hookMergeAfterCommit, hookMidReclaim} {
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

// Appends acknowledged, and a generation sealed, while a merge is held
// after writing its data are neither blocked nor lost: the generation
// stays pending for the next merge.
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
	gate := e.hooks.Pause(hookMergeAfterData)
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

// Four mergers without the lease, all held before their commit and
// released together, race on the commit: each row is in the base once.
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
	cfg := noMergerLease(testConfig(""))
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

// Two mergers (no lease): M1 commits version 1 and stops at
// merge:after-commit; M2 commits version 2 and reclaims every merged
// generation; M1 then reclaims and collects from what is there. Nothing
// lost or doubled, and a third merge converges.
func TestTwoMergersOneStalledAfterCommit(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := newEnv(t, mem, testConfig("s0"))
	cfg := noMergerLease(testConfig(""))
	m1 := newEnv(t, mem, cfg)
	m2 := newEnv(t, mem, cfg)
	walRow(t, w, "a", 1000)
	walRow(t, w, "b", 20<<10)
	gate := m1.hooks.Pause(hookMergeAfterCommit)
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

// With the merger lease, a second merger is refused (ErrMergerBusy) while
// the first is held, and merges once it is released.
func TestMergerLeaseSingleton(t *testing.T) {
	clk := objstoretest.NewClock()
	store := memory.New(memory.WithClock(clk.Now))
	w := newEnv(t, store, leaseConfig("s0", clk))
	w.put("x", 10)
	if err := w.tb.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	m1 := newEnv(t, store, leaseConfig("", clk))
	m2 := newEnv(t, store, leaseConfig("", clk))
	gate := m1.hooks.Pause(hookMergeAfterData)
	done := make(chan error, 1)
	go func() {
		_, err := m1.tb.Merge(context.Background(), MergeOptions{})
		done <- err
	}()
	if err := gate.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.tb.Merge(context.Background(), MergeOptions{}); !errors.Is(err, ErrMergerBusy) {
		t.Fatalf("second merger: %v", err)
	}
	gate.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := m2.tb.Merge(context.Background(), MergeOptions{}); err != nil {
		t.Fatalf("merger after release: %v", err)
	}
	checkAll(t, m2.tb, map[string]int{"x": 10})
}

// A shard whose pod is gone keeps its generations mergeable: the merger
// takes the free shard lease and seals the open generation.
func TestMergerSealsAbandonedShard(t *testing.T) {
	clk := objstoretest.NewClock()
	store := memory.New(memory.WithClock(clk.Now))
	w := newEnv(t, store, leaseConfig("gone", clk))
	for _, id := range []string{"a", "b"} {
		if err := appendID(w.tb, id); err != nil {
			t.Fatal(err)
		}
	}
	w.hooks.Fail(hookLeaseRenew, errors.New("dead"), faulty.Always())
	m := newEnv(t, store, leaseConfig("", clk))
	if res, err := m.tb.Merge(context.Background(), MergeOptions{}); err != nil || res.Version != 0 {
		t.Fatalf("merged a live writer's open generation: %+v %v", res, err)
	}
	clk.Advance(3 * time.Hour) // lease expired, the head still past abandonedAfter(GenMaxAge)
	res, err := m.tb.Merge(context.Background(), MergeOptions{})
	if err != nil || res.Rows != 2 {
		t.Fatalf("abandoned shard not merged: %+v %v", res, err)
	}
	checkAll(t, m.tb, map[string]int{"a": 100, "b": 100})
}

// Two shards merge into one base; one id appended on both shards, both
// checked before either committed, is kept once (the copy readers saw).
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
	gates := []*hook.Gate{a.hooks.Pause(hookChecked), b.hooks.Pause(hookChecked)}
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

// A merge bounded by MaxBytes takes whole generations in order and
// reports the leftover; a generation larger than the whole budget is
// merged whole, alone.
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

// A merge plans each shard from its watermark + 1 on, without a gap: a
// generation whose seal record is missing stops the merge instead of
// letting the watermark pass over it.
func TestMergeNeverSkipsAGeneration(t *testing.T) {
	store := memory.New()
	e := newEnv(t, store, testConfig("s0"))
	walRow(t, e, "g1", 10)
	walRow(t, e, "g2", 10)
	walRow(t, e, "g3", 10)
	ctx := context.Background()
	if err := store.Delete(ctx, e.tb.keys.Seal("s0", 2)); err != nil {
		t.Fatal(err)
	}
	e.db.seals.Purge()
	res, err := e.tb.Merge(ctx, MergeOptions{})
	if err == nil {
		t.Fatalf("merge over a generation without its seal record: %+v", res)
	}
	latest, _ := e.tb.latestVersion(ctx, 0)
	if latest != 0 {
		m, _ := e.tb.loadManifest(ctx, latest)
		if m.watermark("s0") >= 2 {
			t.Fatalf("the watermark passed generation 2: %+v", m.Watermarks)
		}
	}
}

package engine

// The row layout a head carries (doc.go, step 3) always describes the
// segment that head counts: a reader seeded from a head never sees an
// uncounted row or a stale layout, across a drop and re-create under one
// reader, a zombie paused at its swap, a lost swap answer, the size bound
// on a head's metadata, and a merger sealing the shard.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

// Drop and re-create under one reader DB: the reader's layouts cache holds
// the head-seeded layout of the old incarnation's (s0, 1, 1); the new
// incarnation writes a different row set at the same relative key.
func TestHeadLayoutAcrossDropAndRecreate(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := newEnv(t, mem, testConfig("s0"))
	r := newEnv(t, mem, testConfig(""))
	w.put("x", 1000)
	r.mustRead("x", 1000)
	if err := w.db.DropTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	_ = w.db.Close(ctx)
	w2 := newEnv(t, mem, testConfig("s0"))
	w2.put("x", 2000)
	w2.put("y", 500)
	tb, err := r.db.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	r.tb = tb
	r.mustRead("x", 2000)
	r.mustRead("y", 500)
}

// A zombie paused at its head swap (segment landed, swap pending) while a
// reader probes; B takes the shard. The zombie's row never shows.
func TestHeadLayoutZombiePausedAtItsSwap(t *testing.T) {
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	a := ownerWithA1(t, mem, clk)
	reader := newEnv(t, mem, leaseConfig("", clk))
	if _, err := reader.tb.Get(context.Background(), "a1", ReadOptions{}); err != nil {
		t.Fatal(err)
	}
	gate := a.hooks.Pause(hookHeadCAS)
	late := await(func() error { return appendID(a.tb, "a2") })
	if err := gate.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.tb.Get(context.Background(), "a2", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a2 before swap: %v", err)
	}
	b := takeOver(t, mem, clk)
	gate.Release()
	if err := <-late; !errors.Is(err, ErrFenced) {
		t.Fatalf("zombie: %v", err)
	}
	if _, err := reader.tb.Get(context.Background(), "a2", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("zombie's row visible: %v", err)
	}
	b.merge()
	checkAll(t, reader.tb, map[string]int{"a1": 100, "b1": 100})
	if _, err := reader.tb.Get(context.Background(), "a2", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("zombie's row visible after merge: %v", err)
	}
}

// The head swap's response is lost; a reader probes between the landing
// and the retry, seeds the cache from the head, then the writer continues.
func TestHeadLayoutLostSwapAnswer(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w, fb := faultyEnv(t, mem, testConfig("s0"))
	r := newEnv(t, mem, testConfig(""))
	w.put("a", 100)
	r.mustRead("a", 100)
	fb.LoseResponse(faulty.OpPut, faulty.KeyContains("_head.json"), errors.New("connection reset"))
	w.put("b", 300)
	r.mustRead("b", 300)
	w.put("c", 5000)
	r.mustRead("c", 5000)
	_ = w.tb.Flush(ctx)
	w.merge()
	checkAll(t, r.tb, map[string]int{"a": 100, "b": 300, "c": 5000})
}

// Layouts around the 4 KiB bound, on every backend: a fresh reader sees
// every row of a segment whose layout is just under / over the bound.
func TestHeadLayoutSizeBoundary(t *testing.T) {
	forStores(t, func(t *testing.T, sc storeCase) {
		store := sc.open(t)
		w := newEnv(t, store, testConfig("s0"))
		want := map[string]int{}
		carried := map[bool]int{}
		for n := 1; n <= 70; n += 3 {
			var items []BatchItem
			for i := 0; i < n; i++ {
				id := fmt.Sprintf("n%02d-row-%03d-%s", n, i, string(bytes.Repeat([]byte("z"), i%7)))
				items = append(items, BatchItem{Record: Record{ID: id, RolloutID: "r"}, Payload: payloadFor(id, 50+i)})
				want[id] = 50 + i
			}
			if _, err := w.tb.AppendBatch(context.Background(), items); err != nil {
				t.Fatal(err)
			}
			a, err := store.Head(context.Background(), w.tb.keys.Head("s0"))
			if err != nil {
				t.Fatal(err)
			}
			carried[a.Metadata["layout"] != ""]++
			r := newEnv(t, store, testConfig(""))
			checkAll(t, r.tb, want)
			_ = r.db.Close(context.Background())
		}
		if carried[true] == 0 || carried[false] == 0 {
			t.Fatalf("boundary not straddled: %v", carried)
		}
	}, false)
}

// The merger seals an abandoned shard while its writer is paused at the
// head swap with the segment landed; a sweep runs meanwhile. The row of
// the uncounted segment never shows; everything acknowledged does.
func TestHeadLayoutMergerSealsWhileWriterPausedAtSwap(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	cfg := leaseConfig("s0", clk)
	cfg.GenMaxAge = time.Minute
	a := newEnv(t, mem, cfg)
	if err := appendID(a.tb, "a1"); err != nil {
		t.Fatal(err)
	}
	gate := a.hooks.Pause(hookHeadCAS)
	late := await(func() error { return appendID(a.tb, "a2") })
	if err := gate.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(3 * time.Minute) // past abandonedAfter(GenMaxAge)
	mcfg := leaseConfig("", clk)
	mcfg.GenMaxAge = time.Minute
	m := newEnv(t, mem, mcfg)
	if _, err := m.tb.Sweep(ctx, 0); err != nil {
		t.Logf("sweep: %v", err)
	}
	if _, err := m.tb.Merge(ctx, MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	gate.Release()
	if err := <-late; err == nil {
		t.Fatalf("zombie acknowledged after the merger sealed")
	}
	if _, err := m.tb.Sweep(ctx, 0); err != nil {
		t.Logf("sweep: %v", err)
	}
	r := newEnv(t, mem, leaseConfig("", clk))
	checkAll(t, r.tb, map[string]int{"a1": 100})
	for _, tb := range []*Table{r.tb, m.tb} {
		if _, err := tb.Get(ctx, "a2", ReadOptions{}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("uncounted row visible: %v", err)
		}
	}
}

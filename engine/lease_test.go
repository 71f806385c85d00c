package engine

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

func leaseConfig(shard string, clk *objstoretest.Clock) Config {
	cfg := testConfig(shard)
	cfg.LeaseDuration = 15 * time.Second
	cfg.Runtime = sched.WithClock(clk.Now)
	return cfg
}

func appendID(tb *Table, id string) error {
	_, err := tb.Append(context.Background(), Record{ID: id, RolloutID: "r"}, bytes.NewReader(payloadFor(id, 100)), 100)
	return err
}

func TestShardLeaseExclusive(t *testing.T) {
	clk := objstoretest.NewClock()
	store := memory.New(memory.WithClock(clk.Now))
	a := newEnv(t, store, leaseConfig("s0", clk))
	b := newEnv(t, store, leaseConfig("s0", clk))
	if err := appendID(a.tb, "a1"); err != nil {
		t.Fatal(err)
	}
	if err := appendID(b.tb, "b1"); !errors.Is(err, ErrShardOwned) {
		t.Fatalf("second owner of a live shard: %v", err)
	}
	if err := a.db.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := appendID(b.tb, "b1"); err != nil {
		t.Fatalf("after the owner released the shard: %v", err)
	}
	b.mustRead("a1", 100)
}

// A writer cut off past its lease (renewals and release fail, as in a
// partition or a long pause) is not what keeps data right: until another
// writer takes the shard, its appends are committed and acknowledged as
// ever. Once the new owner has sealed its generation (moving the head),
// the cut-off writer can acknowledge nothing more, and what it tries is
// never visible.
func TestWriterPausedPastLeaseIsFenced(t *testing.T) {
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	fb := faulty.New(mem)
	a := newEnv(t, fb, leaseConfig("s0", clk))
	if err := appendID(a.tb, "a1"); err != nil {
		t.Fatal(err)
	}
	partitioned := errors.New("partitioned")
	fb.Fail(faulty.OpRenewLease, faulty.AnyKey, partitioned, faulty.Always())
	fb.Fail(faulty.OpReleaseLease, faulty.AnyKey, partitioned, faulty.Always())
	fb.Fail(faulty.OpAcquireLease, faulty.AnyKey, partitioned, faulty.Always())
	clk.Advance(12 * time.Second) // its lease is about to expire
	if err := appendID(a.tb, "a2"); err != nil {
		t.Fatalf("append before anyone took the shard: %v", err)
	}
	b := newEnv(t, mem, leaseConfig("s0", clk))
	if err := appendID(b.tb, "b1"); !errors.Is(err, ErrShardOwned) {
		t.Fatalf("took the shard before the lease expired: %v", err)
	}
	clk.Advance(4 * time.Second) // the service-side lease has expired
	if err := appendID(b.tb, "b1"); err != nil {
		t.Fatal(err)
	}
	if err := appendID(a.tb, "a3"); !errors.Is(err, ErrFenced) {
		t.Fatalf("the cut-off writer after the takeover: %v", err)
	}
	fb.Reset() // the partition heals: a's next writer finds the shard owned
	if err := appendID(a.tb, "a3"); !errors.Is(err, ErrShardOwned) {
		t.Fatalf("after the partition: %v", err)
	}
	b.merge()
	checkAll(t, b.tb, map[string]int{"a1": 100, "a2": 100, "b1": 100})
}

// A store error the writer cannot get past stops it, but not the shard:
// the next append starts a new writer that seals what the old one left.
func TestWriterRecoversFromTransientSealFailure(t *testing.T) {
	clk := objstoretest.NewClock()
	fb := faulty.New(memory.New(memory.WithClock(clk.Now)))
	e := newEnv(t, fb, leaseConfig("s0", clk))
	if err := appendID(e.tb, "a"); err != nil {
		t.Fatal(err)
	}
	// Every attempt of the seal record fails, so the flush does.
	fb.Fail(faulty.OpPut, faulty.KeyContains("_sealed"), objstore.ErrThrottled, faulty.Times(4))
	if err := e.tb.Flush(context.Background()); !errors.Is(err, objstore.ErrThrottled) {
		t.Fatalf("flush: %v", err)
	}
	if err := appendID(e.tb, "b"); err != nil {
		t.Fatalf("append after a transient seal failure: %v", err)
	}
	e.merge()
	checkAll(t, e.tb, map[string]int{"a": 100, "b": 100})
}

// A segment put that was in flight when the writer lost its shard lands
// after the new owner sealed the generation: it is not acknowledged, and
// its rows never become visible.
func TestLateSegmentOfFencedWriterIsNeverCommitted(t *testing.T) {
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	fb := faulty.New(mem)
	a := newEnv(t, fb, leaseConfig("s0", clk))
	if err := appendID(a.tb, "a1"); err != nil {
		t.Fatal(err)
	}
	gate := fb.Pause(faulty.OpPut, faulty.Before, faulty.KeyContains("/wal/"))
	late := make(chan error, 1)
	go func() { late <- appendID(a.tb, "a2") }()
	if err := gate.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(16 * time.Second)
	b := newEnv(t, mem, leaseConfig("s0", clk))
	if err := appendID(b.tb, "b1"); err != nil { // takes over, seals a's generation
		t.Fatal(err)
	}
	gate.Release()
	if err := <-late; !errors.Is(err, ErrFenced) {
		t.Fatalf("late write acknowledged: %v", err)
	}
	if _, err := b.tb.Get(context.Background(), "a2", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("late write visible: %v", err)
	}
	b.merge()
	checkAll(t, b.tb, map[string]int{"a1": 100, "b1": 100})
	res, err := b.tb.Sweep(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Segments != 0 && res.Segments != 1 {
		t.Fatalf("sweep: %+v", res)
	}
	if strays := b.walKeys(); len(strays) != 0 {
		t.Fatalf("WAL objects left: %v", strays)
	}
}

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
	gate := m1.hooks.Pause("merge:after-data")
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
	w.hooks.Fail("lease:renew", errors.New("dead"), faulty.Always())
	m := newEnv(t, store, leaseConfig("", clk))
	if res, err := m.tb.Merge(context.Background(), MergeOptions{}); err != nil || res.Version != 0 {
		t.Fatalf("merged a live writer's open generation: %+v %v", res, err)
	}
	clk.Advance(2 * time.Hour) // lease expired, generation older than GenMaxAge
	res, err := m.tb.Merge(context.Background(), MergeOptions{})
	if err != nil || res.Rows != 2 {
		t.Fatalf("abandoned shard not merged: %+v %v", res, err)
	}
	checkAll(t, m.tb, map[string]int{"a": 100, "b": 100})
}

// A segment that landed just before its writer lost the shard is part of
// its generation exactly when a head swap counted it, and the writer's
// answer follows the head: refused (and never visible) if the new owner
// sealed the generation first, acknowledged if nobody moved the head.
func TestLandedSegmentAnswerFollowsTheHead(t *testing.T) {
	for _, takeover := range []bool{true, false} {
		t.Run(map[bool]string{true: "new owner sealed first", false: "nobody took the shard"}[takeover], func(t *testing.T) {
			clk := objstoretest.NewClock()
			mem := memory.New(memory.WithClock(clk.Now))
			fb := faulty.New(mem)
			a := newEnv(t, fb, leaseConfig("s0", clk))
			if err := appendID(a.tb, "a1"); err != nil {
				t.Fatal(err)
			}
			gate := fb.Pause(faulty.OpPut, faulty.After, faulty.KeyContains(".arrow"))
			late := make(chan error, 1)
			go func() { late <- appendID(a.tb, "a2") }()
			if err := gate.Wait(waitCtx(t)); err != nil { // landed; the head not swapped yet
				t.Fatal(err)
			}
			var b *env
			if takeover {
				clk.Advance(16 * time.Second)
				b = newEnv(t, mem, leaseConfig("s0", clk))
				if err := appendID(b.tb, "b1"); err != nil { // seals a's generation at one segment
					t.Fatal(err)
				}
			} else {
				clk.Advance(12 * time.Second) // lapsing, not expired
			}
			gate.Release()
			err := <-late
			want := map[string]int{"a1": 100}
			if takeover {
				if !errors.Is(err, ErrFenced) {
					t.Fatalf("a segment the head never counted was acknowledged: %v", err)
				}
				want["b1"] = 100
			} else {
				if err != nil {
					t.Fatalf("a committed segment was refused: %v", err)
				}
				want["a2"] = 100
			}
			r := newEnv(t, mem, leaseConfig("", clk))
			if _, err := r.tb.Get(context.Background(), "a2", ReadOptions{}); takeover != errors.Is(err, ErrNotFound) {
				t.Fatalf("visibility of a2: %v", err)
			}
			clk.Advance(time.Hour) // leave no live lease behind for the merge's seal
			if err := a.db.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if b != nil {
				if err := b.db.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := r.tb.Merge(context.Background(), MergeOptions{}); err != nil {
				t.Fatal(err)
			}
			checkAll(t, r.tb, want)
		})
	}
}

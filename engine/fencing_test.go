package engine

// A shard has one writer at a time and a generation exactly one, fixed by
// the head swap that claimed it (doc.go, steps 2 and 3). The lease keeps
// live writers apart, but correctness rests on the head: a writer that
// lost the shard (a zombie) acknowledges nothing more, and a segment it
// writes is part of its generation exactly when a head swap counted it, so
// an uncounted segment is never read.

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

// Two live processes never write one shard: the second is refused
// (ErrShardOwned) until the owner releases the shard, then takes it.
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
	a := ownerWithA1(t, fb, clk)
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

// A zombie's segment put, in flight when its writer lost the shard, lands
// after the new owner sealed the generation (not yet merged): it is not
// acknowledged, its row never becomes visible, and once the generation is
// merged and reclaimed the sweep leaves no WAL object behind.
func TestZombieSegmentLandsInSealedGeneration(t *testing.T) {
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	fb := faulty.New(mem)
	a := ownerWithA1(t, fb, clk)
	gate := fb.Pause(faulty.OpPut, faulty.Before, faulty.KeyContains("/wal/"))
	late := make(chan error, 1)
	go func() { late <- appendID(a.tb, "a2") }()
	if err := gate.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	b := takeOver(t, mem, clk) // takes over, seals a's generation
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

// A zombie's segment put lands after its generation was sealed by the new
// owner, merged and reclaimed: the key is free again, so the put succeeds,
// but no head ever counts it. The zombie is not acknowledged and the row is
// never visible.
func TestZombieSegmentLandsInReclaimedGeneration(t *testing.T) {
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	fb := faulty.New(mem)
	a := ownerWithA1(t, fb, clk)
	inFlight := fb.Pause(faulty.OpPut, faulty.Before, faulty.KeyContains(".arrow"))
	late := await(func() error { return appendID(a.tb, "a2") })
	mustWait(t, inFlight)
	b := takeOver(t, mem, clk) // takes the shard: seals a's generation as {a1}
	res := b.merge()           // merges and (grace 0) reclaims that generation
	if len(res.Reclaimed) == 0 {
		t.Fatalf("nothing reclaimed: %+v", res)
	}
	inFlight.Release() // the zombie's put lands in the reclaimed generation
	if err := <-late; !errors.Is(err, ErrFenced) {
		t.Fatalf("the zombie's late append: %v, want ErrFenced", err)
	}
	b.merge()
	checkAll(t, b.tb, map[string]int{"a1": 100, "b1": 100})
	checkAll(t, newEnv(t, mem, leaseConfig("", clk)).tb, map[string]int{"a1": 100, "b1": 100})
}

// A zombie's segment lands (its head swap not yet sent) while the new
// owner takes the shard: the row is visible exactly when a head swap
// counted it. The zombie's swap loses to the new owner's seal: the zombie
// is refused, the row is never visible (so no identical retry is answered
// from it), and a retry on another shard, made while the uncounted segment
// is in the store, writes it anew.
func TestZombieSegmentNeverCountedRetryElsewhereWritesAnew(t *testing.T) {
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	fb := faulty.New(mem)
	a := ownerWithA1(t, fb, clk)
	landed := a.hooks.Pause(hookAfterSegment) // a2's segment is in the store, uncounted
	late := await(func() error { return appendID(a.tb, "a2") })
	if err := landed.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	b := takeOver(t, mem, clk) // seals a's generation at one segment
	reader := newEnv(t, mem, leaseConfig("", clk))
	if _, err := reader.tb.Get(context.Background(), "a2", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an uncounted segment's row is visible: %v", err)
	}
	other := newEnv(t, mem, leaseConfig("s1", clk))
	res, err := other.tb.Append(context.Background(), Record{ID: "a2", RolloutID: "r"}, bytes.NewReader(payloadFor("a2", 100)), 100)
	if err != nil || !res.Created {
		t.Fatalf("retry on another shard: %+v %v", res, err)
	}
	landed.Release()
	if err := <-late; !errors.Is(err, ErrFenced) {
		t.Fatalf("the zombie's append: %v, want ErrFenced", err)
	}
	_ = other.tb.Flush(context.Background())
	b.merge()
	checkAll(t, reader.tb, map[string]int{"a1": 100, "a2": 100, "b1": 100})
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
			a := ownerWithA1(t, fb, clk)
			gate := fb.Pause(faulty.OpPut, faulty.After, faulty.KeyContains(".arrow"))
			late := make(chan error, 1)
			go func() { late <- appendID(a.tb, "a2") }()
			if err := gate.Wait(waitCtx(t)); err != nil { // landed; the head not swapped yet
				t.Fatal(err)
			}
			var b *env
			if takeover {
				b = takeOver(t, mem, clk) // seals a's generation at one segment
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

// The new owner never shares the zombie's generation: it seals the
// zombie's generation and claims the next, so a segment of each lands in
// its own generation and each writer's answer follows its own head swap.
func TestNewOwnerTakesTheNextGeneration(t *testing.T) {
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	fa := faulty.New(mem)
	a := ownerWithA1(t, fa, clk)
	aPut := fa.Pause(faulty.OpPut, faulty.Before, faulty.KeyContains(".arrow"))
	aLate := await(func() error { return appendID(a.tb, "a2") })
	mustWait(t, aPut)
	clk.Advance(16 * time.Second)
	fb := faulty.New(mem)
	b := newEnv(t, fb, leaseConfig("s0", clk))
	bPut := fb.Pause(faulty.OpPut, faulty.Before, faulty.KeyContains(".arrow"))
	bLate := await(func() error { return appendID(b.tb, "b1") })
	mustWait(t, bPut)
	aPut.Release() // a's segment lands in its own generation, after b sealed it
	if err := <-aLate; !errors.Is(err, ErrFenced) {
		t.Fatalf("the zombie: %v, want ErrFenced", err)
	}
	bPut.Release()
	if err := <-bLate; err != nil {
		t.Fatalf("the new owner: %v", err)
	}
	h, err := readHead(context.Background(), b.db, b.tb.keys, "s0")
	if err != nil || h.Gen != 2 || h.Segs != 1 || h.Owner == "" {
		t.Fatalf("head after the takeover: %+v %v", h, err)
	}
	b.merge()
	checkAll(t, newEnv(t, mem, leaseConfig("", clk)).tb, map[string]int{"a1": 100, "b1": 100})
}

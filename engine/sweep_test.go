package engine

// The orphan sweep deletes only what nothing references and is older than
// OrphanGrace (doc.go, "Orphans"): orphans of crashed appends go, while a
// payload that a merge in another process has just moved into the base
// stays, and a commit whose payload a sweep may already take is refused
// rather than counted.

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

// An orphan payload (its append crashed after the upload) younger than
// the grace stays; an older one is swept.
func TestOrphanSweepRespectsGrace(t *testing.T) { forStores(t, testOrphanSweepRespectsGrace, false) }

// An append that crashes after its payload upload, or before its segment
// put, is not acknowledged and leaves nothing visible; its payload is an
// orphan the sweep removes, and the client's retry succeeds.
func TestWriteCrashPoints(t *testing.T) { forStores(t, testWriteCrashPoints, true) }

func testWriteCrashPoints(t *testing.T, sc storeCase) {
	for _, point := range []string{hookAfterPayload, hookBeforeSegment} {
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
			if point == hookAfterPayload && res.Payloads != 1 {
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

func testOrphanSweepRespectsGrace(t *testing.T, sc storeCase) {
	store := sc.open(t)
	e := newEnv(t, store, testConfig("s0"))
	e.hooks.Fail(hookAfterPayload, errCrash)
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

// A sweep in one process, held after its first listing, does not take a
// payload that a merge in another process has meanwhile moved from the WAL
// into a new base version.
func TestSweepDoesNotRaceForeignMerge(t *testing.T) {
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	fb := faulty.New(mem)
	cfg := testConfig("s0")
	cfg.Runtime, cfg.LeaseDuration = sched.WithClock(clk.Now), -1 // no leases: the ordering alone must hold
	w := newEnv(t, mem, cfg)
	size := 20 << 10
	if err := appendSized(w.tb, "x", size); err != nil {
		t.Fatal(err)
	}
	if err := w.tb.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Hour) // the payload is older than any grace
	sweeper := newEnv(t, fb, cfg)
	// Hold the sweep after its first listing; merge and reclaim meanwhile.
	gate := fb.Pause(faulty.OpList, faulty.After, faulty.AnyKey)
	done := make(chan error, 1)
	go func() {
		_, err := sweeper.tb.Sweep(context.Background(), time.Hour)
		done <- err
	}()
	if err := gate.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	merger := newEnv(t, mem, cfg)
	if res, err := merger.tb.Merge(context.Background(), MergeOptions{}); err != nil || len(res.Reclaimed) != 1 {
		t.Fatalf("merge: %+v %v", res, err)
	}
	gate.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	merger.mustRead("x", size)
}

// The orphan sweep runs while a writer's segment put is in flight, its
// external payload uploaded long enough ago that a later sweep could take
// it: the writer refuses the commit (ErrTooSlow) rather than count a row
// whose payload may be swept, the refused row never becomes visible, the
// sweeps never delete anything a head counts, and a retry writes it anew.
func TestSweepAgainstSegmentPutInFlight(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	a, fa := faultyEnv(t, mem, leaseConfig("s0", clk))
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

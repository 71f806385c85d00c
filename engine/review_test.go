package engine

// Regressions for defects found in review: each failed before its fix.

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

// A segment put that landed but reported failure leaves the append's
// outcome unknown: its external payload must survive for the retry that
// finds the landed row.
func TestUnknownOutcomeKeepsExternalPayload(t *testing.T) {
	fb := faulty.New(memory.New())
	e := newEnv(t, fb, testConfig("s0"))
	size := 20 << 10 // external
	e.put("warm", 1)
	// The head swap lands but its answer is lost, and the writer cannot
	// look: the outcome is unknown.
	e.hooks.Do("head:cas", func(context.Context) error {
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

// A caller that gives up while its rows are queued does not take their
// payload with it: the rows are still committed.
func TestCancelledQueuedAppendKeepsPayload(t *testing.T) {
	fb := faulty.New(memory.New())
	e := newEnv(t, fb, testConfig("s0"))
	size := 20 << 10
	e.put("warm", 1)
	gate := fb.Pause(faulty.OpPut, faulty.Before, faulty.KeyContains(".arrow"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := e.tb.Append(ctx, Record{ID: "x", RolloutID: "r"}, bytes.NewReader(payloadFor("x", size)), int64(size))
		done <- err
	}()
	if err := gate.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled append: %v", err)
	}
	gate.Release()
	if err := e.tb.Flush(context.Background()); err != nil { // the queued rows commit
		t.Fatal(err)
	}
	e.mustRead("x", size)
}

// A sweep in one process must not take a payload that a merge in another
// process has just moved from the WAL into a new base version.
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

// A table dropped and created again reuses WAL keys; another process must
// neither serve the old incarnation's cached rows nor miss the new ones.
func TestRecreatedTableNotServedFromStaleCache(t *testing.T) {
	store := memory.New()
	w := newEnv(t, store, testConfig("s0"))
	r := newEnv(t, store, testConfig(""))
	w.put("x", 10)
	r.mustRead("x", 10) // r caches the layout of t/wal/s0/…1/…0.arrow
	ctx := context.Background()
	if err := w.db.DropTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := w.db.CreateTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	w2tb, err := w.db.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
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

func appendSized(tb *Table, id string, size int) error {
	_, err := tb.Append(context.Background(), Record{ID: id, RolloutID: "r"}, bytes.NewReader(payloadFor(id, size)), int64(size))
	return err
}

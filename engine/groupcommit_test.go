package engine

// Appends that queue behind a commit are checked and written together
// (doc.go, step 3): one check, one segment and one head swap for the group,
// with each append answered on its own; a caller that gives up while its
// rows are queued does not take their payload with it.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
)

// Appends that queue behind a commit are checked together and written together: one existence check (at most one
// refresh), one segment and one head swap for all of them; an identical
// retry among them is answered without a second row, and a conflicting one
// is refused alone, having written nothing.
func TestGroupCommitSharesTheCheck(t *testing.T) {
	ctx := context.Background()
	fb := faulty.New(memory.New())
	w := newEnv(t, fb, testConfig("s0"))
	other := newEnv(t, fb, testConfig("s1"))
	for _, id := range []string{"elsewhere", "elsewhere-2"} { // another shard, acknowledged before
		if err := appendID(other.tb, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := appendID(w.tb, "first"); err != nil {
		t.Fatal(err)
	}

	// Hold the next commit before its segment, and queue the rest behind it.
	gate := w.hooks.Pause(hookBeforeSegment)
	held := await(func() error { return appendID(w.tb, "held") })
	mustWait(t, gate)
	const n = 12
	var results []chan error
	for i := range n {
		id := fmt.Sprintf("queued-%02d", i)
		results = append(results, await(func() error { return appendID(w.tb, id) }))
	}
	retry := await(func() error { return appendID(w.tb, "elsewhere") }) // identical to the other shard's row
	conflict := await(func() error {
		_, err := w.tb.Append(ctx, Record{ID: "elsewhere-2", RolloutID: "other"}, nil, 0)
		return err
	})
	waitQueued(t, w.tb, n+2)

	st := w.db.Stats()
	refreshes, segments := st.Refreshes.Load(), st.Segments.Load()
	heads := fb.CallsMatching(faulty.OpPut, faulty.KeyContains("_head.json"))
	gate.Release()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	for i, ch := range results {
		if err := <-ch; err != nil {
			t.Fatalf("queued-%02d: %v", i, err)
		}
	}
	if err := <-retry; err != nil {
		t.Fatalf("identical retry of another shard's row: %v", err)
	}
	if err := <-conflict; !errors.Is(err, ErrConflict) {
		t.Fatalf("conflicting append: %v, want ErrConflict", err)
	}
	// The held commit, then one commit for everything queued behind it.
	if d := st.Segments.Load() - segments; d != 2 {
		t.Errorf("%d segments for the held append and %d queued ones, want 2", d, n+2)
	}
	if d := fb.CallsMatching(faulty.OpPut, faulty.KeyContains("_head.json")) - heads; d != 2 {
		t.Errorf("%d head swaps, want 2", d)
	}
	if d := st.Refreshes.Load() - refreshes; d > 1 {
		t.Errorf("%d refreshes for one queued commit, want at most 1", d)
	}
	want := map[string]int{"first": 100, "held": 100, "elsewhere": 100, "elsewhere-2": 100}
	for i := range n {
		want[fmt.Sprintf("queued-%02d", i)] = 100
	}
	checkAll(t, newEnv(t, fb, testConfig("")).tb, want)
}

// waitQueued waits until n appends are queued on tb's writer.
func waitQueued(t *testing.T, tb *Table, n int) {
	t.Helper()
	ctx := waitCtx(t)
	for {
		q := 0
		for _, w := range tb.allWriters() {
			w.mu.Lock()
			q += len(w.queue)
			w.mu.Unlock()
		}
		if q >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d appends queued, want %d", q, n)
		case <-time.After(time.Millisecond):
		}
	}
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

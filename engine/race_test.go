package engine

// Deterministic regressions for the reads-versus-reclamation races of
// DESIGN.md ("The problem it solves"). Every interleaving is forced with a
// pause at a named point; nothing depends on sleeps or scheduling luck.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/faulty"
)

// baseServed counts reads served from a base, whether the process knew
// that base when the read began or learned of it during the read.
func baseServed(st *Stats) int64 { return st.ReadBaseHits.Load() + st.ReadLateBaseHits.Load() }

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type readResult struct {
	data []byte
	err  error
}

func goRead(tb *Table, id string) chan readResult {
	ch := make(chan readResult, 1)
	go func() {
		b, err := readPayload(tb, id)
		ch <- readResult{b, err}
	}()
	return ch
}

// mergeOther merges and reclaims through a second process on the same
// store, so the reader's process learns nothing but what it reads.
func mergeOther(t *testing.T, store objstore.Bucket) MergeResult {
	t.Helper()
	other := newEnv(t, store, testConfig(""))
	res, err := other.tb.Merge(context.Background(), MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Reclaimed) == 0 {
		t.Fatalf("merge reclaimed nothing: %+v", res)
	}
	return res
}

// walRow writes id (inline and external sizes alike) into a sealed
// generation that is pending, not merged.
func walRow(t *testing.T, e *env, id string, size int) {
	e.put(id, size)
	if err := e.tb.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestReadPausedAtLocatedSurvivesReclaim(t *testing.T) {
	forStores(t, testReadPausedAtLocatedSurvivesReclaim, true)
}

func testReadPausedAtLocatedSurvivesReclaim(t *testing.T, sc storeCase) {
	for _, size := range []int{1000, 20 << 10} { // inline, external
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			store := sc.open(t)
			e := newEnv(t, store, testConfig("s0"))
			walRow(t, e, "x", size)
			gate := e.hooks.Pause("read:located")
			ch := goRead(e.tb, "x")
			if err := gate.Wait(waitCtx(t)); err != nil {
				t.Fatal(err)
			}
			mergeOther(t, store) // commits v1 and deletes the generation the read found x in
			gate.Release()
			r := <-ch
			if r.err != nil || !bytes.Equal(r.data, payloadFor("x", size)) {
				t.Fatalf("read after reclaim: %v (%d bytes)", r.err, len(r.data))
			}
			// An inline payload lived in the reclaimed segment: one retry,
			// served by the base. An external payload's object outlives its
			// generation (the base re-references it): served as located.
			st := e.db.Stats()
			wantRetries, wantBase := int64(1), int64(1)
			if int64(size) > e.db.cfg.InlineMax {
				wantRetries, wantBase = 0, 0
			}
			if st.ReadRetries.Load() != wantRetries || baseServed(st) != wantBase {
				t.Fatalf("retries=%d base hits=%d, want %d and %d", st.ReadRetries.Load(), baseServed(st), wantRetries, wantBase)
			}
		})
	}
}

func TestReadPausedBetweenRowAndPayloadSurvivesReclaim(t *testing.T) {
	forStores(t, testReadPausedBetweenRowAndPayloadSurvivesReclaim, true)
}

func testReadPausedBetweenRowAndPayloadSurvivesReclaim(t *testing.T, sc storeCase) {
	for _, size := range []int{1000, 20 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			store := sc.open(t)
			e := newEnv(t, store, testConfig("s0"))
			walRow(t, e, "x", size)
			gate := e.hooks.Pause("read:row-read") // metadata read from the WAL; payload not yet opened
			ch := goRead(e.tb, "x")
			if err := gate.Wait(waitCtx(t)); err != nil {
				t.Fatal(err)
			}
			mergeOther(t, store)
			gate.Release()
			r := <-ch
			if r.err != nil || !bytes.Equal(r.data, payloadFor("x", size)) {
				t.Fatalf("read: %v", r.err)
			}
			// Inline payloads live in the reclaimed segment: one retry.
			// External payload objects are re-referenced by the base, not
			// deleted by reclamation: no retry needed.
			want := int64(1)
			if int64(size) > e.db.cfg.InlineMax {
				want = 0
			}
			if got := e.db.Stats().ReadRetries.Load(); got != want {
				t.Fatalf("retries = %d, want %d", got, want)
			}
		})
	}
}

// The payload body was opened from the WAL, then the generation was
// reclaimed and the body's resumed read got 404: the read continues from the
// base at the same offset.
func TestReadLosesBodyMidStreamResumesFromBase(t *testing.T) {
	forStores(t, testReadLosesBodyMidStreamResumesFromBase, true)
}

func testReadLosesBodyMidStreamResumesFromBase(t *testing.T, sc storeCase) {
	for _, size := range []int{3000, 200 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			mem := sc.open(t)
			fb := faulty.New(mem)
			e := newEnv(t, fb, testConfig("s0"))
			walRow(t, e, "x", size)
			opened := e.hooks.Pause("read:payload-opened")
			// After 1000 bytes the open body fails the way a resumed Azure read
			// of a deleted blob does.
			walOrPayload := faulty.KeyFunc(func(k string) bool { return !bytes.Contains([]byte(k), []byte("/base/")) })
			// The row's location says all a payload read needs: its first
			// ranged read is the payload.
			fb.FailRead(faulty.OpGetRange, walOrPayload, 1000, objstore.ErrNotFound)
			ch := goRead(e.tb, "x")
			if err := opened.Wait(waitCtx(t)); err != nil {
				t.Fatal(err)
			}
			mergeOther(t, mem)
			opened.Release()
			r := <-ch
			if r.err != nil || !bytes.Equal(r.data, payloadFor("x", size)) {
				t.Fatalf("read: %v (%d bytes)", r.err, len(r.data))
			}
			if got := baseServed(e.db.Stats()); got != 1 {
				t.Fatalf("resumed read was not served by the base (base hits %d)", got)
			}
		})
	}
}

// Another process merged and reclaimed before this read began; this
// process's resident snapshot still lists the generation.
func TestStaleResidentSnapshotAfterRemoteReclaim(t *testing.T) {
	forStores(t, testStaleResidentSnapshotAfterRemoteReclaim, true)
}

func testStaleResidentSnapshotAfterRemoteReclaim(t *testing.T, sc storeCase) {
	store := sc.open(t)
	e := newEnv(t, store, testConfig("s0"))
	walRow(t, e, "x", 5000)
	e.mustRead("x", 5000) // resident snapshot now lists the pending generation
	mergeOther(t, store)
	e.mustRead("x", 5000)
	if st := e.db.Stats(); st.ReadMissingFile.Load() != 0 {
		t.Fatal("missing file counted")
	}
	// And a base data file collected under a stale resident snapshot.
	reader := newEnv(t, store, testConfig(""))
	reader.mustRead("x", 5000) // reader's resident snapshot: v1
	for i := 0; i < 3; i++ {   // RetainVersions=2 with compaction collects v1's file
		walRow(t, e, fmt.Sprintf("y%d", i), 10)
		cfgMerge(t, e, 2)
	}
	reader.mustRead("x", 5000)
}

func cfgMerge(t *testing.T, e *env, compactMax int) {
	t.Helper()
	e.tb.db.cfg.CompactMaxFiles = compactMax
	e.merge()
}

// The row was flushed before the read; the merge commits and reclaims its
// generation between the refresh's base check and its WAL listing. The
// final check of the latest base finds it: not a false absent.
func TestMergedBetweenBaseCheckAndWALListing(t *testing.T) {
	forStores(t, testMergedBetweenBaseCheckAndWALListing, true)
}

func testMergedBetweenBaseCheckAndWALListing(t *testing.T, sc storeCase) {
	store := sc.open(t)
	e := newEnv(t, store, testConfig("s0"))
	walRow(t, e, "x", 100)
	gate := e.hooks.Pause("refresh:after-base")
	ch := goRead(e.tb, "x")
	if err := gate.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	mergeOther(t, store)
	gate.Release()
	r := <-ch
	if r.err != nil || !bytes.Equal(r.data, payloadFor("x", 100)) {
		t.Fatalf("false absent or error: %v", r.err)
	}
	if got := e.db.Stats().ReadLateBaseHits.Load(); got != 1 {
		t.Fatalf("late base hits = %d, want 1", got)
	}
}

// The refresh listed the generation and probed the base before the merge;
// the merge then commits and reclaims the generation before the refresh
// loads its seal record. The refresh starts over instead of failing the
// read (found by the benchmark under load).
func TestGenerationReclaimedWhileRefreshLoadsIt(t *testing.T) {
	forStores(t, testGenerationReclaimedWhileRefreshLoadsIt, true)
}

func testGenerationReclaimedWhileRefreshLoadsIt(t *testing.T, sc storeCase) {
	store := sc.open(t)
	e := newEnv(t, store, testConfig("s0"))
	walRow(t, e, "x", 100)
	reader := newEnv(t, store, testConfig("")) // nothing cached: must load the seal
	gate := reader.hooks.Pause("refresh:after-base")
	ch := goRead(reader.tb, "x")
	if err := gate.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	mergeOther(t, store)
	gate.Release()
	r := <-ch
	if r.err != nil || !bytes.Equal(r.data, payloadFor("x", 100)) {
		t.Fatalf("read: %v", r.err)
	}
	st := reader.db.Stats()
	if st.RefreshRetries.Load() != 1 || st.ReadMissingFile.Load() != 0 {
		t.Fatalf("refresh retries %d, missing files %d", st.RefreshRetries.Load(), st.ReadMissingFile.Load())
	}
}

func TestMissingForGoodIsBoundedError(t *testing.T) {
	forStores(t, testMissingForGoodIsBoundedError, true)
}

func testMissingForGoodIsBoundedError(t *testing.T, sc storeCase) {
	mem := sc.open(t)
	fb := faulty.New(mem)
	e := newEnv(t, fb, testConfig("s0"))
	walRow(t, e, "x", 100)
	seg := faulty.KeyContains("/wal/")
	fb.Fail(faulty.OpGetRange, seg, objstore.ErrNotFound, faulty.Always())
	before := fb.CallsMatching(faulty.OpGetRange, seg)
	_, err := e.tb.Get(context.Background(), "x", ReadOptions{})
	if !errors.Is(err, ErrMissingFile) || errors.Is(err, ErrNotFound) {
		t.Fatalf("want ErrMissingFile (and not ErrNotFound), got %v", err)
	}
	if got := fb.CallsMatching(faulty.OpGetRange, seg) - before; got != 1+maxRetries {
		t.Fatalf("%d attempts, want %d", got, 1+maxRetries)
	}
	if got := e.db.Stats().ReadMissingFile.Load(); got != 1 {
		t.Fatalf("missing-file count %d", got)
	}
	fb.Reset()

	// Pinned: exactly one attempt, and the answer is "gone".
	e.merge()
	data := faulty.KeyContains("/base/data/")
	fb.Fail(faulty.OpGetRange, data, objstore.ErrNotFound, faulty.Always())
	before = fb.CallsMatching(faulty.OpGetRange, data)
	_, err = e.tb.Get(context.Background(), "x", ReadOptions{Version: 1})
	if !errors.Is(err, ErrVersionGone) {
		t.Fatalf("pinned: %v", err)
	}
	if got := fb.CallsMatching(faulty.OpGetRange, data) - before; got != 1 {
		t.Fatalf("pinned read made %d attempts, want 1", got)
	}
}

// With a large append stuck mid-upload and a merge stuck before its commit,
// absent lookups and hits still complete: asserted while both are held.
func TestReadsDoNotWaitForWritersOrMerges(t *testing.T) {
	forStores(t, testReadsDoNotWaitForWritersOrMerges, true)
}

func testReadsDoNotWaitForWritersOrMerges(t *testing.T, sc storeCase) {
	mem := sc.open(t)
	fb := faulty.New(mem)
	e := newEnv(t, fb, testConfig("s0"))
	ctx := waitCtx(t)
	walRow(t, e, "hit-wal", 100)
	e.merge()
	walRow(t, e, "hit-wal2", 100) // pending for the merge below

	upload := fb.Pause(faulty.OpPut, faulty.Before, faulty.KeyContains("/payloads/"))
	appendDone := make(chan error, 1)
	go func() {
		_, err := e.tb.Append(context.Background(), Record{ID: "big", RolloutID: "r"}, bytes.NewReader(payloadFor("big", 1<<20)), 1<<20)
		appendDone <- err
	}()
	if err := upload.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	commit := fb.Pause(faulty.OpPut, faulty.Before, faulty.KeyContains("/base/_versions/"))
	mergeDone := make(chan error, 1)
	merger := newEnv(t, fb, testConfig(""))
	go func() {
		_, err := merger.tb.Merge(context.Background(), MergeOptions{})
		mergeDone <- err
	}()
	if err := commit.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// Both held. Reads complete now, or the test times out.
	reader := newEnv(t, fb, testConfig(""))
	for _, tb := range []*Table{e.tb, reader.tb} {
		for i := 0; i < 20; i++ {
			if _, err := tb.Get(ctx, fmt.Sprintf("absent-%d", i), ReadOptions{}); !errors.Is(err, ErrNotFound) {
				t.Fatalf("absent lookup: %v", err)
			}
			if _, err := tb.Get(ctx, "hit-wal", ReadOptions{}); err != nil {
				t.Fatalf("base hit: %v", err)
			}
			if _, err := tb.Get(ctx, "hit-wal2", ReadOptions{}); err != nil {
				t.Fatalf("WAL hit: %v", err)
			}
		}
	}
	select {
	case err := <-appendDone:
		t.Fatalf("append finished while held: %v", err)
	case err := <-mergeDone:
		t.Fatalf("merge finished while held: %v", err)
	default:
	}
	upload.Release()
	commit.Release()
	if err := <-appendDone; err != nil {
		t.Fatal(err)
	}
	if err := <-mergeDone; err != nil {
		t.Fatal(err)
	}
	e.mustRead("big", 1<<20)
}

func TestStaleHitServedWithoutRefreshMissRefreshes(t *testing.T) {
	forStores(t, testStaleHitServedWithoutRefreshMissRefreshes, true)
}

func testStaleHitServedWithoutRefreshMissRefreshes(t *testing.T, sc storeCase) {
	store := sc.open(t)
	e := newEnv(t, store, testConfig("s0"))
	walRow(t, e, "old", 10)
	e.merge()
	reader := newEnv(t, store, testConfig(""))
	reader.mustRead("old", 10)
	if v := reader.tb.snap.Load().version(); v != 1 {
		t.Fatalf("reader at version %d", v)
	}
	walRow(t, e, "new", 10)
	e.merge() // version 2, unknown to the reader
	refreshes := reader.db.Stats().Refreshes.Load()
	reader.mustRead("old", 10)
	if v := reader.tb.snap.Load().version(); v != 1 || reader.db.Stats().Refreshes.Load() != refreshes {
		t.Fatalf("a stale hit advanced the snapshot (version %d)", v)
	}
	reader.mustRead("new", 10)
	if v := reader.tb.snap.Load().version(); v != 2 {
		t.Fatalf("a miss did not refresh: version %d", v)
	}
}

// Read-after-write across processes: a write acknowledged by one process is
// visible to a read that begins afterwards on another, even if that reader
// refreshed a moment before.
func TestReadAfterWriteAcrossProcesses(t *testing.T) {
	forStores(t, testReadAfterWriteAcrossProcesses, true)
}

func testReadAfterWriteAcrossProcesses(t *testing.T, sc storeCase) {
	store := sc.open(t)
	w := newEnv(t, store, testConfig("s0"))
	r := newEnv(t, store, testConfig(""))
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("id-%d", i)
		if _, err := r.tb.Get(context.Background(), id, ReadOptions{}); !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
		w.put(id, i*300)
		r.mustRead(id, i*300)
		if i%7 == 6 {
			w.merge()
		}
	}
}

// A refresh already running when a read begins cannot be joined by it.
func TestRefresherDoesNotJoinOlderFlight(t *testing.T) {
	r := refresher{rt: sched.Real}
	release := make(chan struct{})
	started := make(chan uint64, 4)
	run := func(ctx context.Context, id uint64, _ bool) (*snapshot, error) {
		started <- id
		if id == 1 {
			<-release
		}
		return &snapshot{flight: id}, nil
	}
	first := make(chan *snapshot, 1)
	go func() {
		s, _ := r.after(context.Background(), 0, false, run)
		first <- s
	}()
	if id := <-started; id != 1 {
		t.Fatalf("first flight %d", id)
	}
	ticket := r.ticket() // a read beginning now, while flight 1 runs
	second := make(chan *snapshot, 1)
	go func() {
		s, _ := r.after(context.Background(), ticket, false, run)
		second <- s
	}()
	close(release)
	if s := <-first; s.flight != 1 {
		t.Fatalf("first got flight %d", s.flight)
	}
	if s := <-second; s.flight != 2 {
		t.Fatalf("the later read joined flight %d, want a fresh one", s.flight)
	}
}

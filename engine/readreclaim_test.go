package engine

// Reads racing reclamation (doc.go, step 7 and "Reads"): every row is
// always in the base or in a generation a reader can find, so a read paused
// at any point while another process merges and reclaims what it located
// still answers the row, from the base if need be. A file still missing
// after the bounded retries is ErrMissingFile (with every attempt's cause),
// never a silent not-found or a loop, and no read waits for a writer or a
// merge. Each race is forced with a pause at a named point.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
)

// A read paused after locating its row in a pending generation, while
// another process merges and reclaims that generation, answers the row: an
// inline payload (in the reclaimed segment) after one retry, from the
// base; an external one as located (the base re-references its object).
func TestReadPausedAtLocatedSurvivesReclaim(t *testing.T) {
	forStores(t, testReadPausedAtLocatedSurvivesReclaim, true)
}

func testReadPausedAtLocatedSurvivesReclaim(t *testing.T, sc storeCase) {
	for _, size := range []int{1000, 20 << 10} { // inline, external
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			store := sc.open(t)
			e := newEnv(t, store, testConfig("s0"))
			walRow(t, e, "x", size)
			r := readAcrossReclaim(t, e, store, hookReadLocated, "x") // the merge deletes the generation the read found x in
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

// A read paused after reading its row's metadata from the WAL, before
// opening the payload, while the generation is reclaimed: the same answer,
// with one retry for an inline payload and none for an external one.
func TestReadPausedBetweenRowAndPayloadSurvivesReclaim(t *testing.T) {
	forStores(t, testReadPausedBetweenRowAndPayloadSurvivesReclaim, true)
}

func testReadPausedBetweenRowAndPayloadSurvivesReclaim(t *testing.T, sc storeCase) {
	for _, size := range []int{1000, 20 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			store := sc.open(t)
			e := newEnv(t, store, testConfig("s0"))
			walRow(t, e, "x", size)
			r := readAcrossReclaim(t, e, store, hookReadRowRead, "x") // the row read from the WAL, its payload not yet opened
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
			// After 1000 bytes the open body fails the way a resumed Azure read
			// of a deleted blob does.
			walOrPayload := faulty.KeyFunc(func(k string) bool { return !bytes.Contains([]byte(k), []byte("/base/")) })
			// The row's location says all a payload read needs: its first
			// ranged read is the payload.
			fb.FailRead(faulty.OpGetRange, walOrPayload, 1000, objstore.ErrNotFound)
			r := readAcrossReclaim(t, e, mem, hookPayloadOpened, "x")
			if r.err != nil || !bytes.Equal(r.data, payloadFor("x", size)) {
				t.Fatalf("read: %v (%d bytes)", r.err, len(r.data))
			}
			if got := baseServed(e.db.Stats()); got != 1 {
				t.Fatalf("resumed read was not served by the base (base hits %d)", got)
			}
		})
	}
}

// A scan with payloads whose snapshot lists a generation that another
// process merges and reclaims while the scan runs (with the row's batch
// cached) reads the row and its payload from the base.
func TestScanWithPayloadsAcrossReclaim(t *testing.T) {
	store := memory.New()
	cfg := testConfig("s0")
	cfg.ResidentMaxAge = time.Hour
	e := newEnv(t, store, cfg)
	walRow(t, e, "x", 1000)
	walRow(t, e, "z", 20<<10)                                                     // external
	if _, err := e.tb.Get(context.Background(), "x", ReadOptions{}); err != nil { // caches x's batch
		t.Fatal(err)
	}
	gate := e.hooks.Pause(hookScanSnapshot)
	var buf bytes.Buffer
	done := await(func() error { return e.tb.Scan(context.Background(), &buf, ScanOptions{WithPayloads: true}) })
	if err := gate.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	mergeOther(t, store)
	gate.Release()
	if err := <-done; err != nil {
		t.Fatalf("scan across a reclaim: %v", err)
	}
	rows := readScanRows(t, buf.Bytes())
	if !bytes.Equal(rows["x"], payloadFor("x", 1000)) || !bytes.Equal(rows["z"], payloadFor("z", 20<<10)) {
		t.Fatalf("scanned payloads wrong: %d rows", len(rows))
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
	r := readAcrossReclaim(t, e, store, hookRefreshAfterBase, "x")
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
// read. The benchmark found this under load.
func TestGenerationReclaimedWhileRefreshLoadsIt(t *testing.T) {
	forStores(t, testGenerationReclaimedWhileRefreshLoadsIt, true)
}

func testGenerationReclaimedWhileRefreshLoadsIt(t *testing.T, sc storeCase) {
	store := sc.open(t)
	e := newEnv(t, store, testConfig("s0"))
	walRow(t, e, "x", 100)
	reader := newEnv(t, store, testConfig("")) // nothing cached: must load the seal
	r := readAcrossReclaim(t, reader, store, hookRefreshAfterBase, "x")
	if r.err != nil || !bytes.Equal(r.data, payloadFor("x", 100)) {
		t.Fatalf("read: %v", r.err)
	}
	st := reader.db.Stats()
	if st.RefreshRetries.Load() != 1 || st.ReadMissingFile.Load() != 0 {
		t.Fatalf("refresh retries %d, missing files %d", st.RefreshRetries.Load(), st.ReadMissingFile.Load())
	}
}

// A generation merged and reclaimed between a refresh's probe and its
// loading of that generation's layouts: the refresh starts over from the
// newer base (the registry names it), and the read succeeds.
func TestDiscoveryGenerationReclaimedBetweenProbeAndLayout(t *testing.T) {
	store := memory.New()
	w := newEnv(t, store, testConfig("s0"))
	w.put("warm", 1)
	r := newEnv(t, store, testConfig(""))
	r.mustRead("warm", 1)
	walRow(t, w, "x", 1000) // sealed, pending: r has not loaded it
	r.db.cfg.ResidentMaxAge = time.Nanosecond
	gate := r.hooks.Pause(hookRefreshAfterBase)
	read := await(func() error { _, err := readPayload(r.tb, "x"); return err })
	if err := gate.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	mergeOther(t, store) // merges and reclaims x's generation
	gate.Release()
	if err := <-read; err != nil {
		t.Fatalf("read after its generation was reclaimed under the refresh: %v", err)
	}
	if r.db.Stats().RefreshRetries.Load() == 0 {
		t.Fatal("the refresh never met the reclaimed generation")
	}
}

// A refresh whose newest version is collected between the probe that
// found it and the load: it looks again instead of failing the reads that
// joined it.
func TestRefreshRetriesACollectedVersion(t *testing.T) {
	store := memory.New()
	w := newEnv(t, store, testConfig("s0"))
	// The merger's hints in the registry are lost, so the reader learns of
	// new versions by its own probe (as after a merger crashed between its
	// commit and the hint).
	fm := faulty.New(store)
	m := newEnv(t, fm, testConfig(""))
	hints := fm.Fail(faulty.OpPut, faulty.KeyContains("_registry.json"), objstore.ErrThrottled, faulty.Always())
	merge := func() {
		t.Helper()
		if err := w.tb.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := m.tb.Merge(context.Background(), MergeOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	walRow(t, w, "x", 10)
	merge()
	r := newEnv(t, store, testConfig(""))
	r.mustRead("x", 10)
	walRow(t, w, "y", 10)
	merge()                                      // version 2 exists; r knows version 1
	gate := r.hooks.Pause(hookRefreshBeforeBase) // r's probe has found version 2
	read := await(func() error { _, err := r.tb.Status(context.Background()); return err })
	if err := gate.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	// The registry takes writes again (retention records its floor there
	// before it deletes): r read it before its pause.
	hints.Remove()
	for i := 0; i < 3; i++ { // collects version 2 (RetainVersions 2)
		walRow(t, w, fmt.Sprintf("z%d", i), 10)
		merge()
	}
	gate.Release()
	if err := <-read; err != nil {
		t.Fatalf("refresh across a collected version: %v", err)
	}
	if got := r.db.Stats().RefreshRetries.Load(); got == 0 {
		t.Fatal("the refresh did not meet the collected version")
	}
	r.mustRead("y", 10)
}

// A segment that stays missing is ErrMissingFile (never ErrNotFound) after
// exactly the bounded attempts; a pinned read whose data file is missing
// makes one attempt and answers ErrVersionGone.
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

// A payload body that opens and then fails with not-found on every read
// ends in ErrMissingFile after the bounded retries, never a loop.
func TestPayloadRetryIsBounded(t *testing.T) {
	fb := faulty.New(memory.New())
	e := newEnv(t, fb, testConfig("s0"))
	e.put("x", 20<<10) // external
	fb.FailRead(faulty.OpGetRange, faulty.KeyContains("/payloads/"), 100, objstore.ErrNotFound, faulty.Always())
	before := fb.Calls(faulty.OpGetRange)
	p, err := e.tb.OpenPayload(context.Background(), "x", 0, -1, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = io.ReadAll(p)
	if !errors.Is(err, ErrMissingFile) {
		t.Fatalf("a body that keeps failing: %v, want ErrMissingFile", err)
	}
	if opens := fb.Calls(faulty.OpGetRange) - before; opens > maxRetries+1 {
		t.Fatalf("%d ranged reads, want at most %d", opens, maxRetries+1)
	}
}

// A list whose bounded retries all meet vanished files gives up as every
// read does: ErrMissingFile with each attempt's cause, never the store's
// bare not-found (a list answering "not found" for a table that has rows).
// Simulator seed 507907 found this.
func TestListRetriesSpentIsMissingFile(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := newEnv(t, mem, testConfig("s0"))
	w.put("x", 1000) // inline, in a WAL segment
	fb := faulty.New(mem)
	r := newEnv(t, fb, testConfig(""))
	rule := fb.Fail(faulty.OpGetRange, faulty.KeyContains(".arrow"), objstore.ErrNotFound, faulty.Times(10))
	_, err := r.tb.List(ctx, ListOptions{})
	if !errors.Is(err, ErrMissingFile) {
		t.Fatalf("list with every attempt meeting a vanished file: %v, want ErrMissingFile", err)
	}
	if n := rule.Fired(); n != maxRetries+1 {
		t.Fatalf("%d attempts, want %d", n, maxRetries+1)
	}
}

// A refresh whose bounded attempts all meet vanished files gives up with
// every attempt's cause, as a read and a list do: the first attempts' causes
// (here a fault the caller can recognise) are not replaced by the last one's.
// Simulator seed 45325 found this.
func TestRefreshRetriesSpentKeepEveryCause(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := newEnv(t, mem, testConfig("s0"))
	w.put("x", 1000)
	if err := w.tb.Flush(ctx); err != nil { // sealed: a refresh reads the seal record
		t.Fatal(err)
	}
	fb := faulty.New(mem)
	r := newEnv(t, fb, testConfig(""))
	errFirst := fmt.Errorf("first attempt's cause: %w", objstore.ErrNotFound)
	first := fb.Fail(faulty.OpGet, faulty.KeyContains("_sealed.json"), errFirst)
	rest := fb.Fail(faulty.OpGet, faulty.KeyContains("_sealed.json"), objstore.ErrNotFound, faulty.Skip(1), faulty.Times(maxRefreshAttempts-1))
	_, err := r.tb.Get(ctx, "x", ReadOptions{})
	if !errors.Is(err, ErrMissingFile) || !errors.Is(err, errFirst) {
		t.Fatalf("refresh with every attempt meeting a vanished file: %v, want ErrMissingFile wrapping the first attempt's cause", err)
	}
	if n := first.Fired() + rest.Fired(); n != maxRefreshAttempts {
		t.Fatalf("%d attempts, want %d", n, maxRefreshAttempts)
	}
	// Once the files are readable again the row is there: nothing was lost.
	if _, err := r.tb.Get(ctx, "x", ReadOptions{}); err != nil {
		t.Fatalf("get after the faults: %v", err)
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

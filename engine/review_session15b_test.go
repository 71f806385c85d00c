package engine

// Adversarial review, session 15b: today's changes (DeleteIfMatch and the
// drop, pinned reads that tell a late merger's object from the table's
// version, the refresh's causes). Every interleaving is forced with pause
// points, faulty rules or hooks; none depends on timing. Where a comment
// says "Observed", that was the engine before the collection floor (the
// registry's Floor, raised before retention deletes): each test failed
// then and passes now.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

// twoVersions: x, y merged as versions 1 and 2 by w (RetainVersions 2).
func twoVersions(t *testing.T, mem *memory.Bucket) *env {
	t.Helper()
	w := newEnv(t, mem, testConfig("s0"))
	walRow(t, w, "x", 1000)
	w.merge()
	walRow(t, w, "y", 1000)
	w.merge()
	return w
}

// A pinned read of the newest version (2) races a merge that commits
// version 3 (version 2 stays retained: RetainVersions 2). The pinned read's
// HEAD of version 3 answers "missing" (3 is not there yet); then 3 lands;
// then the read, finding 2 above its own view (a fresh reader), asks
// latestVersion, which now says 3: "2 < 3, and 3 is missing, so 2 was
// collected" -- a false 410 for a retained version.
//
//  1. r (fresh: no view) reads x pinned at version 2: it HEADs 2 and 3
//     in parallel; the HEAD of 3 answers ErrNotFound and is held there.
//  2. w merges z: version 3 is committed; 1 is collected, 2 is kept.
//  3. The HEAD's answer (missing) reaches the read.
//
// Expected: x at version 2 (still retained). Observed: ErrVersionGone.
func TestReview15bPinnedNewestRacesCommitFreshReader(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := twoVersions(t, mem)
	f := faulty.New(mem)
	t.Cleanup(f.Reset)
	r := newEnv(t, f, testConfig(""))
	held := f.Pause(faulty.OpHead, faulty.After, faulty.Key(r.tb.keys.Version(3)))
	done := await(func() error { _, err := r.tb.Get(ctx, "x", ReadOptions{Version: 2}); return err })
	mustWait(t, held)
	walRow(t, w, "z", 1000)
	w.merge()
	if _, err := mem.Head(ctx, w.tb.keys.Version(2)); err != nil {
		t.Fatalf("version 2 should be retained: %v", err)
	}
	held.Release()
	if err := <-done; err != nil {
		t.Errorf("pinned read of retained version 2 racing the commit of 3: %v, want x", err)
	}
	// The same read again (no race) succeeds: the answer above was false.
	if _, err := r.tb.Get(ctx, "x", ReadOptions{Version: 2}); err != nil {
		t.Errorf("pinned read of version 2 afterwards: %v", err)
	}
}

// The same race with the reader's own view at the pinned version (the v ==
// known branch): between the HEAD of v+1 (missing) and the read's look at
// t.snap, this process's view moves to v+1 (its own merge, or any refresh),
// and the read answers "v < known, v+1 missing: collected".
//
//  1. r's view is version 2 (newest). r reads x pinned at 2; the HEAD of 3
//     answers ErrNotFound and is held.
//  2. r itself merges z (version 3; its view moves to 3; 2 is retained).
//  3. The HEAD's answer reaches the read.
//
// Expected: x at version 2. Observed: ErrVersionGone.
func TestReview15bPinnedNewestRacesOwnMerge(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := twoVersions(t, mem)
	f := faulty.New(mem)
	t.Cleanup(f.Reset)
	r := newEnv(t, f, testConfig(""))
	if _, err := r.tb.Get(ctx, "y", ReadOptions{}); err != nil {
		t.Fatal(err)
	}
	if v := r.tb.snap.Load().version(); v != 2 {
		t.Fatalf("r's view is version %d, want 2", v)
	}
	held := f.Pause(faulty.OpHead, faulty.After, faulty.Key(r.tb.keys.Version(3)))
	done := await(func() error { _, err := r.tb.Get(ctx, "x", ReadOptions{Version: 2}); return err })
	mustWait(t, held)
	walRow(t, w, "z", 1000)
	if _, err := r.tb.Merge(ctx, MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	if v := r.tb.snap.Load().version(); v != 3 {
		t.Fatalf("r's view is version %d after its merge, want 3", v)
	}
	if _, err := mem.Head(ctx, w.tb.keys.Version(2)); err != nil {
		t.Fatalf("version 2 should be retained: %v", err)
	}
	held.Release()
	if err := <-done; err != nil {
		t.Errorf("pinned read of retained version 2 racing this process's merge of 3: %v, want x", err)
	}
}

// lateMergerAtCollected: M1 (no merger lease: two mergers) plans version 1
// from the empty base with x and w2, writes its data and stalls before its commit;
// x and w2 are two sealed generations. M2 merges x alone (version 1,
// MaxBytes 1), then w2 with y, z, u (versions 2..4; RetainVersions 2
// collects 1 and 2),
// calling advance before each of y, z, u; then M1's create-if-absent of
// version 1 lands at the free key. Unlike TestLateMergerAtACollectedVersion,
// version 2 is collected too, so "version 2 names its parent" has nothing
// to look at. setup configures M1 before its merge begins.
func lateMergerAtCollected(t *testing.T, mem *memory.Bucket, cfg Config, advance func(), setup func(m1 *env)) error {
	t.Helper()
	wcfg := cfg
	wcfg.Shard = "s0"
	w := newEnv(t, mem, wcfg)
	walRow(t, w, "x", 1000)
	walRow(t, w, "w2", 1000) // a second generation: M1's version 1 holds it, the table's does not
	mcfg := cfg
	mcfg.LeaseDuration = -1
	f1 := faulty.New(mem)
	t.Cleanup(f1.Reset)
	m1 := newEnv(t, f1, mcfg)
	m2 := newEnv(t, mem, mcfg)
	setup(m1)
	held := f1.Pause(faulty.OpPut, faulty.Before, faulty.KeyContains("/base/_versions/"))
	m1Done := await(func() error { _, err := m1.tb.Merge(context.Background(), MergeOptions{}); return err })
	mustWait(t, held)
	if _, err := m2.tb.Merge(context.Background(), MergeOptions{MaxBytes: 1}); err != nil { // version 1: x only
		t.Fatal(err)
	}
	for _, id := range []string{"y", "z", "u"} {
		advance()
		walRow(t, w, id, 1000)
		m2.merge()
	}
	for _, v := range []uint64{1, 2} {
		if _, err := mem.Head(context.Background(), m2.tb.keys.Version(v)); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("version %d not collected: %v", v, err)
		}
	}
	held.Release()
	err := <-m1Done
	if _, herr := mem.Head(context.Background(), m2.tb.keys.Version(1)); errors.Is(herr, objstore.ErrNotFound) && err == nil {
		return errLateCollected
	} else if herr != nil {
		t.Fatalf("M1's late commit is not at version 1's key (M1: %v): %v", err, herr)
	}
	return err
}

// errLateCollected: the late merger's own retention collected its object
// at once (it is below the collection floor, whatever its age).
var errLateCollected = errors.New("the late object was collected by its own merger's retention")

// checkLateVersionGone: a process with no view yet reads pinned at the
// collected version 1, whose key holds M1's late object; then versions 3
// and 4 read back.
func checkLateVersionGone(t *testing.T, mem *memory.Bucket, cfg Config) {
	t.Helper()
	ctx := context.Background()
	r := newEnv(t, mem, cfg)
	rec, err := r.tb.Get(ctx, "x", ReadOptions{Version: 1})
	if !errors.Is(err, ErrVersionGone) {
		t.Errorf("fresh process, pinned read of collected version 1 (key re-created by a late merger, version 2 collected too): rec=%v err=%v, want ErrVersionGone", rec != nil, err)
	}
	if _, err := r.tb.Get(ctx, "w2", ReadOptions{Version: 1}); !errors.Is(err, ErrVersionGone) {
		t.Errorf("w2 pinned at version 1: %v, want ErrVersionGone (the table's version 1 never held w2; M1's object does)", err)
	}
	for _, id := range []string{"x", "y", "z", "u"} {
		if _, err := r.tb.Get(ctx, id, ReadOptions{Version: 4}); err != nil {
			t.Errorf("%s at version 4: %v", id, err)
		}
	}
	// Once the process has a view, the same read answers gone: the answer
	// depends on whether the process had read before.
	if _, err := r.tb.Get(ctx, "u", ReadOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.tb.Get(ctx, "x", ReadOptions{Version: 1}); !errors.Is(err, ErrVersionGone) {
		t.Errorf("with a view: pinned read of version 1: %v, want ErrVersionGone", err)
	}
}

// A late merger's object at a collected version's key, with the next
// version collected too, is served to a process that has no view yet (or
// one older than the pinned version): HEAD v+1 is missing, v > known, and
// latestVersion(v) -- HEAD v present, HEAD v+1 missing -- answers v itself
// ("the newest"), so the read loads the late object and serves its rows.
//
//  1. lateMergerAtCollected; M1 crashes right after its commit (before its
//     own retention would collect the object again).
//  2. A fresh process reads x pinned at version 1.
//
// Expected: ErrVersionGone. Observed: x, from M1's data file.
func TestReview15bLateMergerServedToFreshReader(t *testing.T) {
	errCrash := errors.New("M1 crashes after its commit")
	mem := memory.New()
	err := lateMergerAtCollected(t, mem, testConfig(""), func() {}, func(m1 *env) {
		m1.hooks.Do("merge:after-commit", func(context.Context) error { return errCrash })
	})
	if !errors.Is(err, errCrash) {
		t.Fatalf("M1: %v, want its crash", err)
	}
	checkLateVersionGone(t, mem, testConfig(""))
}

// The same with RetainAge > 0 and no crash: M1's own retention keeps its
// late object (its LastModified is young, and retention keeps any version
// younger than RetainAge), so it stays at version 1's key for RetainAge,
// while the legitimate, older versions 2.. are collected by count.
func TestReview15bLateMergerKeptByAgeServed(t *testing.T) {
	clk := objstoretest.NewClock()
	mem := memory.New(memory.WithClock(clk.Now))
	cfg := testConfig("")
	cfg.Runtime = sched.WithClock(clk.Now)
	cfg.RetainAge = time.Hour
	err := lateMergerAtCollected(t, mem, cfg, func() { clk.Advance(2 * time.Hour) }, func(*env) {})
	if errors.Is(err, errLateCollected) {
		err = nil // kept by nothing: below the floor
	}
	if err != nil {
		t.Fatalf("M1's merge: %v", err)
	}
	checkLateVersionGone(t, mem, cfg)
}

// Two drops of one incarnation, with a create landing between them: P1
// read the descriptor (I1) and fenced I1, then stalls; P2 drops I1 to the
// end; P3 creates t (I2, a plain create-if-absent: the name was free) and
// acknowledges x; P1 resumes: its conditional delete must leave I2's
// descriptor, and its delete of I1's objects must not touch I2's.
func TestReview15bTwoDropsAndACreateBetween(t *testing.T) {
	forStores(t, func(t *testing.T, sc storeCase) {
		ctx := context.Background()
		store := sc.open(t)
		seed := newEnv(t, store, testConfig("s0"))
		seed.put("old", 10)
		p1 := newEnv(t, store, testConfig(""))
		p2 := newEnv(t, store, testConfig(""))
		p3 := newEnv(t, store, testConfig("s1"))
		ran := false
		p1.hooks.Do("drop:fenced", func(context.Context) error {
			if err := p2.db.DropTable(ctx, "t"); err != nil {
				t.Errorf("P2's drop: %v", err)
			}
			if err := p3.db.CreateTable(ctx, "t"); err != nil {
				t.Errorf("P3's create: %v", err)
				return nil
			}
			tb, err := p3.db.Table(ctx, "t")
			if err != nil {
				t.Errorf("P3 opens t: %v", err)
				return nil
			}
			if err := appendID(tb, "x"); err != nil {
				t.Errorf("P3 appends x: %v", err)
			}
			ran = true
			return nil
		})
		if err := p1.db.DropTable(ctx, "t"); err != nil {
			t.Fatalf("P1's drop: %v", err)
		}
		if !ran {
			t.Fatal("the interleaving did not run")
		}
		r := newEnv(t, store, testConfig(""))
		got, err := readPayload(r.tb, "x")
		if err != nil || len(got) != 100 {
			t.Fatalf("x, acknowledged to the table P3 created, after P1's late drop step: %v", err)
		}
		if _, err := r.tb.Get(ctx, "old", ReadOptions{}); !errors.Is(err, ErrNotFound) {
			t.Errorf("old, of the dropped incarnation: %v, want ErrNotFound", err)
		}
	}, false)
}

// A drop whose conditional delete of the descriptor lands but whose answer
// is lost: the drop reports the failure; a create meanwhile (by another
// process) is untouched by the drop's retry only if the caller does not
// retry -- a retried drop drops whatever table is current, as asked. Here:
// no create; the retry answers ErrTableNotFound (the table is gone), and a
// create afterwards works; CollectDropped removes what the first drop left.
func TestReview15bDropLostDescriptorDeleteAnswer(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	seed := newEnv(t, mem, testConfig("s0"))
	seed.put("old", 10)
	f := faulty.New(mem)
	t.Cleanup(f.Reset)
	p := newEnv(t, f, testConfig(""))
	errLost := errors.New("answer lost")
	lost := f.LoseResponse(faulty.OpDelete, faulty.KeyContains("_table.json"), errLost)
	if err := p.db.DropTable(ctx, "t"); !errors.Is(err, errLost) {
		t.Fatalf("drop with a lost answer: %v, want the lost answer", err)
	}
	if lost.Fired() != 1 {
		t.Fatal("the rule did not fire")
	}
	if err := p.db.DropTable(ctx, "t"); !errors.Is(err, ErrTableNotFound) {
		t.Errorf("retried drop: %v, want ErrTableNotFound", err)
	}
	if err := p.db.CreateTable(ctx, "t"); err != nil {
		t.Fatalf("create after the drop: %v", err)
	}
	if _, err := p.db.CollectDropped(ctx, 0); err != nil {
		t.Fatal(err)
	}
	tb, err := p.db.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Get(ctx, "old", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("old after drop and create: %v", err)
	}
}

// A drop whose descriptor read fails transiently does nothing and says so;
// a live handle of this process is not retired by the failed drop.
func TestReview15bDropDescriptorReadFails(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	f := faulty.New(mem)
	t.Cleanup(f.Reset)
	p := newEnv(t, f, testConfig("s0"))
	p.put("a", 10)
	errBusy := errors.New("throttled")
	f.Fail(faulty.OpGet, faulty.KeyContains("_table.json"), errBusy)
	if err := p.db.DropTable(ctx, "t"); !errors.Is(err, errBusy) {
		t.Fatalf("drop: %v, want the read's failure", err)
	}
	if err := p.tb.checkLive(); err != nil {
		t.Fatalf("handle retired by a drop that did not happen: %v", err)
	}
	p.put("b", 10)
	p.mustRead("a", 10)
	p.mustRead("b", 10)
}

// Rolling upgrade: version 1 committed by this release (its object
// carries id metadata), version 2 by the previous release's merger (its
// commitManifest put no metadata, its manifest has no id fields). Version 1
// is retained and in the table's history; a pinned read of it must not be
// ErrVersionGone.
func TestReview15bPinnedAfterOldReleaseCommit(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := twoVersions(t, mem)
	// Rewrite version 2 as the previous release wrote it: same manifest,
	// without id/parent_id and without object metadata.
	m, err := w.tb.loadManifest(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	m.ID, m.ParentID = "", ""
	body, _ := json.Marshal(m)
	body = bytes.ReplaceAll(body, []byte(`"id":"","parent_id":"",`), nil)
	if _, err := mem.Put(ctx, w.tb.keys.Version(2), bytes.NewReader(body), objstore.PutOptions{ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	r := newEnv(t, mem, testConfig(""))
	if _, err := r.tb.Get(ctx, "x", ReadOptions{Version: 1}); err != nil {
		t.Errorf("pinned read of version 1 (this release), version 2 by the previous release: %v, want x", err)
	}
	if _, err := r.tb.Get(ctx, "y", ReadOptions{Version: 2}); err != nil {
		t.Errorf("pinned read of version 2 (previous release): %v", err)
	}
}

// The HEAD of v+1 fails transiently: the read is decided by the collection
// floor instead (it failed with the HEAD's error before).
func TestReview15bPinnedNextHeadFails(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	twoVersions(t, mem)
	f := faulty.New(mem)
	t.Cleanup(f.Reset)
	r := newEnv(t, f, testConfig(""))
	errBusy := errors.New("throttled")
	f.Fail(faulty.OpHead, faulty.Key(r.tb.keys.Version(2)), errBusy)
	_, err := r.tb.Get(ctx, "x", ReadOptions{Version: 1})
	if errors.Is(err, ErrVersionGone) {
		t.Fatalf("transient HEAD failure of version 2 answered as gone: %v", err)
	}
	if err != nil {
		t.Errorf("pinned read of retained version 1 while version 2's HEAD fails: %v, want x (the collection floor decides)", err)
	}
	if _, err := r.tb.Get(ctx, "x", ReadOptions{Version: 1}); err != nil {
		t.Errorf("afterwards: %v", err)
	}
}

// Pinned reads of version 1 (parent: the empty base, id ""), of the newest
// version, of a version newer than the process's view, and of one above
// the newest, with nothing racing: every retained version answers, the
// collected one is gone, the future one is ErrNoVersion.
func TestReview15bPinnedSanity(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := twoVersions(t, mem)
	old := newEnv(t, mem, testConfig(""))
	if _, err := old.tb.Get(ctx, "x", ReadOptions{}); err != nil { // view: version 2
		t.Fatal(err)
	}
	for _, r := range []*env{newEnv(t, mem, testConfig("")), old} {
		if _, err := r.tb.Get(ctx, "x", ReadOptions{Version: 1}); err != nil {
			t.Errorf("version 1: %v", err)
		}
		if _, err := r.tb.Get(ctx, "y", ReadOptions{Version: 2}); err != nil {
			t.Errorf("version 2 (newest): %v", err)
		}
		if _, err := r.tb.Get(ctx, "x", ReadOptions{Version: 3}); !errors.Is(err, ErrNoVersion) {
			t.Errorf("version 3 (future): %v, want ErrNoVersion", err)
		}
	}
	walRow(t, w, "z", 1000)
	w.merge() // version 3; 1 collected
	for _, r := range []*env{newEnv(t, mem, testConfig("")), old} {
		if _, err := r.tb.Get(ctx, "x", ReadOptions{Version: 1}); !errors.Is(err, ErrVersionGone) {
			t.Errorf("version 1 after collection: %v, want ErrVersionGone", err)
		}
		if _, err := r.tb.Get(ctx, "z", ReadOptions{Version: 3}); err != nil {
			t.Errorf("version 3 (newer than old's view): %v", err)
		}
		if _, err := r.tb.Get(ctx, "y", ReadOptions{Version: 2}); err != nil {
			t.Errorf("version 2: %v", err)
		}
	}
}

package engine

// A version below the collection floor is collected, whatever object a
// merger that lost its lease later creates at its free key (doc.go, step
// 6). Every discovery of versions (a refresh's probe, a listing, a merge's
// plan, a pinned read, a collector) checks what it found against the floor
// read after it, or against the next version's parent, so no process takes
// a late merger's object for the table's version and no collector deletes,
// because of one, files a retained version references.

import (
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

// A merger that lost its lease commits a version number that was collected
// meanwhile: its create-if-absent succeeds, the key being free. That object
// is not the table's version: a pinned read of the number answers gone, as
// it did before the late commit, never the late merger's rows; the
// retained versions, and reads of the newest, are untouched.
//
//  1. x is sealed. M1 (no merger lease: two mergers) plans version 1 from
//     the empty base, writes its data, and stalls before its commit.
//  2. M2 merges x, then y, then z: versions 1, 2, 3; retention
//     (RetainVersions 2) collects version 1.
//  3. M1's commit lands at the free key of version 1 (x only), and M1
//     crashes (its own retention would collect it again).
//  4. A pinned read of version 1 answers ErrVersionGone; versions 2 and 3
//     read back what they hold.
func TestLateMergerAtACollectedVersion(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := newEnv(t, mem, testConfig("s0"))
	walRow(t, w, "x", 1000)
	m1, f1, m2 := twoMergers(t, mem, testConfig(""))
	errCrash := crashAfterCommit(m1)
	held, m1Done := holdCommit(t, f1, m1, MergeOptions{})
	m2.merge()
	for _, id := range []string{"y", "z"} {
		walRow(t, w, id, 1000)
		m2.merge()
	}
	if _, err := mem.Head(ctx, m2.tb.keys.Version(1)); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("version 1 not collected: %v", err)
	}
	held.Release()
	if err := <-m1Done; !errors.Is(err, errCrash) {
		t.Fatalf("M1's merge: %v, want its crash after the commit", err)
	}
	if _, err := mem.Head(ctx, m2.tb.keys.Version(1)); err != nil {
		t.Fatalf("the late merger's commit did not land at the collected key: %v", err)
	}

	for _, r := range []*env{newEnv(t, mem, testConfig("")), m2} {
		if _, err := r.tb.Get(ctx, "x", ReadOptions{Version: 1}); !errors.Is(err, ErrVersionGone) {
			t.Errorf("pinned read of collected version 1, after a late merger created its key: %v, want ErrVersionGone", err)
		}
		for v, want := range map[uint64][]string{2: {"x", "y"}, 3: {"x", "y", "z"}} {
			for _, id := range want {
				if _, err := r.tb.Get(ctx, id, ReadOptions{Version: v}); err != nil {
					t.Errorf("pinned read of %s at version %d: %v", id, v, err)
				}
			}
		}
		if _, err := r.tb.Get(ctx, "z", ReadOptions{Version: 2}); !errors.Is(err, ErrNotFound) {
			t.Errorf("z at version 2: %v, want ErrNotFound", err)
		}
		r.mustRead("z", 1000)
	}
}

// lateMergerAtCollected: M1 (no merger lease: two mergers) plans version
// 1 from the empty base with x and w2 (two sealed generations), writes its
// data and stalls before its commit. M2 merges x alone (version 1,
// MaxBytes 1), then w2 with y, z, u (versions 2..4; RetainVersions 2
// collects 1 and 2), calling advance before each of y, z, u; then M1's
// create-if-absent of version 1 lands at the free key. Unlike
// TestLateMergerAtACollectedVersion, version 2 is collected too, so
// "version 2 names its parent" has nothing to look at. setup configures
// M1 before its merge begins.
func lateMergerAtCollected(t *testing.T, mem *memory.Bucket, cfg Config, advance func(), setup func(m1 *env)) error {
	t.Helper()
	wcfg := cfg
	wcfg.Shard = "s0"
	w := newEnv(t, mem, wcfg)
	walRow(t, w, "x", 1000)
	walRow(t, w, "w2", 1000) // a second generation: M1's version 1 holds it, the table's does not
	m1, f1, m2 := twoMergers(t, mem, cfg)
	setup(m1)
	held, m1Done := holdCommit(t, f1, m1, MergeOptions{})
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
// version collected too, is not served to a process that has no view yet
// (or one older than the pinned version), although HEAD v finds an object
// and HEAD v+1 finds none, which alone would make v look like the newest:
// the floor decides, and the read answers ErrVersionGone, never M1's rows.
//
//  1. lateMergerAtCollected; M1 crashes right after its commit (before its
//     own retention would collect the object again).
//  2. A fresh process reads x pinned at version 1: ErrVersionGone.
func TestLateMergerObjectGoneForFreshReader(t *testing.T) {
	var errCrash error
	mem := memory.New()
	err := lateMergerAtCollected(t, mem, testConfig(""), func() {}, func(m1 *env) {
		errCrash = crashAfterCommit(m1)
	})
	if !errors.Is(err, errCrash) {
		t.Fatalf("M1: %v, want its crash", err)
	}
	checkLateVersionGone(t, mem, testConfig(""))
}

// The same with RetainAge > 0 and no crash: M1's late object may stay at
// version 1's key (its LastModified is young, and retention keeps any
// version younger than RetainAge), while the legitimate, older versions
// 2.. are collected by count; a pinned read of version 1 is still gone.
func TestLateMergerObjectKeptByAgeIsGone(t *testing.T) {
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

// lateWithGap builds, on mem:
//
//   - w (shard s0) writes x, y1..y4: five sealed generations g1..g5;
//   - M2 merges x alone: version 1;
//   - M1 (no merger lease) plans version 2 from base 1 with y1..y4, writes
//     its data and is held before its create-if-absent of version 2;
//   - between (a callback run while M1 is held, before M2 goes on) the
//     caller arranges its own race;
//   - M2 merges y1, y2, y3, y4 one at a time: versions 2..5; RetainVersions
//     2 collects 1, 2 and 3 (floor 4);
//   - M1's commit lands at the free key 2 (a late object, built on the
//     table's version 1, whose next key 3 is free as well); M1 crashes
//     right after its commit (before its own retention).
func lateWithGap(t *testing.T, mem *memory.Bucket, between func(w *env)) {
	t.Helper()
	ctx := context.Background()
	w := newEnv(t, mem, testConfig("s0"))
	for _, id := range []string{"x", "y1", "y2", "y3", "y4"} {
		walRow(t, w, id, 1000)
	}
	mcfg := noMergerLease(testConfig(""))
	m2 := newEnv(t, mem, mcfg)
	if res, err := m2.tb.Merge(ctx, MergeOptions{MaxBytes: 1}); err != nil || res.Version != 1 {
		t.Fatalf("M2's first merge: %+v %v", res, err)
	}
	m1, f1 := faultyEnv(t, mem, mcfg)
	errCrash := crashAfterCommit(m1)
	held, m1Done := holdCommit(t, f1, m1, MergeOptions{})
	between(w)
	for i := 0; i < 4; i++ {
		if _, err := m2.tb.Merge(ctx, MergeOptions{MaxBytes: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []uint64{1, 2, 3} {
		if _, err := mem.Head(ctx, m2.tb.keys.Version(v)); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("version %d not collected: %v", v, err)
		}
	}
	held.Release()
	if err := <-m1Done; !errors.Is(err, errCrash) {
		t.Fatalf("M1: %v, want its crash after the commit", err)
	}
	if _, err := mem.Head(ctx, m2.tb.keys.Version(2)); err != nil {
		t.Fatalf("M1's late object is not at version 2's key: %v", err)
	}
	reg, _, err := readRegistry(ctx, m2.db, m2.tb.keys)
	if err != nil || reg.Floor != 4 || reg.Base != 5 {
		t.Fatalf("registry after M2's retention: %+v %v, want floor 4, base 5", reg, err)
	}
}

// A refresh that probes for a newer base from a registry it read before a
// collection finds M1's late object at key 2 (and nothing at 3) but checks
// what it found against the floor read after the probe: the late object
// never becomes the process's resident base.
//
//  1. lateWithGap; between: a fresh process R starts Status (a refresh
//     with a probe). R reads the registry (base 1, floor 0), then its HEAD
//     of version 2 is held.
//  2. M2 commits 2..5 and collects 1..3; M1's late commit lands at 2.
//  3. R's HEAD of version 2 goes on.
//  4. R's view is version 5 (the table's newest), and a pinned read of
//     version 2 (collected) answers ErrVersionGone, in R and in a fresh
//     process.
func TestRefreshProbeSkipsLateObject(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	fr := faulty.New(mem)
	t.Cleanup(fr.Reset)
	var r *env
	var gate *faulty.Gate
	var done chan error
	var st Status
	lateWithGap(t, mem, func(*env) {
		r = newEnv(t, fr, testConfig(""))
		if r.tb.snap.Load() != nil {
			t.Fatal("R has a view already")
		}
		gate = fr.Pause(faulty.OpHead, faulty.Before, faulty.Key(r.tb.keys.Version(2)))
		done = await(func() error { var err error; st, err = r.tb.Status(ctx); return err })
		mustWait(t, gate)
	})
	gate.Release()
	if err := <-done; err != nil {
		t.Fatalf("R's status: %v", err)
	}
	if v := r.tb.snap.Load().version(); st.Version != 5 || v != 5 {
		t.Errorf("R's status reports version %d, its resident view is version %d (id %q); want 5: the table's newest (2 is a late merger's object below the floor)",
			st.Version, v, r.tb.snap.Load().base.m.ID)
	}
	if rec, err := r.tb.Get(ctx, "y4", ReadOptions{Version: 2}); !errors.Is(err, ErrVersionGone) {
		t.Errorf("R: pinned read of collected version 2 (its key holds M1's late object): rec=%v err=%v, want ErrVersionGone", rec != nil, err)
	}
	// Another process without the poisoned view agrees it is gone.
	if _, err := newEnv(t, mem, testConfig("")).tb.Get(ctx, "y4", ReadOptions{Version: 2}); !errors.Is(err, ErrVersionGone) {
		t.Errorf("fresh process: pinned read of version 2: %v, want ErrVersionGone", err)
	}
}

// The same window with a process that has a view (version 1): the
// refresh's round one takes the registry's HEAD (unchanged since the view:
// the cached registry, base 1, is reused) in parallel with the probe; the
// probe's HEAD of version 2 is held until after the collection and M1's
// late commit.
func TestRefreshProbeWithViewSkipsLateObject(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	fr := faulty.New(mem)
	t.Cleanup(fr.Reset)
	var r *env
	var gate *faulty.Gate
	var done chan error
	var st Status
	lateWithGap(t, mem, func(*env) {
		r = newEnv(t, fr, testConfig(""))
		if _, err := r.tb.Get(ctx, "x", ReadOptions{}); err != nil {
			t.Fatal(err)
		}
		if v := r.tb.snap.Load().version(); v != 1 {
			t.Fatalf("R's view: %d, want 1", v)
		}
		regHead := fr.Pause(faulty.OpHead, faulty.After, faulty.Key(r.tb.keys.Registry()))
		gate = fr.Pause(faulty.OpHead, faulty.Before, faulty.Key(r.tb.keys.Version(2)))
		done = await(func() error { var err error; st, err = r.tb.Status(ctx); return err })
		mustWait(t, regHead) // the registry's HEAD was answered (unchanged)
		regHead.Release()
		mustWait(t, gate)
	})
	gate.Release()
	if err := <-done; err != nil {
		t.Fatalf("R's status: %v", err)
	}
	if v := r.tb.snap.Load().version(); st.Version != 5 || v != 5 {
		t.Errorf("R's status reports version %d, its resident view is version %d; want 5", st.Version, v)
	}
	if rec, err := r.tb.Get(ctx, "y4", ReadOptions{Version: 2}); !errors.Is(err, ErrVersionGone) {
		t.Errorf("R: pinned read of collected version 2: rec=%v err=%v, want ErrVersionGone", rec != nil, err)
	}
}

// Versions (the list/ListVersions API) lists no version below the
// collection floor: a late merger's object there is not reported as a
// retained version (every pinned read of it answers gone).
func TestVersionsOmitsLateObjectBelowFloor(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	lateWithGap(t, mem, func(*env) {})
	r := newEnv(t, mem, testConfig(""))
	vis, err := r.tb.Versions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, vi := range vis {
		got = append(got, vi.Version)
	}
	if _, err := r.tb.Get(ctx, "y4", ReadOptions{Version: 2}); !errors.Is(err, ErrVersionGone) {
		t.Fatalf("pinned read of 2: %v, want gone", err)
	}
	for _, v := range got {
		if v < 4 {
			t.Errorf("Versions lists %v: version %d is below the collection floor 4 (its pinned read answers ErrVersionGone)", got, v)
		}
	}
}

// A merge that read the registry (base 1) before a collection, and whose
// search for the newest version walks into the collected range (HEAD 1
// missing, HEAD 2 a late merger's object, HEAD 3 missing), never takes the
// late object as its base (which would commit z at the free key 3, below
// the floor): it plans from the table's newest version.
//
//  1. lateWithGap; between: w writes z (a sixth sealed generation, after
//     M1 planned), and merger M3 starts: it reads the registry (base 1)
//     and its HEAD of version 2 is held.
//  2. M2 merges y1..y4 (versions 2..5, floor 4); M1's late commit at 2.
//  3. M3's HEAD goes on: M3 plans from version 5 and commits z as
//     version 6.
func TestMergeNeverPlansFromLateObject(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	f3 := faulty.New(mem)
	t.Cleanup(f3.Reset)
	mcfg := noMergerLease(testConfig(""))
	var m3 *env
	var gate *faulty.Gate
	var done chan error
	var res MergeResult
	lateWithGap(t, mem, func(w *env) {
		walRow(t, w, "z", 1000)
		m3 = newEnv(t, f3, mcfg)
		gate = f3.Pause(faulty.OpHead, faulty.Before, faulty.Key(m3.tb.keys.Version(2)))
		done = await(func() error { var err error; res, err = m3.tb.Merge(ctx, MergeOptions{}); return err })
		mustWait(t, gate)
	})
	gate.Release()
	err := <-done
	if err != nil || res.Version != 6 {
		t.Errorf("M3's merge: version %d (merged %v, versions collected %d), err %v; want z committed as version 6 (on the table's newest, 5)",
			res.Version, res.Merged, res.VersionsCollected, err)
	}
	r := newEnv(t, mem, testConfig(""))
	if _, err := r.tb.Get(ctx, "z", ReadOptions{}); err != nil {
		t.Errorf("z: %v", err)
	}
	if st, err := r.tb.Status(ctx); err != nil || st.Version != 6 {
		t.Errorf("status after M3: version %d, %v; want 6", st.Version, err)
	}
}

// Two collectors with different listings, and a late merger's object at
// a key only the stale one doomed: collector A's live set comes from its
// own listing (versions 3 and 4, which collector B has deleted meanwhile),
// and at key 2 A finds M1's late object, built on version 1, which names
// version 1's data file, still referenced by the retained versions 5 and
// 6. A does not delete that file: every row stays readable.
//
//  1. w writes x, y1..y5 (six sealed generations). M2 (RetainVersions 100:
//     it collects nothing) merges x: version 1. M1 (no lease) plans version
//     2 from base 1 with y1 and is held before its commit.
//  2. M2 merges y1, y2, y3: versions 2..4.
//  3. Collector A (RetainVersions 2) lists 1..4, reads the registry (floor
//     0), computes floor 3 (doomed 1, 2), and is held at its registry CAS.
//  4. M2 merges y4, y5: versions 5, 6. Collector B (RetainVersions 2)
//     lists 1..6, raises the floor to 5, deletes manifests 1..4 and the
//     files only they referenced (none of version 1's: 5 and 6 hold them).
//  5. M1's commit lands at the free key 2; M1 crashes after it.
//  6. A's CAS fails (B moved the registry), and A goes on with its own
//     listing, in which manifest 2 is now M1's object.
//  7. Every row reads at the latest version and pinned at 6 (retained).
func TestStaleCollectorKeepsFilesALateObjectNames(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := newEnv(t, mem, testConfig("s0"))
	ids := []string{"x", "y1", "y2", "y3", "y4", "y5"}
	for _, id := range ids {
		walRow(t, w, id, 1000)
	}
	keep := noMergerLease(testConfig(""))
	keep.RetainVersions = 100
	m2 := newEnv(t, mem, keep)
	one := func() {
		t.Helper()
		if _, err := m2.tb.Merge(ctx, MergeOptions{MaxBytes: 1}); err != nil {
			t.Fatal(err)
		}
	}
	one() // version 1: x
	m1, f1 := faultyEnv(t, mem, keep)
	errCrash := crashAfterCommit(m1)
	m1Held, m1Done := holdCommit(t, f1, m1, MergeOptions{MaxBytes: 1})
	one()
	one()
	one() // versions 2..4

	coll := noMergerLease(testConfig(""))
	a, fa := faultyEnv(t, mem, coll)
	b := newEnv(t, mem, coll)
	aHeld := fa.Pause(faulty.OpPut, faulty.Before, faulty.Key(a.tb.keys.Registry()))
	type out struct {
		v, f int
		err  error
	}
	aDone := make(chan out, 1)
	go func() { v, f, err := a.tb.collectVersions(ctx); aDone <- out{v, f, err} }()
	mustWait(t, aHeld)

	one()
	one() // versions 5, 6
	if _, _, err := b.tb.collectVersions(ctx); err != nil {
		t.Fatalf("collector B: %v", err)
	}
	for v := uint64(1); v <= 4; v++ {
		if _, err := mem.Head(ctx, w.tb.keys.Version(v)); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("version %d not collected by B: %v", v, err)
		}
	}
	m1Held.Release()
	if err := <-m1Done; !errors.Is(err, errCrash) {
		t.Fatalf("M1: %v, want its crash after the commit", err)
	}
	if _, err := mem.Head(ctx, w.tb.keys.Version(2)); err != nil {
		t.Fatalf("M1's late object not at key 2: %v", err)
	}
	aHeld.Release()
	res := <-aDone
	t.Logf("collector A: %d versions, %d files, %v", res.v, res.f, res.err)

	r := newEnv(t, mem, testConfig(""))
	for _, id := range ids {
		if _, err := r.tb.Get(ctx, id, ReadOptions{}); err != nil {
			t.Errorf("%s (acknowledged, merged, in retained versions 5 and 6) after collector A: %v", id, err)
		}
		if _, err := r.tb.Get(ctx, id, ReadOptions{Version: 6}); err != nil {
			t.Errorf("%s pinned at retained version 6: %v", id, err)
		}
	}
}

// A collector whose floor CAS lands with its answer lost recognises its
// own write on the retry; a collector that crashes after raising the floor
// and before deleting leaves versions below it in place: retained versions
// (at and above the floor) stay readable pinned, the next merge's
// retention finishes, and no registry writer (a writer's claim, noteBase)
// lowers Floor or Base.
func TestFloorLostAnswerAndCrashBeforeDelete(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := twoVersions(t, mem)
	walRow(t, w, "z", 1000)
	keep := testConfig("")
	keep.RetainVersions = 100
	m := newEnv(t, mem, keep)
	m.merge() // version 3, nothing collected
	c, f := faultyEnv(t, mem, testConfig(""))
	errLost := errors.New("connection reset (answer lost)")
	lost := f.LoseResponse(faulty.OpPut, faulty.Key(c.tb.keys.Registry()), errLost)
	errCrash := errors.New("collector crashes")
	c.hooks.Do(hookCollectBeforeDelete, func(context.Context) error { return errCrash })
	if _, _, err := c.tb.collectVersions(ctx); !errors.Is(err, errCrash) {
		t.Fatalf("collection: %v, want the crash before its first delete", err)
	}
	if lost.Fired() != 1 {
		t.Fatal("the rule did not fire")
	}
	reg, _, _ := readRegistry(ctx, m.db, c.tb.keys)
	if reg.Floor != 2 || reg.Base != 3 {
		t.Fatalf("registry: floor %d base %d, want 2, 3", reg.Floor, reg.Base)
	}
	walRow(t, w, "u", 1000) // a writer's registry CAS (its next claim)
	r := newEnv(t, mem, testConfig(""))
	for v, id := range map[uint64]string{2: "y", 3: "z"} {
		if _, err := r.tb.Get(ctx, id, ReadOptions{Version: v}); err != nil {
			t.Errorf("retained version %d: %v", v, err)
		}
	}
	if _, err := r.tb.Get(ctx, "x", ReadOptions{Version: 1}); err != nil && !errors.Is(err, ErrVersionGone) {
		t.Errorf("version 1 (below the floor, not yet deleted): %v", err)
	}
	w.merge() // version 4: its retention collects 1 and 2
	reg, _, _ = readRegistry(ctx, m.db, c.tb.keys)
	if reg.Floor != 3 || reg.Base != 4 {
		t.Errorf("registry after the next merge: floor %d base %d, want 3, 4", reg.Floor, reg.Base)
	}
	for _, id := range []string{"x", "y", "z", "u"} {
		if _, err := r.tb.Get(ctx, id, ReadOptions{Version: 4}); err != nil {
			t.Errorf("%s at 4: %v", id, err)
		}
	}
	if _, err := r.tb.Get(ctx, "x", ReadOptions{Version: 1}); !errors.Is(err, ErrVersionGone) {
		t.Errorf("version 1 after collection: %v, want gone", err)
	}
}

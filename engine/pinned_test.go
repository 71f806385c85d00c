package engine

// A read pinned to a base version sees exactly that version while it is
// retained, ErrVersionGone once it was collected and ErrNoVersion before it
// exists (doc.go, "Reads"), whatever races it: the commit of the next
// version, this process's own merge, compaction and collection under a
// paused read, a transient failure, a next version written by the previous
// release. Retention keeps the newest RetainVersions versions and the files
// they reference.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
)

// Many merges with compaction: every row reads back, only the newest
// RetainVersions versions read pinned (older ones are gone, future ones do
// not exist), and only the files of retained versions remain.
func TestManyMergesRetentionAndCompaction(t *testing.T) {
	cfg := testConfig("s0")
	cfg.CompactMaxFiles = 4
	e := newEnv(t, memory.New(), cfg)
	ctx := context.Background()
	n := 0
	for round := 0; round < 10; round++ {
		for i := 0; i < 5; i++ {
			e.put(fmt.Sprintf("id-%03d", n), n*97%9000)
			n++
		}
		e.merge()
	}
	st, err := e.tb.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != int64(n) || st.DataFiles >= 4+1 {
		t.Fatalf("status after compaction: %+v", st)
	}
	for i := 0; i < n; i++ {
		e.mustRead(fmt.Sprintf("id-%03d", i), i*97%9000)
	}
	// Retention: only the newest RetainVersions versions are readable pinned.
	if _, err := e.tb.Get(ctx, "id-000", ReadOptions{Version: st.Version}); err != nil {
		t.Fatalf("pinned latest: %v", err)
	}
	if _, err := e.tb.Get(ctx, "id-000", ReadOptions{Version: 1}); !errors.Is(err, ErrVersionGone) {
		t.Fatalf("pinned collected version: %v", err)
	}
	if _, err := e.tb.Get(ctx, "id-000", ReadOptions{Version: st.Version + 5}); !errors.Is(err, ErrNoVersion) {
		t.Fatalf("pinned future version: %v", err)
	}
	// Only files of retained versions remain.
	live := map[string]bool{}
	for _, v := range []uint64{st.Version, st.Version - 1} {
		m, err := e.tb.loadManifest(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m.Files {
			live[f.Name] = true
		}
	}
	_ = e.store.List(ctx, e.tb.keys.DataPrefix(), objstore.ListOptions{}, func(en objstore.Entry) error {
		name, _, _ := e.tb.keys.ParseDataObject(en.Key)
		if !live[name] {
			t.Errorf("data file %s outlived retention", en.Key)
		}
		return nil
	})
}

// Pinned reads of version 1 (parent: the empty base, id ""), of the newest
// version, of a version newer than the process's view, and of one above
// the newest, with nothing racing: every retained version answers, the
// collected one is gone, the future one is ErrNoVersion.
func TestPinnedReadsWithNothingRacing(t *testing.T) {
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

// A pinned read in one process of a version another process collected
// answers ErrVersionGone (410), for a hit and a miss alike, not the rows
// it cached.
func TestPinnedReadOfVersionCollectedElsewhere(t *testing.T) {
	store := memory.New()
	w := newEnv(t, store, testConfig("s0"))
	walRow(t, w, "x", 10)
	if v := w.merge().Version; v != 1 {
		t.Fatalf("version %d", v)
	}
	r := newEnv(t, store, testConfig(""))
	ctx := context.Background()
	if _, err := r.tb.Get(ctx, "x", ReadOptions{Version: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.tb.Get(ctx, "absent", ReadOptions{Version: 1}); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ { // RetainVersions 2: version 1 is collected
		walRow(t, w, fmt.Sprintf("y%d", i), 10)
		w.merge()
	}
	if _, err := r.tb.Get(ctx, "x", ReadOptions{Version: 1}); !errors.Is(err, ErrVersionGone) {
		t.Fatalf("pinned hit of a collected version: %v", err)
	}
	if _, err := r.tb.Get(ctx, "absent", ReadOptions{Version: 1}); !errors.Is(err, ErrVersionGone) {
		t.Fatalf("pinned miss of a collected version: %v", err)
	}
}

// A pinned read paused after locating its row while merges compact the
// version's file away and retention collects the version and that file:
// the read answers ErrVersionGone, never another version's rows, a 404 or
// a missing file; the retained versions answer their content.
func TestPinnedReadPausedAcrossCompactionAndCollection(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	cfg := testConfig("s0")
	cfg.CompactMaxFiles = 2
	w := newEnv(t, mem, cfg)
	walRow(t, w, "x", 1000)
	if v := w.merge().Version; v != 1 {
		t.Fatalf("version %d", v)
	}
	r := newEnv(t, mem, testConfig(""))
	gate := r.hooks.Pause(hookReadLocated)
	type got struct {
		rec *Record
		err error
	}
	ch := make(chan got, 1)
	go func() {
		rec, err := r.tb.Get(ctx, "x", ReadOptions{Version: 1})
		ch <- got{rec, err}
	}()
	mustWait(t, gate)
	compacted := 0
	for i, id := range []string{"y", "z", "u"} {
		walRow(t, w, id, 1000)
		res := w.merge()
		compacted += res.CompactedFiles
		if res.Version != uint64(i+2) {
			t.Fatalf("merge %d: %+v", i, res)
		}
	}
	if compacted == 0 {
		t.Fatal("no compaction happened")
	}
	if _, err := mem.Head(ctx, w.tb.keys.Version(1)); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("version 1 still retained: %v", err)
	}
	gate.Release()
	g := <-ch
	if !errors.Is(g.err, ErrVersionGone) {
		t.Fatalf("pinned read of collected version 1: %+v %v, want ErrVersionGone", g.rec, g.err)
	}
	for _, v := range []uint64{3, 4} {
		p, err := r.tb.OpenPayload(ctx, "x", 0, -1, ReadOptions{Version: v})
		if err != nil {
			t.Fatalf("pinned read of x at retained version %d: %v", v, err)
		}
		var buf bytes.Buffer
		_, err = buf.ReadFrom(p)
		p.Close()
		if err != nil || !bytes.Equal(buf.Bytes(), payloadFor("x", 1000)) {
			t.Fatalf("pinned payload of x at version %d: %v", v, err)
		}
	}
	if _, err := r.tb.Get(ctx, "u", ReadOptions{Version: 3}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("u at version 3 (merged in 4): %v, want ErrNotFound", err)
	}
}

// A pinned read of the newest version (2), by a fresh reader (no view),
// races a merge that commits version 3 (version 2 stays retained:
// RetainVersions 2). The read's HEAD of version 3 answers "missing" before
// 3 lands; the read does not conclude "2 < latest 3, and 3 is missing, so
// 2 was collected": it answers x at version 2 (no false 410).
//
//  1. r (fresh: no view) reads x pinned at version 2: it HEADs 2 and 3
//     in parallel; the HEAD of 3 answers ErrNotFound and is held there.
//  2. w merges z: version 3 is committed; 1 is collected, 2 is kept.
//  3. The HEAD's answer (missing) reaches the read: x at version 2.
func TestPinnedNewestRacesNextCommitFreshReader(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := twoVersions(t, mem)
	r, f := faultyEnv(t, mem, testConfig(""))
	held, done := holdPinnedRead(t, f, r, "x", 2, 3)
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

// The same race with the reader's own view at the pinned version: between
// the HEAD of v+1 (missing) and the read's look at its snapshot, this
// process's view moves to v+1 (its own merge), and the read still does not
// conclude "v < known, v+1 missing: collected".
//
//  1. r's view is version 2 (newest). r reads x pinned at 2; the HEAD of 3
//     answers ErrNotFound and is held.
//  2. r itself merges z (version 3; its view moves to 3; 2 is retained).
//  3. The HEAD's answer reaches the read: x at version 2.
func TestPinnedNewestRacesOwnMerge(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := twoVersions(t, mem)
	r, f := faultyEnv(t, mem, testConfig(""))
	if _, err := r.tb.Get(ctx, "y", ReadOptions{}); err != nil {
		t.Fatal(err)
	}
	if v := r.tb.snap.Load().version(); v != 2 {
		t.Fatalf("r's view is version %d, want 2", v)
	}
	held, done := holdPinnedRead(t, f, r, "x", 2, 3)
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

// A pinned read of the next version (3) racing its commit: the HEAD of 3
// answers missing, then 3 is committed. The read answers ErrNoVersion (or
// z), never ErrVersionGone: 3 was never collected (it did not exist when
// the read began, and is retained now).
func TestPinnedFutureVersionRacesItsCommit(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	w := twoVersions(t, mem)
	r, f := faultyEnv(t, mem, testConfig(""))
	if _, err := r.tb.Get(ctx, "y", ReadOptions{}); err != nil {
		t.Fatal(err)
	}
	held, done := holdPinnedRead(t, f, r, "z", 3, 3)
	walRow(t, w, "z", 1000)
	w.merge() // version 3
	held.Release()
	err := <-done
	if errors.Is(err, ErrVersionGone) {
		t.Errorf("pinned read of version 3 racing its commit: %v; want ErrNoVersion (or z), never gone: 3 was never collected", err)
	} else if err != nil && !errors.Is(err, ErrNoVersion) {
		t.Errorf("pinned read of version 3: %v", err)
	}
}

// The HEAD of v+1 fails transiently: the read is decided by the collection
// floor instead, neither failing with the HEAD's error nor answering gone.
func TestPinnedNextHeadFailsFloorDecides(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	twoVersions(t, mem)
	r, f := faultyEnv(t, mem, testConfig(""))
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

// Rolling upgrade: version 1 committed by this release (its object
// carries id metadata), version 2 by the previous release's merger (its
// commitManifest put no metadata, its manifest has no id fields). Version 1
// is retained and in the table's history; a pinned read of it answers its
// rows, not ErrVersionGone.
func TestPinnedReadNextVersionByPreviousRelease(t *testing.T) {
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

package engine

// Shared setup for the engine's tests: configurations, a process on a
// store (env), the common moves of writers, mergers, drops and second
// processes, and the checks every scenario ends with. Nothing here asserts
// an invariant of its own.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

// testConfig is small and fast: zero grace periods exercise the reclaim
// races, tiny inline limits exercise external payloads.
func testConfig(shard string) Config {
	return Config{
		Shard:             shard,
		Partitions:        -1, // the shard protocol; partitions_test.go covers partitioned tables
		InlineMax:         4 << 10,
		GroupCommitWindow: time.Millisecond,
		GenMaxAge:         time.Hour, // tests seal explicitly with Flush
		ReclaimGrace:      0,
		RetainVersions:    2,
		RetainAge:         0,
		OrphanGrace:       time.Hour,
		CacheBytes:        8 << 20,
	}
}

// leaseConfig is testConfig with shard and merger leases (15s) on the
// fake clock clk.
func leaseConfig(shard string, clk *objstoretest.Clock) Config {
	cfg := testConfig(shard)
	cfg.LeaseDuration = 15 * time.Second
	cfg.Runtime = sched.WithClock(clk.Now)
	return cfg
}

// env is one process on a store: its DB, its handle of table t, and the
// hooks its pause points and failures are set through.
type env struct {
	t     *testing.T
	store objstore.Bucket
	db    *DB
	tb    *Table
	hooks *hook.Set
}

// newEnv opens a process on store, creating table t unless it exists.
func newEnv(t *testing.T, store objstore.Bucket, cfg Config) *env {
	t.Helper()
	hs := hook.NewSet()
	cfg.Hooks = hs.Func()
	db, err := Open(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := db.CreateTable(ctx, "t"); err != nil && !errors.Is(err, ErrTableExists) {
		t.Fatal(err)
	}
	tb, err := db.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hs.Reset()
		_ = db.Close(context.Background())
	})
	return &env{t: t, store: store, db: db, tb: tb, hooks: hs}
}

// put appends a new row id with a payload of size bytes; it must be
// created.
func (e *env) put(id string, size int) {
	e.t.Helper()
	res, err := e.tb.Append(context.Background(), Record{ID: id, RolloutID: "r-" + id, Sequence: 1}, bytes.NewReader(payloadFor(id, size)), int64(size))
	if err != nil {
		e.t.Fatalf("append %s: %v", id, err)
	}
	if !res.Created {
		e.t.Fatalf("append %s: not created", id)
	}
}

// mustRead reads id's payload and checks its bytes.
func (e *env) mustRead(id string, size int) {
	e.t.Helper()
	got, err := readPayload(e.tb, id)
	if err != nil {
		e.t.Fatalf("read %s: %v", id, err)
	}
	if !bytes.Equal(got, payloadFor(id, size)) {
		e.t.Fatalf("read %s: %d bytes, wrong content", id, len(got))
	}
}

// merge seals e's open generation and merges.
func (e *env) merge() MergeResult {
	e.t.Helper()
	ctx := context.Background()
	if err := e.tb.Flush(ctx); err != nil {
		e.t.Fatal(err)
	}
	res, err := e.tb.Merge(ctx, MergeOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// walKeys lists the WAL's segments and seal records (not the registry or
// the shards' heads, which live as long as the table).
func (e *env) walKeys() []string {
	var keys []string
	_ = e.store.List(context.Background(), e.tb.keys.WALPrefix(), objstore.ListOptions{}, func(en objstore.Entry) error {
		if k, ok := e.tb.keys.ParseWAL(en.Key); ok && (k.Registry || k.IsHead) {
			return nil
		}
		keys = append(keys, en.Key)
		return nil
	})
	return keys
}

// payloadFor derives a payload from the id so any read can be checked.
func payloadFor(id string, size int) []byte {
	seed := sha256.Sum256([]byte(id))
	rng := rand.New(rand.NewChaCha8(seed))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// readPayload reads id's whole payload from the table's latest view.
func readPayload(tb *Table, id string) ([]byte, error) {
	p, err := tb.OpenPayload(context.Background(), id, 0, -1, ReadOptions{})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return io.ReadAll(p)
}

// appendID appends id with a 100-byte payload.
func appendID(tb *Table, id string) error {
	_, err := tb.Append(context.Background(), Record{ID: id, RolloutID: "r"}, bytes.NewReader(payloadFor(id, 100)), 100)
	return err
}

// appendSized appends id with a payload of size bytes.
func appendSized(tb *Table, id string, size int) error {
	_, err := tb.Append(context.Background(), Record{ID: id, RolloutID: "r"}, bytes.NewReader(payloadFor(id, size)), int64(size))
	return err
}

// walRow writes id (inline and external sizes alike) into a sealed
// generation that is pending, not merged.
func walRow(t *testing.T, e *env, id string, size int) {
	e.put(id, size)
	if err := e.tb.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// checkAll asserts every acknowledged id reads back byte-equal, and that a
// scan of the latest view holds each exactly once and nothing else.
func checkAll(t *testing.T, tb *Table, acked map[string]int) {
	t.Helper()
	for id, n := range acked {
		got, err := readPayload(tb, id)
		if err != nil {
			t.Fatalf("acknowledged %s: %v", id, err)
		}
		if !bytes.Equal(got, payloadFor(id, n)) {
			t.Fatalf("acknowledged %s: wrong bytes", id)
		}
	}
	var buf bytes.Buffer
	if err := tb.Scan(context.Background(), &buf, ScanOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	if err := rowfile.ReadStream(&buf, func(_ int, r rowfile.Record) error { seen[r.ID]++; return nil }); err != nil {
		t.Fatal(err)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("%s scanned %d times", id, c)
		}
		if _, ok := acked[id]; !ok {
			t.Fatalf("unacknowledged %s visible", id)
		}
	}
	if len(seen) != len(acked) {
		t.Fatalf("scan has %d rows, %d acknowledged", len(seen), len(acked))
	}
}

// errCrash is the failure a hook injects at a crash point.
var errCrash = errors.New("simulated crash")

// errOvertaken is what a store answers for a conditional Put that may have
// landed before another write replaced it (Azure: the SDK's resend after a
// lost answer fails its condition, and the blob is not this Put's): not
// ErrPrecondition, which would promise that nothing was written.
var errOvertaken = errors.New("outcome unknown: the condition failed on a resend and the object is not this Put's")

// await runs fn on its own goroutine and returns its error on a channel.
func await(fn func() error) chan error {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	return ch
}

// mustWait waits until a faulty gate holds a call.
func mustWait(t *testing.T, g *faulty.Gate) {
	t.Helper()
	if err := g.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// waitCtx bounds a wait on a pause point, so a schedule that never
// reaches it fails instead of hanging.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type readResult struct {
	data []byte
	err  error
}

// goRead reads id's payload on its own goroutine.
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

// cfgMerge merges through e with compaction bounded at compactMax files.
func cfgMerge(t *testing.T, e *env, compactMax int) {
	t.Helper()
	e.tb.db.cfg.CompactMaxFiles = compactMax
	e.merge()
}

// baseServed counts reads served from a base, whether the process knew
// that base when the read began or learned of it during the read.
func baseServed(st *Stats) int64 { return st.ReadBaseHits.Load() + st.ReadLateBaseHits.Load() }

func readScanRows(t *testing.T, stream []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	if err := readStreamRows(stream, func(r Record) { out[r.ID] = r.Payload }); err != nil {
		t.Fatal(err)
	}
	return out
}

func readStreamRows(stream []byte, fn func(Record)) error {
	return rowfile.ReadStream(bytes.NewReader(stream), func(_ int, r rowfile.Record) error {
		fn(r)
		return nil
	})
}

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

// faultyGate holds one of several processes' faulty gates.
type faultyGate struct{ *faulty.Gate }

// faultyEnv opens a process on store through a faulty layer, whose rules
// are removed when the test ends.
func faultyEnv(t *testing.T, store objstore.Bucket, cfg Config) (*env, *faulty.Bucket) {
	t.Helper()
	f := faulty.New(store)
	t.Cleanup(f.Reset)
	return newEnv(t, f, cfg), f
}

// noMergerLease turns the merger lease off, so two mergers can run at once
// and only the commit's create-if-absent keeps them apart.
func noMergerLease(cfg Config) Config {
	cfg.LeaseDuration = -1
	return cfg
}

// twoMergers opens two merging processes on mem without the merger lease:
// m1 through a faulty layer (to hold or fail its steps), m2 directly.
func twoMergers(t *testing.T, mem *memory.Bucket, cfg Config) (m1 *env, f1 *faulty.Bucket, m2 *env) {
	t.Helper()
	cfg = noMergerLease(cfg)
	m1, f1 = faultyEnv(t, mem, cfg)
	m2 = newEnv(t, mem, cfg)
	return m1, f1, m2
}

// crashAfterCommit makes m's merges stop right after their commit (before
// their own retention and reclaim), and returns the error they stop with.
func crashAfterCommit(m *env) error {
	errCrashed := errors.New("M1 crashes after its commit")
	m.hooks.Do(hookMergeAfterCommit, func(context.Context) error { return errCrashed })
	return errCrashed
}

// holdCommit starts a merge on m (whose store is f) and holds it before
// its create-if-absent of the version's manifest: its data files are
// written, its commit not yet sent. It returns the gate and the merge's
// answer.
func holdCommit(t *testing.T, f *faulty.Bucket, m *env, opts MergeOptions) (*faulty.Gate, chan error) {
	t.Helper()
	held := f.Pause(faulty.OpPut, faulty.Before, faulty.KeyContains("/base/_versions/"))
	done := await(func() error { _, err := m.tb.Merge(context.Background(), opts); return err })
	mustWait(t, held)
	return held, done
}

// openDB opens a bare process (no table handle) on store, closed when the
// test ends.
func openDB(t *testing.T, store objstore.Bucket, cfg Config) *DB {
	t.Helper()
	db, err := Open(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	return db
}

// dropAndCreate drops table t through db and creates it again: a new,
// empty incarnation.
func dropAndCreate(t *testing.T, db *DB) {
	t.Helper()
	ctx := context.Background()
	if err := db.DropTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
}

// recreateTable is dropAndCreate, returning db's handle of the new
// incarnation.
func recreateTable(t *testing.T, db *DB) *Table {
	t.Helper()
	dropAndCreate(t, db)
	tb, err := db.Table(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// takeOver lets the current owner's shard lease of s0 lapse and has a new
// process take the shard by appending b1, which seals the previous owner's
// generation at the head's count.
func takeOver(t *testing.T, mem *memory.Bucket, clk *objstoretest.Clock) *env {
	t.Helper()
	clk.Advance(16 * time.Second)
	b := newEnv(t, mem, leaseConfig("s0", clk))
	if err := appendID(b.tb, "b1"); err != nil {
		t.Fatalf("B takes the shard: %v", err)
	}
	return b
}

// fencedOwnersLateClaim forces a fenced owner's late registry claim:
//
//  1. A owns s0 and acknowledges a1; A stalls and its lease lapses.
//  2. B takes s0 (its append is an identical retry of a1: B commits
//     nothing): it registers, seals A's generation, claims the next, and is
//     held just before its "only me" registry swap (recover's
//     setActive(only=true), its second registry swap); B's lease lapses too.
//  3. C takes s0: registers, seals B's generation, claims the next, swaps
//     the registry to itself, and acknowledges c1.
//  4. B's held swap goes on (its condition fails: C moved the registry, so
//     it is applied again to the registry as C left it), and B's append
//     returns.
//
// arm runs on B's faulty store before B starts, to add rules of its own.
// B is still open when it returns.
func fencedOwnersLateClaim(t *testing.T, mem *memory.Bucket, clk *objstoretest.Clock, arm func(fb *faulty.Bucket)) (b, c *env) {
	t.Helper()
	a := newEnv(t, mem, leaseConfig("s0", clk))
	if err := appendID(a.tb, "a1"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(16 * time.Second) // A's lease lapsed (A stalls)
	b, fb := faultyEnv(t, mem, leaseConfig("s0", clk))
	held := fb.Pause(faulty.OpPut, faulty.Before, faulty.KeyContains("_registry.json"), faulty.Skip(1))
	arm(fb)
	bDone := await(func() error { return appendID(b.tb, "a1") }) // an identical retry: B commits nothing
	mustWait(t, held)
	clk.Advance(16 * time.Second) // B's lease lapsed while it stalls
	c = newEnv(t, mem, leaseConfig("s0", clk))
	if err := appendID(c.tb, "c1"); err != nil {
		t.Fatalf("C takes the shard: %v", err)
	}
	held.Release()
	if err := <-bDone; err != nil {
		t.Fatalf("B's identical retry: %v", err)
	}
	return b, c
}

// ownerWithA1 opens process A on store as s0's writer (with a shard lease
// on clk) and has it acknowledge a1.
func ownerWithA1(t *testing.T, store objstore.Bucket, clk *objstoretest.Clock) *env {
	t.Helper()
	a := newEnv(t, store, leaseConfig("s0", clk))
	if err := appendID(a.tb, "a1"); err != nil {
		t.Fatal(err)
	}
	return a
}

// readAcrossReclaim starts a read of id on r, pauses it at point, merges
// and reclaims through another process on store meanwhile, and returns
// the read's answer.
func readAcrossReclaim(t *testing.T, r *env, store objstore.Bucket, point, id string) readResult {
	t.Helper()
	gate := r.hooks.Pause(point)
	ch := goRead(r.tb, id)
	if err := gate.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	mergeOther(t, store)
	gate.Release()
	return <-ch
}

// holdPinnedRead starts r's read of id pinned at version v, and holds it
// once the HEAD of version held (through r's faulty store f) has answered.
func holdPinnedRead(t *testing.T, f *faulty.Bucket, r *env, id string, v, held uint64) (*faulty.Gate, chan error) {
	t.Helper()
	gate := f.Pause(faulty.OpHead, faulty.After, faulty.Key(r.tb.keys.Version(held)))
	done := await(func() error { _, err := r.tb.Get(context.Background(), id, ReadOptions{Version: v}); return err })
	mustWait(t, gate)
	return gate, done
}

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

func leaseConfig(shard string, clk *objstoretest.Clock) Config {
	cfg := testConfig(shard)
	cfg.LeaseDuration = 15 * time.Second
	cfg.Runtime = sched.WithClock(clk.Now)
	return cfg
}

type env struct {
	t     *testing.T
	store objstore.Bucket
	db    *DB
	tb    *Table
	hooks *hook.Set
}

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

func readPayload(tb *Table, id string) ([]byte, error) {
	p, err := tb.OpenPayload(context.Background(), id, 0, -1, ReadOptions{})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return io.ReadAll(p)
}

func appendID(tb *Table, id string) error {
	_, err := tb.Append(context.Background(), Record{ID: id, RolloutID: "r"}, bytes.NewReader(payloadFor(id, 100)), 100)
	return err
}

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

func mustWait(t *testing.T, g *faulty.Gate) {
	t.Helper()
	if err := g.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
}

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

type faultyGate struct{ *faulty.Gate }

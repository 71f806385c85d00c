package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/memory"
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

func readPayload(tb *Table, id string) ([]byte, error) {
	p, err := tb.OpenPayload(context.Background(), id, 0, -1, ReadOptions{})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return io.ReadAll(p)
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

func TestAppendReadMergeRead(t *testing.T) {
	e := newEnv(t, memory.New(), testConfig("s0"))
	sizes := map[string]int{"a": 0, "b": 10, "c": 4 << 10, "d": 4<<10 + 1, "e": 100 << 10}
	for id, n := range sizes {
		e.put(id, n)
	}
	for id, n := range sizes {
		e.mustRead(id, n)
		rec, err := e.tb.Get(context.Background(), id, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rec.PayloadSize != int64(n) || rec.PayloadSHA256 != sha256.Sum256(payloadFor(id, n)) || rec.RolloutID != "r-"+id {
			t.Fatalf("metadata of %s wrong: %+v", id, rec)
		}
	}
	if _, err := e.tb.Get(context.Background(), "absent", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("absent: %v", err)
	}
	st := e.db.Stats()
	if st.ReadWALHits.Load() == 0 {
		t.Fatal("no WAL hits counted before the merge")
	}
	res := e.merge()
	if res.Version != 1 || res.Rows != int64(len(sizes)) || len(res.Merged) != 1 || len(res.Reclaimed) != 1 {
		t.Fatalf("merge result: %+v", res)
	}
	if keys := e.walKeys(); len(keys) != 0 {
		t.Fatalf("WAL not reclaimed: %v", keys)
	}
	base := st.ReadBaseHits.Load()
	for id, n := range sizes {
		e.mustRead(id, n)
	}
	if st.ReadBaseHits.Load()-base != int64(len(sizes)) {
		t.Fatalf("reads after merge were not base hits")
	}
	// Ranged reads from the base: inline and external payloads.
	for _, id := range []string{"c", "e"} {
		p, err := e.tb.OpenPayload(context.Background(), id, 100, 1000, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(p)
		p.Close()
		if !bytes.Equal(got, payloadFor(id, sizes[id])[100:1100]) {
			t.Fatalf("range of %s wrong", id)
		}
	}
	var re *RangeError
	if _, err := e.tb.OpenPayload(context.Background(), "b", 11, -1, ReadOptions{}); !errors.As(err, &re) || re.Size != 10 {
		t.Fatalf("range past end: %v", err)
	}
	if e.db.InFlightPayloadBytes() != 0 {
		t.Fatalf("budget leaked: %d", e.db.InFlightPayloadBytes())
	}
}

func TestIdenticalRetryAndConflict(t *testing.T) {
	e := newEnv(t, memory.New(), testConfig("s0"))
	ctx := context.Background()
	rec := Record{ID: "x", RolloutID: "r", Metadata: []byte(`{"a":1}`)}
	for round := 0; round < 2; round++ { // in the WAL, then in the base
		res, err := e.tb.Append(ctx, rec, strings.NewReader("hello"), 5)
		if err != nil || res.Created != (round == 0) {
			t.Fatalf("round %d: first append: %+v %v", round, res, err)
		}
		retry := rec
		retry.Metadata = []byte(`{ "a" : 1 }`)
		res, err = e.tb.Append(ctx, retry, strings.NewReader("hello"), 5)
		if err != nil || res.Created {
			t.Fatalf("round %d: identical retry: %+v %v", round, res, err)
		}
		if _, err := e.tb.Append(ctx, rec, strings.NewReader("hellO"), 5); !errors.Is(err, ErrConflict) {
			t.Fatalf("round %d: different payload: %v", round, err)
		}
		other := rec
		other.Sequence = 2
		if _, err := e.tb.Append(ctx, other, strings.NewReader("hello"), 5); !errors.Is(err, ErrConflict) {
			t.Fatalf("round %d: different field: %v", round, err)
		}
		e.merge()
		rec.ID = "x" // same id: now in the base
	}
	if got := e.db.Stats().Appends.Load(); got != 1 {
		t.Fatalf("%d rows appended, want 1", got)
	}
}

func TestConcurrentSameIDOneWinner(t *testing.T) {
	e := newEnv(t, memory.New(), testConfig("s0"))
	ctx := context.Background()
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := e.tb.Append(ctx, Record{ID: "same", RolloutID: "r", Sequence: int64(i % 2)}, strings.NewReader("p"), 1)
			errs <- err
		}()
	}
	var ok, conflict int
	for range n {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, ErrConflict):
			conflict++
		default:
			t.Fatal(err)
		}
	}
	if ok+conflict != n || ok == 0 || conflict == 0 {
		t.Fatalf("ok=%d conflict=%d", ok, conflict)
	}
	e.merge()
	st, _ := e.tb.Status(ctx)
	if st.Rows != 1 {
		t.Fatalf("%d rows in base, want 1", st.Rows)
	}
}

func TestPayloadSizeMismatchAndLimit(t *testing.T) {
	cfg := testConfig("s0")
	cfg.MaxPayload = 64 << 10
	e := newEnv(t, memory.New(), cfg)
	ctx := context.Background()
	if _, err := e.tb.Append(ctx, Record{ID: "a", RolloutID: "r"}, strings.NewReader("abc"), 5); !errors.Is(err, ErrInvalid) {
		t.Fatalf("short body: %v", err)
	}
	if _, err := e.tb.Append(ctx, Record{ID: "b", RolloutID: "r"}, bytes.NewReader(make([]byte, 100<<10)), -1); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized body: %v", err)
	}
	if _, err := e.tb.Append(ctx, Record{ID: "c"}, strings.NewReader(""), 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("missing rollout_id: %v", err)
	}
	// Nothing of the refused appends is left behind.
	var keys []string
	_ = e.store.List(ctx, e.tb.keys.PayloadsPrefix(), objstore.ListOptions{}, func(en objstore.Entry) error {
		keys = append(keys, en.Key)
		return nil
	})
	if len(keys) != 0 || len(e.walKeys()) != 0 {
		t.Fatalf("refused appends left objects: %v %v", keys, e.walKeys())
	}
}

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

func TestDropSeenByOtherProcess(t *testing.T) {
	store := memory.New()
	a := newEnv(t, store, testConfig("s0"))
	b := newEnv(t, store, testConfig(""))
	a.put("x", 10)
	b.mustRead("x", 10)
	ctx := context.Background()
	if err := a.db.DropTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.tb.Append(ctx, Record{ID: "y", RolloutID: "r"}, strings.NewReader(""), 0); !errors.Is(err, ErrTableNotFound) {
		t.Fatalf("append to a dropped table: %v", err)
	}
	if _, err := b.tb.Get(ctx, "x", ReadOptions{}); !errors.Is(err, ErrTableNotFound) {
		t.Fatalf("other process reading a dropped table: %v", err)
	}
	// The drop leaves only its tombstones (the registry and the head of
	// each shard, which fence writers of the dropped incarnation
	// elsewhere); collecting dropped incarnations removes them.
	left := func() []string {
		var keys []string
		_ = store.List(ctx, "t/", objstore.ListOptions{}, func(e objstore.Entry) error { keys = append(keys, e.Key); return nil })
		return keys
	}
	if keys := left(); len(keys) != 2 || !strings.HasSuffix(keys[0], "/wal/_registry.json") || !strings.HasSuffix(keys[1], "/wal/s0/_head.json") {
		t.Fatalf("objects left after drop: %v", keys)
	}
	if n, err := a.db.CollectDropped(ctx, 0); err != nil || n != 2 {
		t.Fatalf("CollectDropped = %d, %v", n, err)
	}
	if keys := left(); len(keys) != 0 {
		t.Fatalf("objects left after collecting: %v", keys)
	}
}

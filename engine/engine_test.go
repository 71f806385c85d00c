package engine

// An acknowledged row reads back byte-equal, from the WAL and from the
// base, whole and by range. Ids are immutable: an identical retry is
// answered without a second row, other content under the same id is a
// conflict, and a refused append leaves nothing behind.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/memory"
)

// Rows of every payload size (empty, inline, at and past the inline
// bound, external) read back with their metadata from the WAL and, after a
// merge that reclaims the WAL, from the base, whole and by range; a range
// past the end is a RangeError, and the payload budget is returned.
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

// An identical retry (metadata equal as JSON) is answered Created=false;
// a different payload or field under the same id is ErrConflict; in the
// WAL and in the base alike, and only one row is appended.
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

// Concurrent appends of one id with two contents: some succeed (one row),
// the others are conflicts, and the base holds one row.
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

// A body shorter than announced, an oversized body and a missing
// rollout_id are refused, and leave no object behind.
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

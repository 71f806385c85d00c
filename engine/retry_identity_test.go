package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore/memory"
)

// An append of an existing id is an identical retry only when it says the
// same thing: metadata compared as a JSON value (numbers by exact value,
// keys in any order), and a created_at it gives equal to the stored one
// to the microsecond. A retry that gives no created_at matches the one the
// writer stamped. Checked against rows the writer has just committed (its
// own memory of them), then again once they are sealed and merged (found
// by the commit's lookup).
func TestRetryIdentity(t *testing.T) {
	e := newEnv(t, memory.New(), testConfig("s0"))
	ctx := context.Background()
	at := time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)
	stored := at.Truncate(time.Microsecond)

	appendRec := func(rec Record) (AppendResult, error) {
		rec.RolloutID = "r"
		p := payloadFor(rec.ID, 50)
		return e.tb.Append(ctx, rec, bytes.NewReader(p), int64(len(p)))
	}
	appendBatch := func(recs ...Record) ([]AppendResult, error) {
		var items []BatchItem
		for _, rec := range recs {
			rec.RolloutID = "r"
			items = append(items, BatchItem{Record: rec, Payload: payloadFor(rec.ID, 50)})
		}
		return e.tb.AppendBatch(ctx, items)
	}
	meta := func(s string) json.RawMessage { return json.RawMessage(s) }

	if r, err := appendRec(Record{ID: "given", CreatedAt: at, Metadata: meta(`{"a":1.0,"n":9007199254740993}`)}); err != nil || !r.Created {
		t.Fatalf("first append: %+v, %v", r, err)
	}
	res, err := appendRec(Record{ID: "stamped", Metadata: meta(`{"a":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	stamped := res.Record.CreatedAt

	check := func(stage string) {
		t.Helper()
		retries := []struct {
			name string
			rec  Record
		}{
			{"same created_at, numbers spelled otherwise, keys reordered", Record{ID: "given", CreatedAt: at, Metadata: meta(`{"n":9007199254740993.0,"a":1}`)}},
			{"same created_at to the microsecond", Record{ID: "given", CreatedAt: stored.Add(999 * time.Nanosecond), Metadata: meta(`{"a":1e0,"n":9007199254740993}`)}},
			{"same created_at in another zone", Record{ID: "given", CreatedAt: at.In(time.FixedZone("x", 3600)), Metadata: meta(`{"a":1,"n":9007199254740993}`)}},
			{"no created_at", Record{ID: "given", Metadata: meta(`{"a":1,"n":9007199254740993}`)}},
			{"stamped, no created_at", Record{ID: "stamped", Metadata: meta(`{"a":1.0}`)}},
			{"stamped, the stamped created_at", Record{ID: "stamped", CreatedAt: stamped, Metadata: meta(`{"a":1.00}`)}},
		}
		for _, c := range retries {
			r, err := appendRec(c.rec)
			if err != nil || r.Created {
				t.Errorf("%s: retry %s: %+v, %v; want an identical retry", stage, c.name, r, err)
				continue
			}
			if want := map[string]time.Time{"given": stored, "stamped": stamped}[c.rec.ID]; !r.Record.CreatedAt.Equal(want) {
				t.Errorf("%s: retry %s answered created_at %s, want %s", stage, c.name, r.Record.CreatedAt, want)
			}
			if rs, err := appendBatch(c.rec); err != nil || rs[0].Created {
				t.Errorf("%s: batch retry %s: %+v, %v; want an identical retry", stage, c.name, rs, err)
			}
		}
		conflicts := []struct {
			name string
			rec  Record
		}{
			{"another created_at", Record{ID: "given", CreatedAt: stored.Add(time.Microsecond), Metadata: meta(`{"a":1,"n":9007199254740993}`)}},
			{"a number beyond float64 precision", Record{ID: "given", CreatedAt: at, Metadata: meta(`{"a":1,"n":9007199254740992}`)}},
			{"another number", Record{ID: "given", Metadata: meta(`{"a":1.5,"n":9007199254740993}`)}},
			{"stamped, another created_at", Record{ID: "stamped", CreatedAt: stamped.Add(-time.Second), Metadata: meta(`{"a":1}`)}},
		}
		for _, c := range conflicts {
			if r, err := appendRec(c.rec); !errors.Is(err, ErrConflict) {
				t.Errorf("%s: retry with %s: %+v, %v; want ErrConflict", stage, c.name, r, err)
			}
			if rs, err := appendBatch(Record{ID: "fresh-" + stage + c.name}, c.rec); !errors.Is(err, ErrConflict) {
				t.Errorf("%s: batch retry with %s: %+v, %v; want ErrConflict", stage, c.name, rs, err)
			}
		}
		got, err := e.tb.Get(ctx, "given", ReadOptions{})
		if err != nil || !got.CreatedAt.Equal(stored) || string(got.Metadata) != `{"a":1.0,"n":9007199254740993}` {
			t.Fatalf("%s: stored row %+v, %v", stage, got, err)
		}
	}
	check("committed")
	e.merge()
	check("merged")

	// Within one batch, a repeated item that gives a created_at must give
	// the first one's.
	if _, err := appendBatch(Record{ID: "dup", CreatedAt: at}, Record{ID: "dup", CreatedAt: at.Add(time.Second)}); !errors.Is(err, ErrConflict) {
		t.Errorf("batch repeating an id with another created_at: %v", err)
	}
	if rs, err := appendBatch(Record{ID: "dup", CreatedAt: at, Metadata: meta(`[1]`)}, Record{ID: "dup", Metadata: meta(`[1.0]`)}); err != nil || !rs[0].Created || rs[1].Created {
		t.Errorf("batch repeating an id identically: %+v, %v", rs, err)
	}
}

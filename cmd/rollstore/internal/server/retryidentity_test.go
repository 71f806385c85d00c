package server

import (
	"fmt"
	"net/http"
	"testing"
)

// A second write of a stored id is 200 only when it says the same thing:
// metadata the same JSON value (a float as another client spells it, keys
// in another order), and a created_at, if it gives one, equal to the
// stored one to the microsecond; else 409, never a 200 that drops what the
// client sent. A retry that gives no created_at matches.
func TestPutRetryIdentity(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	payload := []byte("same payload")
	put := func(id, fields string) response {
		t.Helper()
		return e.put("t", id, fields, payload)
	}
	want(t, put("x", `{"rollout_id":"r","created_at":"2025-03-04T05:06:07.123456789Z","metadata":{"a":1.0,"n":9007199254740993,"s":"é"}}`), http.StatusCreated, "")
	want(t, put("y", `{"rollout_id":"r","metadata":{"a":1}}`), http.StatusCreated, "")
	var stamped struct {
		CreatedAt string `json:"created_at"`
	}
	e.do("GET", rolloutURL("t", "y"), nil).decode(t, &stamped)

	for _, c := range []struct{ id, fields string }{
		{"x", `{"rollout_id":"r","created_at":"2025-03-04T05:06:07.123456789Z","metadata":{"a":1.0,"n":9007199254740993,"s":"é"}}`},
		{"x", `{"metadata":{"s":"\u00e9","n":9007199254740993,"a":1},"rollout_id":"r","created_at":"2025-03-04T05:06:07.123456Z"}`},
		{"x", `{"rollout_id":"r","created_at":"2025-03-04T06:06:07.1234569+01:00","metadata":{"a":1e0,"n":9007199254740993.0,"s":"é"}}`},
		{"x", `{"rollout_id":"r","metadata":{"a":1,"n":9007199254740993,"s":"é"}}`},
		{"y", `{"rollout_id":"r","metadata":{"a":1.0}}`},
		{"y", `{"rollout_id":"r","metadata":{"a":1},"created_at":"` + stamped.CreatedAt + `"}`},
	} {
		r := put(c.id, c.fields)
		want(t, r, http.StatusOK, "")
		var got struct {
			CreatedAt string `json:"created_at"`
		}
		r.decode(t, &got)
		if wantAt := map[string]string{"x": "2025-03-04T05:06:07.123456Z", "y": stamped.CreatedAt}[c.id]; got.CreatedAt != wantAt {
			t.Errorf("retry %s answered created_at %s, want the stored %s", c.fields, got.CreatedAt, wantAt)
		}
	}
	for _, fields := range []string{
		`{"rollout_id":"r","created_at":"2025-03-04T05:06:07.123457Z","metadata":{"a":1,"n":9007199254740993,"s":"é"}}`,
		`{"rollout_id":"r","created_at":"2026-01-01T00:00:00Z","metadata":{"a":1,"n":9007199254740993,"s":"é"}}`,
		`{"rollout_id":"r","metadata":{"a":1,"n":9007199254740992,"s":"é"}}`,
		`{"rollout_id":"r","metadata":{"a":1.5,"n":9007199254740993,"s":"é"}}`,
	} {
		want(t, put("x", fields), http.StatusConflict, codeConflict)
	}
	want(t, put("y", `{"rollout_id":"r","metadata":{"a":1},"created_at":"2001-01-01T00:00:00Z"}`), http.StatusConflict, codeConflict)

	r := e.do("GET", rolloutURL("t", "x"), nil)
	var got struct {
		CreatedAt string         `json:"created_at"`
		Metadata  map[string]any `json:"metadata"`
	}
	r.decode(t, &got)
	if got.CreatedAt != "2025-03-04T05:06:07.123456Z" || fmt.Sprint(got.Metadata["a"]) != "1" {
		t.Fatalf("stored record changed: %s", r.body)
	}
}

// The same rule for the items of an NDJSON batch: an item matching a
// stored record is counted as existing; one whose created_at or metadata
// differs refuses the whole batch with 409.
func TestBatchRetryIdentity(t *testing.T) {
	e := newEnv(t)
	e.createTableWith("t", 1) // all or nothing: one partition
	line := func(id, extra string) string { return ndjsonLine(id, "r", []byte("payload of "+id), extra) }
	first := line("x", `,"created_at":"2025-03-04T05:06:07.123456789Z","metadata":{"a":1.0,"n":9007199254740993}`) +
		line("y", `,"metadata":{"a":1}`)
	want(t, e.postBatch("t", mediaNDJSON, []byte(first)), http.StatusCreated, "")

	retry := line("x", `,"metadata":{"n":9007199254740993.0,"a":1},"created_at":"2025-03-04T05:06:07.123456Z"`) +
		line("y", `,"metadata":{"a":1e0}`) +
		line("x", `,"metadata":{"a":1,"n":9007199254740993}`)
	r := e.postBatch("t", mediaNDJSON, []byte(retry))
	want(t, r, http.StatusOK, "")
	var a batchAnswer
	r.decode(t, &a)
	if a.Created != 0 || a.Existing != 3 {
		t.Fatalf("retried batch answered %s", r.body)
	}

	for _, bad := range []string{
		line("z", "") + line("x", `,"created_at":"2025-03-04T05:06:07.123457Z","metadata":{"a":1,"n":9007199254740993}`),
		line("z", "") + line("x", `,"metadata":{"a":1,"n":9007199254740992}`),
		line("z", "") + line("y", `,"metadata":{"a":1},"created_at":"2001-01-01T00:00:00Z"`),
		line("z", `,"created_at":"2025-01-01T00:00:00Z"`) + line("z", `,"created_at":"2025-01-01T00:00:01Z"`),
	} {
		r := e.postBatch("t", mediaNDJSON, []byte(bad))
		want(t, r, http.StatusConflict, codeConflict)
		if r.errLine() != 2 {
			t.Errorf("conflict at line %d, want 2: %s", r.errLine(), r.body)
		}
	}
	want(t, e.do("GET", rolloutURL("t", "z"), nil), http.StatusNotFound, codeNotFound)
}

package server

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestPutDuringDropIsNotFound: a PUT that meets a DELETE of its table
// mid-way answers 404 table_not_found, never 503 shard_owned with a
// Retry-After: there is no other writer, and a retry would land in the
// table created next under that name. The shard's lease is still held by
// a write the drop fenced (held inside its takeover of the shard), and the
// DELETE is held after it tombstoned the table, before it deletes the
// table's descriptor.
func TestPutDuringDropIsNotFound(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	takingOver := e.hooks.Pause("head:cas")
	t.Cleanup(takingOver.Release)
	first := e.startPut(e.ts.URL, "t", "x", []byte("fenced by the drop"))
	if err := takingOver.Wait(ctx); err != nil {
		t.Fatal("the first PUT never reached its takeover of the shard")
	}
	fenced := e.hooks.Pause("drop:fenced")
	t.Cleanup(fenced.Release)
	dropped := make(chan response, 1)
	go func() { dropped <- e.do("DELETE", "/v1/tables/t", nil) }()
	if err := fenced.Wait(ctx); err != nil {
		t.Fatal("the DELETE never fenced the table")
	}

	for _, id := range []string{"y", "z"} {
		r := e.put("t", id, `{"rollout_id":"r"}`, []byte("written during the drop"))
		want(t, r, http.StatusNotFound, codeTableNotFound)
		if ra := r.header.Get("Retry-After"); ra != "" {
			t.Errorf("PUT during the drop invites a retry: Retry-After %q", ra)
		}
	}
	r := e.postBatch("t", mediaNDJSON, []byte(ndjsonLine("b1", "r", []byte("one"), "")+ndjsonLine("b2", "r", []byte("two"), "")))
	want(t, r, http.StatusNotFound, codeTableNotFound)
	if ra := r.header.Get("Retry-After"); ra != "" {
		t.Errorf("batch during the drop invites a retry: Retry-After %q", ra)
	}

	takingOver.Release()
	want(t, <-first, http.StatusNotFound, codeTableNotFound)
	fenced.Release()
	want(t, <-dropped, http.StatusNoContent, "")
	want(t, e.put("t", "after", `{"rollout_id":"r"}`, []byte("no table")), http.StatusNotFound, codeTableNotFound)
}

package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// TestAppendsRefusedForMergeBacklog: once more generations of the shard
// wait for a merge than WriteMaxPendingGens (--write-max-pending-per-shard)
// allows, an append, PUT or batch, is answered 503 overloaded with
// Retry-After and stores nothing, the table's status names the backlog,
// and reads are served as before; a merge lifts it.
func TestAppendsRefusedForMergeBacklog(t *testing.T) {
	const bound = 2
	e := newEnv(t, func(o *envOptions) { o.engine.WriteMaxPendingGens = bound })
	e.createTableWith("t", 1) // one partition: one shard's backlog
	tb, err := e.db.Table(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	// bound+1 sealed generations of one row each.
	for i := range bound + 1 {
		id := "g" + string(rune('0'+i))
		want(t, e.put("t", id, `{"rollout_id":"r"}`, []byte("payload "+id)), http.StatusCreated, "")
		if err := tb.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}

	r := e.put("t", "late", `{"rollout_id":"r"}`, []byte("refused"))
	want(t, r, http.StatusServiceUnavailable, codeOverloaded)
	if r.header.Get("Retry-After") == "" {
		t.Error("503 overloaded without Retry-After")
	}
	if !strings.Contains(r.errMessage(), "waiting for a merge") {
		t.Errorf("the 503 does not say why: %q", r.errMessage())
	}
	b := e.postBatch("t", mediaNDJSON, []byte(ndjsonLine("late-batch", "r", []byte("x"), "")))
	want(t, b, http.StatusServiceUnavailable, codeOverloaded)
	e.wantNothingStored("t", "late", "late-batch")

	st, err := e.client.TableStatus(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	// The engine's status names the backlog of the shard named for this
	// writer (Config.Shard), which a partitioned table does not have: only
	// a table without partitions gets it named there yet.
	if (st.Partitions == 0 && !strings.Contains(st.Backpressure, "waiting for a merge")) || len(st.Pending) != bound+1 {
		t.Errorf("status: backpressure %q, %d pending generations; want the backlog named and %d", st.Backpressure, len(st.Pending), bound+1)
	}
	// Reads are never refused for a backlog.
	want(t, e.do("GET", rolloutURL("t", "g0")+"/payload", nil), http.StatusOK, "")
	want(t, e.do("GET", "/v1/tables/t/rollouts", nil), http.StatusOK, "")

	e.merge("t")
	want(t, e.put("t", "late", `{"rollout_id":"r"}`, []byte("accepted")), http.StatusCreated, "")
	if st, err := e.client.TableStatus(context.Background(), "t"); err != nil || st.Backpressure != "" {
		t.Errorf("after the merge: backpressure %q, %v", st.Backpressure, err)
	}
}

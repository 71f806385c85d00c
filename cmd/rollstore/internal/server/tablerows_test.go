package server

import (
	"context"
	"fmt"
	"net/http"
	"testing"
)

// TestTableStatusCountsAcknowledgedRows: a table's status shows under
// "rows" every acknowledged row, merged or not, with the split beside it:
// "base_rows" merged into the base version, "pending_rows" in generations
// not yet merged. A newcomer who wrote rows and reads the status never
// sees "rows": 0.
func TestTableStatusCountsAcknowledgedRows(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	type counts struct {
		Rows        *int64 `json:"rows"`
		BaseRows    *int64 `json:"base_rows"`
		PendingRows *int64 `json:"pending_rows"`
	}
	check := func(stage string, rows, base, pending int64) {
		t.Helper()
		r := e.do("GET", "/v1/tables/t", nil)
		want(t, r, http.StatusOK, "")
		var c counts
		r.decode(t, &c)
		if c.Rows == nil || c.BaseRows == nil || c.PendingRows == nil ||
			*c.Rows != rows || *c.BaseRows != base || *c.PendingRows != pending {
			t.Fatalf("%s: status %s, want rows %d = base_rows %d + pending_rows %d", stage, r.body, rows, base, pending)
		}
		st, err := e.client.TableStatus(context.Background(), "t")
		if err != nil || st.Rows != rows || st.BaseRows != base || st.PendingRows != pending {
			t.Fatalf("%s: the Go client reads %+v, %v", stage, st, err)
		}
	}
	check("empty", 0, 0, 0)
	for i := range 25 {
		e.mustPut("t", fmt.Sprint("a-", i), []byte("payload"))
	}
	want(t, e.put("t", "a-0", `{"rollout_id":"r-a-0"}`, []byte("payload")), http.StatusOK, "") // a retry adds no row
	check("written, none merged", 25, 0, 25)
	e.merge("t")
	check("merged", 25, 25, 0)
	for i := range 3 {
		e.mustPut("t", fmt.Sprint("b-", i), []byte("payload"))
	}
	check("merged and written since", 28, 25, 3)
}

package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestFeedRowCarriedEmptyPayload: a carried empty payload ("") is told
// from one not carried (payload_url), and the record's fields decode.
func TestFeedRowCarriedEmptyPayload(t *testing.T) {
	var rows []FeedRow
	body := `[{"id":"a","rollout_id":"r","sequence":1,"created_at":"2026-01-02T03:04:05Z","payload_size":0,"payload_sha256":"x",` +
		`"partition":3,"offset":7,"acked_at":"2026-01-02T03:04:06Z","payload":""},` +
		`{"id":"b","rollout_id":"r","sequence":2,"created_at":"2026-01-02T03:04:05Z","payload_size":5,"payload_sha256":"y",` +
		`"partition":0,"offset":0,"acked_at":"2026-01-02T03:04:06Z","payload_url":"/v1/tables/t/rollouts/b/payload"}]`
	if err := json.Unmarshal([]byte(body), &rows); err != nil {
		t.Fatal(err)
	}
	a, b := rows[0], rows[1]
	if !a.Carried || a.Payload == nil || len(a.Payload) != 0 || a.ID != "a" || a.Partition != 3 || a.Offset != 7 || a.AckedAt.IsZero() || a.Sequence != 1 {
		t.Fatalf("carried empty payload: %+v", a)
	}
	if b.Carried || b.Payload != nil || b.PayloadURL == "" || b.PayloadSize != 5 {
		t.Fatalf("payload not carried: %+v", b)
	}
}

// TestFeedErrors: a 410 cursor_expired is a *CursorExpiredError with the
// oldest cursor, an ErrGone and an ErrCursorExpired; a page without a
// cursor is refused; the cursor is kept only from pages that came.
func TestFeedErrors(t *testing.T) {
	answer := func(w http.ResponseWriter, status int, body string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(body))
	}
	var next func(w http.ResponseWriter, r *http.Request)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { next(w, r) }))
	defer ts.Close()
	c, err := New(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fr := c.Feed("t", FeedOptions{Cursor: "c0"})
	next = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("cursor") != "c0" {
			t.Errorf("query %s", r.URL.RawQuery)
		}
		answer(w, 410, `{"error":{"code":"cursor_expired","message":"m","request_id":"q","oldest_cursor":"c-old"}}`)
	}
	_, err = fr.Next(ctx)
	var ce *CursorExpiredError
	if !errors.As(err, &ce) || ce.Oldest != "c-old" || !errors.Is(err, ErrGone) || !errors.Is(err, ErrCursorExpired) || errors.Is(err, ErrRebalanced) {
		t.Fatalf("410: %v", err)
	}
	if fr.Cursor() != "c0" {
		t.Fatalf("a failed read moved the cursor to %q", fr.Cursor())
	}
	next = func(w http.ResponseWriter, r *http.Request) {
		answer(w, 200, `{"rows":[],"lag_rows":0,"partitions":[]}`)
	}
	if _, err := fr.Next(ctx); err == nil {
		t.Fatal("a page without a cursor was taken")
	}
	next = func(w http.ResponseWriter, r *http.Request) {
		answer(w, 409, `{"error":{"code":"rebalanced","message":"m","request_id":"q"}}`)
	}
	if _, err := c.CommitConsumer(ctx, "t", "g", "m", "c"); !errors.Is(err, ErrRebalanced) || !errors.Is(err, ErrConflict) {
		t.Fatalf("409 rebalanced: %v", err)
	}
	next = func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("group") != "g" || q.Get("member") != "m" || q.Get("wait") != "1.5" || q.Get("payloads") != "all" || q.Get("columns") != "a,b" {
			t.Errorf("consumer query %s", r.URL.RawQuery)
		}
		answer(w, 200, `{"rows":[],"cursor":"c1","lag_rows":0,"partitions":[1],"epoch":2,"rebalanced":true}`)
	}
	m := c.Consumer("t", "g", "m", FeedOptions{Wait: 1500 * time.Millisecond, AllPayloads: true, Columns: []string{"a", "b"}})
	p, err := m.Next(ctx)
	if err != nil || !p.Rebalanced || p.Epoch != 2 || m.Cursor() != "c1" {
		t.Fatalf("consumer page %+v %v", p, err)
	}
}

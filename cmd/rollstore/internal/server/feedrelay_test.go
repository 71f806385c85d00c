package server

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rollstore/rollstore/client"
	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/objstore/memory"
)

// TestFeedRelayWakesLongPollsOnAnotherWritersPartition: a long-poll on
// pod b waiting on a partition pod a owns answers when a acknowledges a
// row there, although b probes heads only once an hour: b relayed the
// wait to a, which answered at its commit.
func TestFeedRelayWakesLongPollsOnAnotherWritersPartition(t *testing.T) {
	slowProbes := func(o *envOptions) {
		o.engine.FeedPollInterval = time.Hour
		o.server.FeedMaxWait = time.Hour
	}
	store := memory.New()
	a := newPod(t, store, "pod-a", slowProbes)
	b := newPod(t, store, "pod-b", slowProbes)
	want(t, a.do("PUT", "/v1/tables/t?partitions=4", nil), http.StatusCreated, "")
	agreeOnOwners(t, "t", a, b)
	id := idsOwnedBy(t, b, "t", "relayed", "pod-a", 1)[0]
	part := -1
	for p := range 4 {
		if engine.PartitionName(p) == b.table("t").PartitionOf(id) {
			part = p
		}
	}
	r := b.do("GET", feedPath("t", "partitions", fmt.Sprint(part), "cursor", "latest"), nil)
	want(t, r, http.StatusOK, "")

	done := make(chan response, 1)
	go func() {
		req, _ := http.NewRequest("GET", b.ts.URL+feedPath("t", "cursor", r.header.Get(hdrCursor), "wait", "3600"), nil)
		resp, err := b.http.Do(req)
		if err != nil {
			done <- response{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		var body bytes.Buffer
		body.ReadFrom(resp.Body)
		done <- response{status: resp.StatusCode, header: resp.Header, body: body.Bytes()}
	}()
	ctx := waitCtx(t)
	for b.db.Stats().FeedWaiting.Load() != 1 {
		select {
		case <-ctx.Done():
			t.Fatal("the long-poll never waited")
		case <-time.After(time.Millisecond): // polls the engine's state; it orders nothing
		}
	}
	want(t, a.put("t", id, []byte("relayed")), http.StatusCreated, "")
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the long-poll on b did not answer a's commit (an hour's probe interval)")
	}
	want(t, r, http.StatusOK, "")
	var p client.FeedPage
	r.decode(t, &p)
	if len(p.Rows) != 1 || p.Rows[0].ID != id || p.Rows[0].Partition != part {
		t.Fatalf("b's long-poll answered %+v", p)
	}
	if n := testutil.ToFloat64(b.srv.metrics.feedRelays.WithLabelValues("moved")); n < 1 {
		t.Fatalf("relays that saw a move: %v", n)
	}
}

// TestFeedAwaitRefusesBadInput: the internal await takes partitions of
// the table and a wait that is not negative; a drained owner answers at
// once with what it knows.
func TestFeedAwaitRefusesBadInput(t *testing.T) {
	e := newEnv(t)
	e.createTableWith("t", 2)
	path := strings.Replace(internalAwaitPath, "{table}", "t", 1)
	for _, body := range []string{`{"after":{"2":0},"wait_ns":0}`, `{"after":{"x":0},"wait_ns":0}`, `{"after":{},"wait_ns":0}`,
		`{"after":{"0":0},"wait_ns":-1}`, `{"after":{"0":0},"wait_ns":0,"colour":1}`} {
		want(t, e.do("POST", path, strings.NewReader(body), "Content-Type", "application/json"), http.StatusBadRequest, codeInvalidArgument)
	}
	want(t, e.do("POST", strings.Replace(internalAwaitPath, "{table}", "nope", 1), strings.NewReader(`{"after":{"0":0},"wait_ns":0}`),
		"Content-Type", "application/json"), http.StatusNotFound, codeTableNotFound)
	e.mustPut("t", "x", []byte("x"))
	r := e.do("POST", path, strings.NewReader(`{"after":{"0":0,"1":0},"wait_ns":3600000000000}`), "Content-Type", "application/json")
	want(t, r, http.StatusOK, "")
	var ans awaitAnswer
	r.decode(t, &ans)
	if ans.Known["0"]+ans.Known["1"] != 1 {
		t.Fatalf("known after one row: %v", ans.Known)
	}
	// Draining: a wait for a row that never comes answers at once.
	e.srv.StartDrain()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", e.ts.URL+path, strings.NewReader(`{"after":{"0":5,"1":5},"wait_ns":3600000000000}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("await while draining: %d", resp.StatusCode)
	}
}

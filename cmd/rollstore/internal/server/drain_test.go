package server

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/objstore/memory"
)

// startPut sends a PUT in the background and returns its answer channel.
func (e *testEnv) startPut(base, table, id string, payload []byte) <-chan response {
	ch := make(chan response, 1)
	go func() {
		req, _ := http.NewRequest("PUT", base+rolloutURL(table, id), bytes.NewReader(payload))
		req.Header.Set("Rollstore-Record", `{"rollout_id":"r"}`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			ch <- response{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		ch <- response{status: resp.StatusCode, header: resp.Header, body: b.Bytes()}
	}()
	return ch
}

func TestDrainRefusesNewRequestsAndFinishesInFlight(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	want(t, e.do("GET", "/readyz", nil), http.StatusOK, "")

	// An upload is in flight: its body is read, its append not yet durable.
	gate := e.hooks.Pause("write:after-payload")
	done := e.startPut(e.ts.URL, "t", "inflight", []byte("accepted before the drain"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := gate.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	e.srv.StartDrain()
	want(t, e.do("GET", "/readyz", nil), http.StatusServiceUnavailable, codeDraining)
	want(t, e.do("GET", "/healthz", nil), http.StatusOK, "")
	want(t, e.do("GET", "/metrics", nil), http.StatusOK, "")
	r := e.do("GET", rolloutURL("t", "inflight"), nil)
	want(t, r, http.StatusServiceUnavailable, codeDraining)
	if r.header.Get("Retry-After") == "" {
		t.Error("draining 503 without Retry-After")
	}
	want(t, e.put("t", "late", `{"rollout_id":"r"}`, []byte("x")), http.StatusServiceUnavailable, codeDraining)

	gate.Release()
	want(t, <-done, http.StatusCreated, "")
	// Durable, and the refused write left nothing.
	tb, err := e.db.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Get(ctx, "inflight", engine.ReadOptions{}); err != nil {
		t.Fatalf("in-flight upload not durable: %v", err)
	}
	if _, err := tb.Get(ctx, "late", engine.ReadOptions{}); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("refused upload: %v", err)
	}
}

// serveEnv runs Serve on a real listener.
type serveEnv struct {
	*testEnv
	base   string
	cancel context.CancelFunc
	served chan error
}

func newServeEnv(t *testing.T, cfg Config) *serveEnv {
	t.Helper()
	store := memory.New()
	if cfg.MaxClientShare == 0 {
		cfg.MaxClientShare = 1 // every test client is 127.0.0.1
	}
	e := newEnv(t, func(o *envOptions) {
		o.store = store
		o.server = cfg
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &serveEnv{testEnv: e, base: "http://" + ln.Addr().String(), cancel: cancel, served: make(chan error, 1)}
	go func() { s.served <- e.srv.Serve(ctx, ln) }()
	t.Cleanup(cancel)
	return s
}

func TestServeDrainsAndClosesDB(t *testing.T) {
	s := newServeEnv(t, Config{MergeInterval: -1, DrainTimeout: 10 * time.Second})
	req, _ := http.NewRequest("PUT", s.base+"/v1/tables/t", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create table: %v %v", resp, err)
	}

	gate := s.hooks.Pause("write:after-payload")
	done := s.startPut(s.base, "t", "inflight", []byte("in flight at SIGTERM"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := gate.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	s.srv.StartDrain() // what Serve does first on SIGTERM
	r, err := http.Get(s.base + "/readyz")
	if err != nil || r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("readyz while draining: %v %v", r, err)
	}
	r.Body.Close()
	s.cancel()
	gate.Release()
	if got := <-done; got.status != http.StatusCreated {
		t.Fatalf("in-flight upload: %d %s", got.status, got.body)
	}
	select {
	case err := <-s.served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Serve did not return after the drain")
	}
	// Closing the DB sealed the generation the upload went to.
	var sealed bool
	for _, k := range s.store.(*memory.Bucket).Keys() {
		sealed = sealed || strings.HasSuffix(k, "/_sealed.json")
	}
	if !sealed {
		t.Fatal("the open generation was not sealed at drain")
	}
	if _, err := http.Get(s.base + "/healthz"); err == nil {
		t.Fatal("listener still open after Serve returned")
	}
}

func TestServeDrainIsBounded(t *testing.T) {
	s := newServeEnv(t, Config{MergeInterval: -1, DrainTimeout: 300 * time.Millisecond})
	req, _ := http.NewRequest("PUT", s.base+"/v1/tables/t", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create table: %v %v", resp, err)
	}
	gate := s.hooks.Pause("write:after-payload")
	t.Cleanup(gate.Release)
	done := s.startPut(s.base, "t", "stuck", []byte("never finishes"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := gate.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.cancel()
	select {
	case err := <-s.served:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Serve after an over-long drain: %v, want DeadlineExceeded", err)
		}
	case <-ctx.Done():
		t.Fatal("Serve did not return within its drain bound")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("drain took %v, bound 300ms", d)
	}
	gate.Release()
	if got := <-done; got.status == http.StatusCreated {
		t.Fatal("an upload cut off by the drain bound was acknowledged")
	}
}

// TestDrainOverrunStillSealsAndReleases: an upload outlives the drain
// bound, so the drain overruns; the database still gets time of its own to
// close: the open generation is sealed and the shard's lease released, so
// the next process writes at once instead of answering 503 shard_owned.
func TestDrainOverrunStillSealsAndReleases(t *testing.T) {
	s := newServeEnv(t, Config{MergeInterval: -1, DrainTimeout: 200 * time.Millisecond, CloseTimeout: 10 * time.Second})
	req, _ := http.NewRequest("PUT", s.base+"/v1/tables/t", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create table: %v %v", resp, err)
	}
	if r := <-s.startPut(s.base, "t", "acked", []byte("acknowledged before the drain")); r.status != http.StatusCreated {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	gate := s.hooks.Pause("write:after-payload")
	t.Cleanup(gate.Release)
	done := s.startPut(s.base, "t", "stuck", []byte("outlives the drain"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := gate.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	s.cancel()
	select {
	case err := <-s.served:
		if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "closing the database") {
			t.Fatalf("Serve after an overrun drain: %v; want the overrun reported and the database closed", err)
		}
	case <-ctx.Done():
		t.Fatal("Serve did not return")
	}
	if got := <-done; got.status == http.StatusCreated {
		t.Fatal("an upload cut off by the drain bound was acknowledged")
	}
	var sealed bool
	for _, k := range s.store.(*memory.Bucket).Keys() {
		sealed = sealed || strings.HasSuffix(k, "/_sealed.json")
	}
	if !sealed {
		t.Fatal("the open generation was not sealed after the overrun")
	}
	// The next process on the same shard writes at once.
	next := newEnv(t, func(o *envOptions) { o.store = s.store })
	want(t, next.put("t", "next", `{"rollout_id":"r"}`, []byte("x")), http.StatusCreated, "")
	want(t, next.do("GET", rolloutURL("t", "acked"), nil), http.StatusOK, "")
}

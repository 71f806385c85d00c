package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
)

// trickle starts a PUT of a 1000-byte payload that sends one byte every
// 20 ms, never idle for long, and returns its answer. It stops sending
// when the answer arrives or the test ends.
func trickle(t *testing.T, e *testEnv, id string) <-chan response {
	t.Helper()
	conn := rawRequest(t, e, fmt.Sprintf("PUT %s HTTP/1.1\r\nHost: test\r\nContent-Length: 1000\r\n"+
		"Rollstore-Record: {\"rollout_id\":\"r\"}\r\n", rolloutURL("t", id)), []byte("x"))
	answered := make(chan struct{})
	go func() {
		tick := time.NewTicker(20 * time.Millisecond) // the client's pace, not synchronisation
		defer tick.Stop()
		for {
			select {
			case <-answered:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	}()
	ch := make(chan response, 1)
	go func() {
		defer close(answered)
		// A bound so that a server bug fails the test instead of hanging it.
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			ch <- response{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		ch <- response{status: resp.StatusCode, header: resp.Header, body: b}
	}()
	return ch
}

// TestTricklingUploadsCannotStarveReads: uploads that trickle a byte now
// and then (never idle long enough for the idle timeout) hold at most the
// upload slots, so reads are still served while they trickle, and each is
// cut off with 408 once it falls below the minimum rate, storing nothing.
func TestTricklingUploadsCannotStarveReads(t *testing.T) {
	e := newEnv(t, func(o *envOptions) {
		o.server.MaxConcurrentRequests = 4 // uploads: half of them
		o.server.UploadIdleTimeout = 500 * time.Millisecond
		o.server.UploadMinRate = 1 << 10
	})
	e.createTable("t")
	started := make(chan struct{}, 8)
	e.hooks.Do("upload:first-bytes", func(context.Context) error { started <- struct{}{}; return nil }, hook.Always())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var admitted []<-chan response
	for i := range 2 {
		admitted = append(admitted, trickle(t, e, fmt.Sprint("slow-", i)))
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the trickling upload was not admitted")
		}
	}
	// The upload slots are taken: another upload is refused at once...
	r := <-trickle(t, e, "slow-2")
	want(t, r, http.StatusServiceUnavailable, codeOverloaded)
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	// ...but reads are served while the two trickle.
	for range 5 {
		want(t, e.do("GET", "/v1/tables", nil), http.StatusOK, "")
		want(t, e.do("GET", rolloutURL("t", "absent"), nil), http.StatusNotFound, codeNotFound)
	}
	for i, ch := range admitted {
		r := <-ch
		want(t, r, http.StatusRequestTimeout, codeTimeout)
		if !strings.Contains(r.errMessage(), "minimum upload rate") {
			t.Errorf("upload %d: %s", i, r.body)
		}
	}
	e.wantNothingStored("t", "slow-0", "slow-1", "slow-2")
	// The slots are free again.
	want(t, e.put("t", "fast", `{"rollout_id":"r"}`, []byte("at full speed")), http.StatusCreated, "")
}

// TestMalformedChunkIs400: a chunked body whose framing breaks mid-upload
// is the client's fault: 400, nothing stored.
func TestMalformedChunkIs400(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	for name, body := range map[string]string{
		"bad chunk size":     "5\r\nhello\r\nzz\r\nworld\r\n0\r\n\r\n",
		"no CRLF after data": "5\r\nhelloXX3\r\nabc\r\n0\r\n\r\n",
		"huge chunk size":    "5\r\nhello\r\nffffffffffffffffff\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			id := "chunky-" + strings.ReplaceAll(name, " ", "-")
			conn := rawRequest(t, e, fmt.Sprintf("PUT %s HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n"+
				"Rollstore-Record: {\"rollout_id\":\"r\"}\r\n", rolloutURL("t", id)), []byte(body))
			r := readResponse(t, conn)
			want(t, r, http.StatusBadRequest, codeMalformedBody)
			e.wantNothingStored("t", id)
		})
	}
	// In a batch too.
	conn := rawRequest(t, e, "POST /v1/tables/t/rollouts HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n"+
		"Content-Type: application/x-ndjson\r\n", []byte("3\r\n{}\n\r\nq\r\n"))
	want(t, readResponse(t, conn), http.StatusBadRequest, codeMalformedBody)
}

// syncBuffer is a log sink tests read while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestClientResetIsNotA5xx: a client that resets its connection mid-upload
// is logged as a client abort (499, below error level) and counted so in
// the metrics, not as a 500; nothing is stored.
func TestClientResetIsNotA5xx(t *testing.T) {
	var logs syncBuffer
	e := newEnv(t, func(o *envOptions) {
		o.server.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	e.createTable("t")
	for _, size := range []int{1000, 64 << 10} { // inline and external
		id := fmt.Sprint("reset-", size)
		got := make(chan struct{})
		e.hooks.Do("upload:first-bytes", func(context.Context) error { close(got); return nil })
		conn := rawRequest(t, e, fmt.Sprintf("PUT %s HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n"+
			"Rollstore-Record: {\"rollout_id\":\"r\"}\r\n", rolloutURL("t", id), size), payloadOf(id, 100))
		await(t, got, "the server reading the body")
		logged := make(chan struct{})
		e.hooks.Do("request:logged", func(context.Context) error { close(logged); return nil }) // the PUT's: no other request runs
		// Linger 0: close sends a reset, not a FIN.
		if err := conn.(*net.TCPConn).SetLinger(0); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		await(t, logged, "the upload's log line")
		e.wantNothingStored("t", id)
	}
	m := e.do("GET", "/metrics", nil)
	for _, line := range strings.Split(string(m.body), "\n") {
		if strings.HasPrefix(line, "rollstore_http_request_duration_seconds_count") && strings.Contains(line, "/rollouts/{id}") &&
			strings.Contains(line, `method="PUT"`) && !strings.Contains(line, `status="499"`) && !strings.Contains(line, `status="201"`) {
			t.Errorf("metrics: %s", line)
		}
	}
	if !strings.Contains(string(m.body), `route="/v1/tables/{table}/rollouts/{id}",status="499"} 2`) {
		t.Fatalf("the resets are not counted as 499:\n%s", grepLines(string(m.body), "rollouts/{id}"))
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "method=PUT") && strings.Contains(line, "reset-") &&
			(strings.Contains(line, "level=ERROR") || !strings.Contains(line, "status=499")) {
			t.Errorf("log: %s", line)
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// await fails the test if ch is not closed within 30 s: a bound so that
// a server bug fails instead of hanging, not how tests synchronise.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("waited 30s for %s", what)
	}
}

// TestSlowStoreDoesNotMakeAClientSlow: the minimum rate counts the time
// spent waiting for the client only. A client that sent its whole payload
// at once is not cut off because the store took a while to accept it.
func TestSlowStoreDoesNotMakeAClientSlow(t *testing.T) {
	fb := faulty.New(memory.New())
	t.Cleanup(fb.Reset)
	e := newEnv(t, func(o *envOptions) {
		o.store = fb
		o.server.UploadIdleTimeout = 300 * time.Millisecond
		o.server.UploadMinRate = 1 << 20
	})
	e.createTable("t")
	fb.Latency(faulty.OpPut, faulty.KeyContains("/payloads/"), time.Second) // longer than the head start
	payload := payloadOf("patient", 200<<10)                                // external: streamed to the store
	want(t, e.put("t", "p", `{"rollout_id":"r"}`, payload), http.StatusCreated, "")
	p := e.do("GET", rolloutURL("t", "p")+"/payload", nil)
	if !bytes.Equal(p.body, payload) {
		t.Fatalf("read back %d bytes", len(p.body))
	}
}

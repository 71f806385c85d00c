package server

// A reader cannot hold the service: a streamed answer whose client stops
// reading is cut off after the download idle timeout, giving back its
// request slot and its payload budget; and one client holds at most its
// share of the request slots and of the in-flight payload budget, so
// others are still served.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rollstore/rollstore/internal/hook"
)

// stalledGET sends a GET of path on a connection with a tiny receive
// buffer and never reads the answer: the server's writes block once the
// socket buffers are full.
func stalledGET(t *testing.T, e *testEnv, path string, hdr ...string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", e.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req := "GET " + path + " HTTP/1.1\r\nHost: test\r\n"
	for i := 0; i+1 < len(hdr); i += 2 {
		req += hdr[i] + ": " + hdr[i+1] + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	return conn
}

// awaitInFlight waits until the engine has at least n payload bytes
// reserved (a download began) or, with n == 0, none (every download
// ended); the bound only keeps a broken build from hanging.
func awaitInFlight(t *testing.T, e *testEnv, n int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := e.db.InFlightPayloadBytes()
		if (n == 0 && got == 0) || (n > 0 && got >= n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("in-flight payload bytes stayed %d (waiting for %d)", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStalledDownloadIsCutOffAndFreesItsSlot(t *testing.T) {
	for _, what := range []string{"idle", "trickle"} {
		t.Run(what, func(t *testing.T) {
			e := newEnv(t, func(o *envOptions) {
				o.server.MaxConcurrentRequests = 2
				o.server.MaxBodyBytes = 64 << 20
				o.server.DownloadIdleTimeout = 300 * time.Millisecond
				o.server.DownloadMinRate = 256 << 10
			})
			e.createTable("t")
			payload := payloadOf("big", 24<<20)
			want(t, e.put("t", "big", `{"rollout_id":"r"}`, payload), http.StatusCreated, "")
			logged := make(chan struct{}, 16)
			e.hooks.Do("request:logged", func(context.Context) error { logged <- struct{}{}; return nil }, hook.Always())
			opened := make(chan struct{}, 16)
			e.hooks.Do("read:payload-opened", func(context.Context) error {
				select {
				case opened <- struct{}{}:
				default:
				}
				return nil
			}, hook.Always())

			conn := stalledGET(t, e, rolloutURL("t", "big")+"/payload")
			if what == "trickle" {
				// Take a few bytes now and then: never idle for the
				// timeout, far below the minimum rate.
				go func() {
					buf := make([]byte, 512)
					for {
						if _, err := conn.Read(buf); err != nil {
							return
						}
						time.Sleep(100 * time.Millisecond)
					}
				}()
			}
			select {
			case <-opened: // the payload's bytes are reserved from the budget
			case <-time.After(60 * time.Second):
				t.Fatal("the download never opened its payload")
			}
			select {
			case <-logged:
			case <-time.After(60 * time.Second):
				t.Fatal("the stalled download was never cut off")
			}
			awaitInFlight(t, e, 0)
			// The slot and the budget are free: reads go through on a
			// server of two slots. Small ranges, which fit the socket
			// buffers, so that a busy test machine cannot make this
			// reader stall past the 300 ms idle timeout.
			for _, rng := range [][2]int{{0, 4095}, {len(payload) - 4096, len(payload) - 1}} {
				p := e.do("GET", rolloutURL("t", "big")+"/payload", nil, "Range", fmt.Sprintf("bytes=%d-%d", rng[0], rng[1]))
				want(t, p, http.StatusPartialContent, "")
				if !bytes.Equal(p.body, payload[rng[0]:rng[1]+1]) {
					t.Fatalf("range %v read back wrong", rng)
				}
			}
			want(t, e.do("GET", "/v1/tables", nil), http.StatusOK, "")
		})
	}
}

func TestOneClientHoldsOnlyItsShare(t *testing.T) {
	const tokA, tokB = "client-a-token-0123456789", "client-b-token-0123456789"
	e := newEnv(t, func(o *envOptions) {
		o.server.AuthTokens = []string{tokA, tokB}
		o.server.MaxConcurrentRequests = 4
		o.server.MaxClientShare = 0.5
		o.server.MaxBodyBytes = 64 << 20
		o.server.DownloadIdleTimeout = time.Hour // stalls are this test's tool
		o.engine.MaxPayloadInFlight = 64 << 20
	})
	as := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	want(t, e.do("PUT", "/v1/tables/t", nil, as(tokA)...), http.StatusCreated, "")
	small := []byte("small payload")
	want(t, e.put("t", "small", `{"rollout_id":"r"}`, small, as(tokA)...), http.StatusCreated, "")

	// Request slots: A holds two requests (its share of four) paused in
	// the read path; its third is refused, B is served.
	gate := e.hooks.Pause("read:located", hook.Times(2))
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			want(t, e.do("GET", rolloutURL("t", "small"), nil, as(tokA)...), http.StatusOK, "")
		})
	}
	for gate.Arrivals() < 2 {
		time.Sleep(time.Millisecond) // waits for two arrivals, which the gate holds
	}
	r := e.do("GET", rolloutURL("t", "small"), nil, as(tokA)...)
	want(t, r, http.StatusServiceUnavailable, codeOverloaded)
	if !strings.Contains(r.errMessage(), "share") || r.header.Get("Retry-After") == "" {
		t.Errorf("refusal %s, Retry-After %q", r.body, r.header.Get("Retry-After"))
	}
	want(t, e.do("GET", rolloutURL("t", "small"), nil, as(tokB)...), http.StatusOK, "")
	gate.Release()
	wg.Wait()

	// Payload budget: A is served one 24 MiB payload (stalled, holding
	// it); a second would pass its share (32 MiB of 64): refused, while
	// B is served the same payload.
	big := payloadOf("big", 24<<20)
	want(t, e.put("t", "big", `{"rollout_id":"r"}`, big, as(tokA)...), http.StatusCreated, "")
	stalledGET(t, e, rolloutURL("t", "big")+"/payload", as(tokA)...)
	awaitInFlight(t, e, int64(len(big)))
	r = e.do("GET", rolloutURL("t", "big")+"/payload", nil, as(tokA)...)
	want(t, r, http.StatusServiceUnavailable, codeOverloaded)
	if !strings.Contains(r.errMessage(), "payload budget") {
		t.Errorf("refusal %s", r.body)
	}
	p := e.do("GET", rolloutURL("t", "big")+"/payload", nil, as(tokB)...)
	want(t, p, http.StatusOK, "")
	if !bytes.Equal(p.body, big) {
		t.Fatalf("B read %d bytes, want %d", len(p.body), len(big))
	}
	if got := testutil.ToFloat64(e.srv.metrics.clientRefusals); got != 2 {
		t.Errorf("client share refusals %v, want 2", got)
	}
}

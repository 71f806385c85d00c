package server

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestPutAndGet(t *testing.T) {
	for name, opt := range map[string]func(*testing.T) func(*envOptions){
		"memory":  func(*testing.T) func(*envOptions) { return func(*envOptions) {} },
		"local":   withLocalStore,
		"azurite": withAzurite,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, opt(t))
			e.createTable("t")
			for _, size := range []int{0, 17, 4 << 10, 4<<10 + 1, 200 << 10} { // inline and external
				id := fmt.Sprintf("run-1/step-%d", size) // '/' travels as %2F
				payload := payloadOf(id, size)
				rec := `{"rollout_id":"run-1","problem_id":"p7","sequence":3,"role":"policy","reward":0.25,` +
					`"policy_version":"v12","metadata":{"temperature":0.7,"tags":["a","b"]}}`
				r := e.put("t", id, rec, payload, "Content-Type", "application/json")
				want(t, r, http.StatusCreated, "")
				sum := sha256.Sum256(payload)
				var got struct {
					ID            string         `json:"id"`
					RolloutID     string         `json:"rollout_id"`
					ProblemID     string         `json:"problem_id"`
					Sequence      int64          `json:"sequence"`
					Role          string         `json:"role"`
					Reward        *float64       `json:"reward"`
					PolicyVersion string         `json:"policy_version"`
					Metadata      map[string]any `json:"metadata"`
					ContentType   string         `json:"content_type"`
					CreatedAt     time.Time      `json:"created_at"`
					PayloadSize   int64          `json:"payload_size"`
					PayloadSHA256 string         `json:"payload_sha256"`
				}
				r.decode(t, &got)
				if got.ID != id || got.RolloutID != "run-1" || got.ProblemID != "p7" || got.Sequence != 3 ||
					got.Role != "policy" || got.Reward == nil || *got.Reward != 0.25 || got.PolicyVersion != "v12" ||
					got.Metadata["temperature"] != 0.7 || got.ContentType != "application/json" || got.CreatedAt.IsZero() ||
					got.PayloadSize != int64(size) || got.PayloadSHA256 != hex.EncodeToString(sum[:]) {
					t.Fatalf("put answered %s", r.body)
				}
				if r.header.Get("ETag") != `"`+got.PayloadSHA256+`"` || r.header.Get("Location") != rolloutURL("t", id) {
					t.Fatalf("put headers %v", r.header)
				}

				m := e.do("GET", rolloutURL("t", id), nil)
				want(t, m, http.StatusOK, "")
				if !bytes.Equal(bytes.TrimSpace(m.body), bytes.TrimSpace(r.body)) {
					t.Fatalf("metadata %s, put answered %s", m.body, r.body)
				}
				p := e.do("GET", rolloutURL("t", id)+"/payload", nil)
				want(t, p, http.StatusOK, "")
				if !bytes.Equal(p.body, payload) {
					t.Fatalf("payload of %d bytes read back as %d bytes", size, len(p.body))
				}
				if p.header.Get("Content-Type") != "application/json" || p.header.Get("Content-Length") != fmt.Sprint(size) ||
					p.header.Get("ETag") != r.header.Get("ETag") || p.header.Get("Accept-Ranges") != "bytes" {
					t.Fatalf("payload headers %v", p.header)
				}
			}
			want(t, e.do("GET", rolloutURL("t", "absent"), nil), http.StatusNotFound, codeNotFound)
			want(t, e.do("GET", rolloutURL("t", "absent")+"/payload", nil), http.StatusNotFound, codeNotFound)
			want(t, e.do("GET", rolloutURL("nope", "absent"), nil), http.StatusNotFound, codeTableNotFound)
		})
	}
}

func TestPutIdempotentRetryAndConflict(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	for _, size := range []int{10, 10 << 10} {
		id := fmt.Sprint("id-", size)
		payload := payloadOf(id, size)
		rec := `{"rollout_id":"r","metadata":{"a":1,"b":2}}`
		want(t, e.put("t", id, rec, payload), http.StatusCreated, "")
		// An identical retry (metadata re-serialised) is 200, not a second row.
		want(t, e.put("t", id, `{"metadata":{"b":2, "a":1},"rollout_id":"r"}`, payload), http.StatusOK, "")
		// Other content under the same id is refused.
		want(t, e.put("t", id, rec, payloadOf("other", size)), http.StatusConflict, codeConflict)
		want(t, e.put("t", id, `{"rollout_id":"r2","metadata":{"a":1,"b":2}}`, payload), http.StatusConflict, codeConflict)
		// Still so after the row moved to the base.
		e.merge("t")
		want(t, e.put("t", id, rec, payload), http.StatusOK, "")
		want(t, e.put("t", id, rec, payload[:size-1]), http.StatusConflict, codeConflict)
		p := e.do("GET", rolloutURL("t", id)+"/payload", nil)
		if !bytes.Equal(p.body, payload) {
			t.Fatal("payload changed by a refused write")
		}
	}
}

func TestPutBadInput(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.server.MaxRecordHeaderBytes = 1 << 10 })
	e.createTable("t")
	p := []byte("payload")
	cases := []struct {
		name, id string
		hdr      []string
		status   int
		code     string
	}{
		{"no record header", "a", nil, 400, codeInvalidArgument},
		{"not JSON", "a", []string{"Rollstore-Record", "{rollout_id:"}, 400, codeInvalidArgument},
		{"trailing JSON", "a", []string{"Rollstore-Record", `{"rollout_id":"r"} {}`}, 400, codeInvalidArgument},
		{"JSON array", "a", []string{"Rollstore-Record", `["r"]`}, 400, codeInvalidArgument},
		{"unknown field", "a", []string{"Rollstore-Record", `{"rollout_id":"r","rolout":"x"}`}, 400, codeInvalidArgument},
		{"server-computed field", "a", []string{"Rollstore-Record", `{"rollout_id":"r","payload_size":7}`}, 400, codeInvalidArgument},
		{"missing rollout_id", "a", []string{"Rollstore-Record", `{"problem_id":"p"}`}, 400, codeInvalidArgument},
		{"wrong type", "a", []string{"Rollstore-Record", `{"rollout_id":"r","sequence":"three"}`}, 400, codeInvalidArgument},
		{"id differs from path", "a", []string{"Rollstore-Record", `{"id":"b","rollout_id":"r"}`}, 400, codeInvalidArgument},
		{"metadata too big for the header", "a", []string{"Rollstore-Record", `{"rollout_id":"r","metadata":"` + strings.Repeat("x", 2<<10) + `"}`}, 431, codeHeaderTooLarge},
		{"control character in id", "a\x01b", []string{"Rollstore-Record", `{"rollout_id":"r"}`}, 400, codeInvalidArgument},
		{"id too long", strings.Repeat("i", 513), []string{"Rollstore-Record", `{"rollout_id":"r"}`}, 400, codeInvalidArgument},
		{"control character in field", "a", []string{"Rollstore-Record", `{"rollout_id":"r\u0007"}`}, 400, codeInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do("PUT", rolloutURL("t", c.id), bytes.NewReader(p), c.hdr...)
			want(t, r, c.status, c.code)
		})
	}
	// Two record headers are ambiguous.
	req, _ := http.NewRequest("PUT", e.ts.URL+rolloutURL("t", "a"), bytes.NewReader(p))
	req.Header.Add("Rollstore-Record", `{"rollout_id":"r"}`)
	req.Header.Add("Rollstore-Record", `{"rollout_id":"s"}`)
	want(t, e.send(req), 400, codeInvalidArgument)
	// None of them stored anything.
	want(t, e.do("GET", rolloutURL("t", "a"), nil), http.StatusNotFound, codeNotFound)
}

func TestPutBodyLimits(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.server.MaxBodyBytes = 64 << 10 })
	e.createTable("t")
	// Declared too large: refused before reading.
	want(t, e.put("t", "big", `{"rollout_id":"r"}`, make([]byte, 64<<10+1)), http.StatusRequestEntityTooLarge, codePayloadTooLarge)
	// Exactly at the limit is fine.
	want(t, e.put("t", "ok", `{"rollout_id":"r"}`, make([]byte, 64<<10)), http.StatusCreated, "")
	// Chunked (length unknown) and too large: refused once the limit is passed.
	req, _ := http.NewRequest("PUT", e.ts.URL+rolloutURL("t", "chunked"), io.MultiReader(bytes.NewReader(make([]byte, 100<<10))))
	req.Header.Set("Rollstore-Record", `{"rollout_id":"r"}`)
	req.ContentLength = -1
	want(t, e.send(req), http.StatusRequestEntityTooLarge, codePayloadTooLarge)
	want(t, e.do("GET", rolloutURL("t", "chunked"), nil), http.StatusNotFound, codeNotFound)
	// Chunked within the limit is stored with its real size.
	req, _ = http.NewRequest("PUT", e.ts.URL+rolloutURL("t", "chunked"), io.MultiReader(bytes.NewReader(payloadOf("c", 10<<10))))
	req.Header.Set("Rollstore-Record", `{"rollout_id":"r"}`)
	req.ContentLength = -1
	r := e.send(req)
	want(t, r, http.StatusCreated, "")
	if !strings.Contains(string(r.body), `"payload_size":10240`) {
		t.Fatalf("chunked put answered %s", r.body)
	}
}

// rawRequest writes a request by hand on a fresh connection, for framing
// that net/http's client will not produce, and returns the connection.
func rawRequest(t *testing.T, e *testEnv, head string, body []byte) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", e.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, head+"\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(body); err != nil {
		t.Fatal(err)
	}
	return conn
}

func readResponse(t *testing.T, conn net.Conn) response {
	t.Helper()
	// A deadline so a server bug fails the test instead of hanging it; it
	// is not how the test synchronises.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func TestPutLengthRequired(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	conn := rawRequest(t, e, "PUT /v1/tables/t/rollouts/x HTTP/1.1\r\nHost: test\r\n"+
		"Rollstore-Record: {\"rollout_id\":\"r\"}\r\n", nil)
	want(t, readResponse(t, conn), http.StatusLengthRequired, codeLengthRequired)
	// An explicit empty body is an empty payload.
	conn = rawRequest(t, e, "PUT /v1/tables/t/rollouts/x HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n"+
		"Rollstore-Record: {\"rollout_id\":\"r\"}\r\n", nil)
	want(t, readResponse(t, conn), http.StatusCreated, "")
}

func TestPutTruncatedBody(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	for _, size := range []int{100, 64 << 10} { // inline and external
		id := fmt.Sprint("trunc-", size)
		conn := rawRequest(t, e, fmt.Sprintf("PUT %s HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n"+
			"Rollstore-Record: {\"rollout_id\":\"r\"}\r\n", rolloutURL("t", id), size), payloadOf(id, size/2))
		conn.(*net.TCPConn).CloseWrite() // the client gives up half way
		r := readResponse(t, conn)
		want(t, r, http.StatusBadRequest, codeTruncatedBody)
		want(t, e.do("GET", rolloutURL("t", id), nil), http.StatusNotFound, codeNotFound)
	}
	// After a merge too: nothing partial was ever written.
	e.merge("t")
	var list struct{ Records []any }
	e.do("GET", "/v1/tables/t/rollouts", nil).decode(t, &list)
	if len(list.Records) != 0 {
		t.Fatalf("truncated uploads left %d rows", len(list.Records))
	}
}

func TestPutStalledUpload(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.server.UploadIdleTimeout = 200 * time.Millisecond })
	e.createTable("t")
	for _, framing := range []string{"Content-Length: 100000", "Transfer-Encoding: chunked"} {
		id := "stalled-" + strings.Fields(framing)[0]
		body := payloadOf(id, 1000)
		if strings.HasPrefix(framing, "Transfer") {
			body = append([]byte(fmt.Sprintf("%x\r\n", len(body))), append(body, "\r\n"...)...)
		}
		// The client sends part of the body, then nothing, keeping the
		// connection open: the server must give up after the idle timeout.
		conn := rawRequest(t, e, fmt.Sprintf("PUT %s HTTP/1.1\r\nHost: test\r\n%s\r\n"+
			"Rollstore-Record: {\"rollout_id\":\"r\"}\r\n", rolloutURL("t", id), framing), body)
		start := time.Now()
		r := readResponse(t, conn)
		want(t, r, http.StatusRequestTimeout, codeTimeout)
		if d := time.Since(start); d < 150*time.Millisecond {
			t.Errorf("answered after %v, before the idle timeout", d)
		}
		want(t, e.do("GET", rolloutURL("t", id), nil), http.StatusNotFound, codeNotFound)
	}
}

func TestPutSlowButSteadyUpload(t *testing.T) {
	// A client slower than the idle timeout in total, but never idle for
	// that long and above the minimum rate (20 KiB/s here), is not cut off:
	// the deadline moves with every read.
	e := newEnv(t, func(o *envOptions) {
		o.server.UploadIdleTimeout = 300 * time.Millisecond
		o.server.UploadMinRate = 1 << 10
	})
	e.createTable("t")
	pr, pw := io.Pipe()
	payload := payloadOf("steady", 10<<10)
	go func() {
		for i := 0; i < len(payload); i += 1 << 10 {
			pw.Write(payload[i : i+1<<10])
			time.Sleep(50 * time.Millisecond) // the client's pace, not synchronisation
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("PUT", e.ts.URL+rolloutURL("t", "steady"), pr)
	req.Header.Set("Rollstore-Record", `{"rollout_id":"r"}`)
	req.ContentLength = int64(len(payload))
	want(t, e.send(req), http.StatusCreated, "")
}

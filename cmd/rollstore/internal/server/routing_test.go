package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// noRedirects is a client that shows redirects instead of following them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func doRaw(t *testing.T, client *http.Client, method, url string, hdr ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// wantJSONError fails unless r is a JSON error answer with status and
// code and a request id that matches the X-Request-Id header.
func wantJSONError(t *testing.T, what string, r response, status int, code string) {
	t.Helper()
	d := r.errDetail()
	if r.status != status || d.Code != code || d.RequestID == "" || d.RequestID != r.header.Get("X-Request-Id") ||
		!strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
		t.Errorf("%s: %d %v %s, want %d JSON %s with a request id", what, r.status, r.header, bytes.TrimSpace(r.body), status, code)
	}
}

// TestEveryAnswerIsJSONAndBehindAuth: the router's redirects of paths
// that are not in canonical form, and its 404 and 405, are JSON errors
// with a request id, and with auth on they need a token like any route.
func TestEveryAnswerIsJSONAndBehindAuth(t *testing.T) {
	for _, auth := range []bool{false, true} {
		t.Run(fmt.Sprint("auth=", auth), func(t *testing.T) {
			e := newEnv(t, func(o *envOptions) {
				if auth {
					o.server.AuthTokens = []string{"s3cret"}
				}
			})
			var tok []string
			if auth {
				tok = []string{"Authorization", "Bearer s3cret"}
			}
			want(t, e.do("PUT", "/v1/tables/t", nil, tok...), http.StatusCreated, "")
			for path, loc := range map[string]string{
				"/v1/tables/t/rollouts/.":        "/v1/tables/t/rollouts",
				"/v1//tables":                    "/v1/tables",
				"/v1/tables/x/../t?limit=3":      "/v1/tables/t?limit=3",
				"/v1/tables/t/rollouts/a/../%2E": "/v1/tables/t/rollouts/%2E",
				"/./healthz":                     "/healthz",
			} {
				if auth {
					wantJSONError(t, path+" without a token", doRaw(t, noRedirects, "GET", e.ts.URL+path), http.StatusUnauthorized, codeUnauthorized)
				}
				r := doRaw(t, noRedirects, "GET", e.ts.URL+path, tok...)
				wantJSONError(t, path, r, http.StatusTemporaryRedirect, codeRedirect)
				if r.header.Get("Location") != loc {
					t.Errorf("%s: Location %q, want %q", path, r.header.Get("Location"), loc)
				}
			}
			for _, c := range []struct {
				method, path string
				status       int
				code         string
			}{
				{"GET", "/nope", http.StatusNotFound, codeRouteNotFound},
				{"GET", "/v1/tables/t/rollouts/a/payload/more", http.StatusNotFound, codeRouteNotFound},
				{"DELETE", "/v1/tables", http.StatusMethodNotAllowed, codeMethodNotAllowed},
				{"POST", "/v1/tables/t/rollouts/a", http.StatusMethodNotAllowed, codeMethodNotAllowed},
				{"PATCH", "/v1/tables/t", http.StatusMethodNotAllowed, codeMethodNotAllowed},
			} {
				if auth {
					wantJSONError(t, c.method+" "+c.path+" without a token", doRaw(t, noRedirects, c.method, e.ts.URL+c.path), http.StatusUnauthorized, codeUnauthorized)
				}
				r := doRaw(t, noRedirects, c.method, e.ts.URL+c.path, tok...)
				wantJSONError(t, c.method+" "+c.path, r, c.status, c.code)
				if c.status == http.StatusMethodNotAllowed && r.header.Get("Allow") == "" {
					t.Errorf("%s %s: 405 without Allow", c.method, c.path)
				}
			}
			// Probes stay open.
			want(t, e.do("GET", "/healthz", nil), http.StatusOK, "")
		})
	}
}

// TestDotIDsLocation: the Location of an id made of dots reads it back.
func TestDotIDsLocation(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	for _, id := range []string{".", "..", "...", "a/.", "./a"} {
		r := e.put("t", id, `{"rollout_id":"r"}`, []byte("payload of "+id))
		want(t, r, http.StatusCreated, "")
		loc := r.header.Get("Location")
		got := doRaw(t, noRedirects, "GET", e.ts.URL+loc)
		var rec struct{ ID string }
		_ = json.Unmarshal(got.body, &rec)
		if got.status != http.StatusOK || rec.ID != id {
			t.Errorf("id %q: Location %q answers %d %s", id, loc, got.status, got.body)
		}
		p := doRaw(t, noRedirects, "GET", e.ts.URL+loc+"/payload")
		if string(p.body) != "payload of "+id {
			t.Errorf("id %q: payload at %q: %d %q", id, loc+"/payload", p.status, p.body)
		}
	}
}

// TestParserErrorsAreJSON: what net/http refuses before any handler runs
// (a header block too large, a request it cannot parse, an unknown
// transfer coding) is answered in JSON with a request id too, on a real
// listener; the answers of handlers, even a payload that looks like such
// an answer, are untouched.
func TestParserErrorsAreJSON(t *testing.T) {
	s := newServeEnv(t, Config{MergeInterval: -1, MaxRecordHeaderBytes: 1 << 10})
	addr := strings.TrimPrefix(s.base, "http://")
	raw := func(req string) response {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second)) // a bound, not synchronisation
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%q: reading the answer: %v", req[:min(len(req), 40)], err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return response{status: resp.StatusCode, header: resp.Header, body: b}
	}
	big := strings.Repeat("x", 70<<10) // past MaxHeaderBytes (1 KiB + 64 KiB)
	wantJSONError(t, "huge header", raw("GET /v1/tables HTTP/1.1\r\nHost: a\r\nX-Big: "+big+"\r\n\r\n"), http.StatusRequestHeaderFieldsTooLarge, codeHeaderTooLarge)
	wantJSONError(t, "garbage", raw("this is not HTTP\r\n\r\n"), http.StatusBadRequest, codeMalformedRequest)
	wantJSONError(t, "no Host", raw("GET /v1/tables HTTP/1.1\r\n\r\n"), http.StatusBadRequest, codeMalformedRequest)
	wantJSONError(t, "bad header", raw("GET /v1/tables HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n"), http.StatusBadRequest, codeMalformedRequest)
	wantJSONError(t, "transfer coding", raw("PUT /v1/tables/t HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), http.StatusNotImplemented, codeMalformedRequest)

	// Handlers' answers pass untouched, on a connection that served a
	// request before too.
	want(t, raw("PUT /v1/tables/t HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"), http.StatusCreated, "")
	lookalike := []byte("HTTP/1.1 400 Bad Request" + parserErrorHeaders + "400 Bad Request")
	put := raw(fmt.Sprintf("PUT /v1/tables/t/rollouts/l HTTP/1.1\r\nHost: a\r\nRollstore-Record: {\"rollout_id\":\"r\"}\r\nContent-Length: %d\r\n\r\n%s", len(lookalike), lookalike))
	want(t, put, http.StatusCreated, "")
	got := raw("GET /v1/tables/t/rollouts/l/payload HTTP/1.1\r\nHost: a\r\n\r\n")
	if got.status != http.StatusOK || !bytes.Equal(got.body, lookalike) {
		t.Fatalf("a payload that looks like a parser error: %d %q", got.status, got.body)
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	io.WriteString(conn, "GET /v1/tables/t/rollouts/l/payload HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if !bytes.Equal(b, lookalike) {
		t.Fatalf("first answer on a kept-alive connection: %q", b)
	}
	io.WriteString(conn, "GET /v1/tables HTTP/1.1\r\nHost: a\r\nX-Big: "+big+big+big+"\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	wantJSONError(t, "huge header on a kept-alive connection", response{status: resp.StatusCode, header: resp.Header, body: b},
		http.StatusRequestHeaderFieldsTooLarge, codeHeaderTooLarge)
}

// TestParserErrorsAreJSONOnKeptAliveConnections: a request net/http
// refuses is answered in JSON whether it opens its connection or follows
// a served request on it; an unsupported HTTP version is the client's
// mistake (400, not 505); CONNECT, whose target is no path, gets the
// router's JSON 404 and, with auth on, the 401 first.
func TestParserErrorsAreJSONOnKeptAliveConnections(t *testing.T) {
	const token = "parser-errors-token-0123456789"
	s := newServeEnv(t, Config{MergeInterval: -1, AuthTokens: []string{token}})
	addr := strings.TrimPrefix(s.base, "http://")
	exchange := func(reqs ...string) response {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second)) // a bound, not synchronisation
		br := bufio.NewReader(conn)
		var last response
		for i, req := range reqs {
			if _, err := io.WriteString(conn, req); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("request %d %q: %v", i, req[:min(len(req), 30)], err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = response{status: resp.StatusCode, header: resp.Header, body: b}
			if i < len(reqs)-1 && last.status != http.StatusOK {
				t.Fatalf("the served request answered %d", last.status)
			}
		}
		return last
	}
	good := "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n"
	cases := []struct {
		name, req string
		status    int
		code      string
	}{
		{"bad header line", "GET /v1/tables HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n", http.StatusBadRequest, codeMalformedRequest},
		{"unknown transfer coding", "PUT /v1/tables/t HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", http.StatusNotImplemented, codeMalformedRequest},
		{"HTTP/9.9", "GET /v1/tables HTTP/9.9\r\nHost: a\r\n\r\n", http.StatusBadRequest, codeMalformedRequest},
		{"CONNECT without a token", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", http.StatusUnauthorized, codeUnauthorized},
		{"CONNECT with a token", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nAuthorization: Bearer " + token + "\r\n\r\n", http.StatusNotFound, codeRouteNotFound},
	}
	for _, c := range cases {
		wantJSONError(t, c.name+", first on its connection", exchange(c.req), c.status, c.code)
		wantJSONError(t, c.name+", after a served request", exchange(good, c.req), c.status, c.code)
		wantJSONError(t, c.name+", after two served requests", exchange(good, good, c.req), c.status, c.code)
	}
}

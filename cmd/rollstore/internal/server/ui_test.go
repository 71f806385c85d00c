package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/engine"
)

// The status page's own tests; the page in a real browser is tested in
// cmd/rollstore (TestStatusPageInBrowser).

// isUIOperation says whether an operation of the OpenAPI file is one of
// the status page's.
func isUIOperation(op string) bool {
	_, path, _ := strings.Cut(op, " ")
	return path == "/ui" || strings.HasPrefix(path, "/ui/") || strings.HasPrefix(path, "/v1/ui/")
}

// noRedirect sends req without following a redirect, checked against the
// OpenAPI file like e.send.
func (e *testEnv) noRedirect(req *http.Request) response {
	e.t.Helper()
	c := *e.ts.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		e.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b.Bytes()}
}

// login posts the login form and returns the answer.
func (e *testEnv) login(token string, hdr ...string) response {
	e.t.Helper()
	req, err := http.NewRequest("POST", e.ts.URL+"/ui/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return e.noRedirect(req)
}

func sessionCookie(t *testing.T, r response) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == uiCookieName {
			return c
		}
	}
	t.Fatalf("no %s cookie in %v", uiCookieName, r.header)
	return nil
}

func withCookie(value string) []string { return []string{"Cookie", uiCookieName + "=" + value} }

// TestUIAuth: with tokens configured, the page and its state take the
// bearer token or the session cookie the login form sets, and nothing
// else; the cookie opens no API route, is signed (not the token), expires,
// is good on any process with the token, and no longer once the token is
// gone.
func TestUIAuth(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.server.AuthTokens = []string{"tok-a", "tok-b"} })
	bearer := []string{"Authorization", "Bearer tok-b"}

	// Without credentials: the login form, and a JSON 401 for the state.
	r := e.do("GET", "/ui", nil)
	if r.status != http.StatusUnauthorized || !strings.Contains(string(r.body), `<form id="login" method="post" action="/ui/login">`) ||
		!strings.HasPrefix(r.header.Get("Content-Type"), "text/html") || r.header.Get("WWW-Authenticate") == "" {
		t.Fatalf("GET /ui without a token: %d %v %s", r.status, r.header, r.body)
	}
	want(t, e.do("GET", "/v1/ui/state", nil), http.StatusUnauthorized, codeUnauthorized)

	// The bearer token opens both, as for the API.
	r = e.do("GET", "/ui", nil, bearer...)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `<script src="/ui/static/app.js" defer></script>`) {
		t.Fatalf("GET /ui with a token: %d %s", r.status, r.body)
	}
	if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Fatalf("Content-Security-Policy %q", csp)
	}
	want(t, e.do("GET", "/v1/ui/state", nil, bearer...), http.StatusOK, "")

	// A wrong token: the form again, saying so; no cookie.
	r = e.login("tok-c")
	if r.status != http.StatusUnauthorized || !strings.Contains(string(r.body), "not a token of this server") || r.header.Get("Set-Cookie") != "" {
		t.Fatalf("login with a wrong token: %d %v %s", r.status, r.header, r.body)
	}

	// A right one: the cookie, and back to the page.
	r = e.login(" tok-b\n")
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/ui" {
		t.Fatalf("login: %d %v %s", r.status, r.header, r.body)
	}
	c := sessionCookie(t, r)
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Secure || c.Path != "/" || c.MaxAge != int(uiSessionMax/time.Second) {
		t.Fatalf("cookie %+v", c)
	}
	if strings.Contains(c.Value, "tok-b") || strings.Contains(c.Value, base64.RawURLEncoding.EncodeToString([]byte("tok-b"))) {
		t.Fatalf("the cookie carries the token: %q", c.Value)
	}
	if c := sessionCookie(t, e.login("tok-a", "X-Forwarded-Proto", "https")); !c.Secure {
		t.Fatalf("cookie over a TLS proxy: %+v", c)
	}
	session := withCookie(c.Value)
	if r := e.do("GET", "/ui", nil, session...); r.status != http.StatusOK || !strings.Contains(string(r.body), `id="tables"`) {
		t.Fatalf("GET /ui with the cookie: %d %s", r.status, r.body)
	}
	want(t, e.do("GET", "/v1/ui/state", nil, session...), http.StatusOK, "")
	// The cookie is no API credential.
	want(t, e.do("GET", "/v1/tables", nil, session...), http.StatusUnauthorized, codeUnauthorized)
	want(t, e.do("PUT", "/v1/tables/x", nil, session...), http.StatusUnauthorized, codeUnauthorized)

	// Forged, altered, expired or over-long sessions are refused.
	v1, exp, sig := splitSession(t, c.Value)
	key := e.srv.uiSessionKeys()[1]
	past := time.Now().Add(-time.Minute).Unix()
	far := time.Now().Add(uiSessionMax + time.Hour).Unix()
	for _, bad := range []string{
		"", "v1", "tok-b", "v2." + exp + "." + sig,
		v1 + "." + exp + "." + flip(sig),
		v1 + "." + strconv.FormatInt(mustInt(t, exp)+3600, 10) + "." + sig, // a later expiry under the old signature
		fmt.Sprintf("v1.%d.%s", past, base64.RawURLEncoding.EncodeToString(uiSign(key, past))),
		fmt.Sprintf("v1.%d.%s", far, base64.RawURLEncoding.EncodeToString(uiSign(key, far))),
		fmt.Sprintf("v1.%s.%s", exp, base64.RawURLEncoding.EncodeToString(uiSign([]byte("tok-b"), mustInt(t, exp)))),
	} {
		if r := e.do("GET", "/v1/ui/state", nil, withCookie(bad)...); r.status != http.StatusUnauthorized {
			t.Errorf("session %q: %d, want 401", bad, r.status)
		}
		if r := e.do("GET", "/ui", nil, withCookie(bad)...); r.status != http.StatusUnauthorized {
			t.Errorf("session %q: GET /ui %d, want 401", bad, r.status)
		}
	}

	// Another process with the same token takes the session; one whose
	// tokens no longer include it does not.
	same := newEnv(t, func(o *envOptions) { o.server.AuthTokens = []string{"tok-b"} })
	want(t, same.do("GET", "/v1/ui/state", nil, session...), http.StatusOK, "")
	rotated := newEnv(t, func(o *envOptions) { o.server.AuthTokens = []string{"tok-a", "tok-new"} })
	want(t, rotated.do("GET", "/v1/ui/state", nil, session...), http.StatusUnauthorized, codeUnauthorized)

	// The script and stylesheet need no token; nothing else is served there.
	for file, ctype := range map[string]string{"app.js": "text/javascript", "style.css": "text/css"} {
		r := e.do("GET", "/ui/static/"+file, nil)
		if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), ctype) || len(r.body) < 100 {
			t.Errorf("GET /ui/static/%s: %d %v", file, r.status, r.header)
		}
	}
	want(t, e.do("GET", "/ui/static/index.html", nil), http.StatusNotFound, codeRouteNotFound)
	want(t, e.do("GET", "/ui/static/..%2Fui.go", nil), http.StatusNotFound, codeRouteNotFound)

	// Logging out clears the cookie.
	req, _ := http.NewRequest("POST", e.ts.URL+"/ui/logout", nil)
	req.Header.Set("Cookie", session[1])
	r = e.noRedirect(req)
	if out := sessionCookie(t, r); r.status != http.StatusSeeOther || out.Value != "" || out.MaxAge >= 0 {
		t.Fatalf("logout: %d %+v", r.status, out)
	}

	// The login form is bounded and must be a form.
	want(t, e.login(strings.Repeat("x", uiLoginMaxBytes)), http.StatusRequestEntityTooLarge, codePayloadTooLarge)

	if left := slices.DeleteFunc(e.api.Unexercised(), func(op string) bool { return !isUIOperation(op) }); len(left) > 0 {
		t.Errorf("status page operations of api/openapi.yaml not exercised: %v", left)
	}
}

func splitSession(t *testing.T, v string) (string, string, string) {
	t.Helper()
	p := strings.Split(v, ".")
	if len(p) != 3 {
		t.Fatalf("session %q", v)
	}
	return p[0], p[1], p[2]
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// flip changes the first character of a base64url string.
func flip(s string) string {
	if s[0] == 'A' {
		return "B" + s[1:]
	}
	return "A" + s[1:]
}

// TestUIWithoutAuth: with no tokens the page is open, and the login form
// just leads to it.
func TestUIWithoutAuth(t *testing.T) {
	e := newEnv(t)
	want(t, e.do("GET", "/ui", nil), http.StatusOK, "")
	r := e.login("anything")
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/ui" || r.header.Get("Set-Cookie") != "" {
		t.Fatalf("login without auth: %d %v", r.status, r.header)
	}
	var st uiStateBody
	e.do("GET", "/v1/ui/state", nil).decode(t, &st)
	if st.Auth || len(st.Tables) != 0 || st.Merger.LastPass != nil || st.Merger.Interval != 0 {
		t.Fatalf("state of an empty server: %+v", st)
	}
}

// TestUIDisabled: Config.DisableUI (--ui=false) leaves no trace of the page.
func TestUIDisabled(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.server.DisableUI = true })
	for _, p := range []string{"/ui", "/ui/static/app.js", "/v1/ui/state"} {
		want(t, e.do("GET", p, nil), http.StatusNotFound, codeRouteNotFound)
	}
	want(t, e.login("x"), http.StatusNotFound, codeRouteNotFound)
}

// TestUIState: the state holds each table's status and the merges this
// process ran, through the API and the merger loop, newest first; the
// loop's idle passes are only counted.
func TestUIState(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.createTable("runs")
	e.createTable("empty")
	for i := range 3 {
		e.mustPut("runs", fmt.Sprintf("a-%d", i), payloadOf("x", 10))
	}
	e.merge("runs")
	e.mustPut("runs", "b-0", payloadOf("y", 10))

	state := func() uiStateBody {
		t.Helper()
		var st uiStateBody
		r := e.do("GET", "/v1/ui/state", nil)
		want(t, r, http.StatusOK, "")
		r.decode(t, &st)
		return st
	}
	st := state()
	if len(st.Tables) != 2 || st.Tables[0].Name != "empty" || st.Tables[1].Name != "runs" || st.Shard != "test-0" {
		t.Fatalf("state: %+v", st)
	}
	runs := st.Tables[1]
	if s := runs.Status; s == nil || s.Rows != 4 || s.BaseRows != 3 || s.PendingRows != 1 || s.Version != 1 || len(s.Pending) == 0 {
		t.Fatalf("status of runs: %+v", runs.Status)
	}
	if s := runs.Status; s.Partitions > 0 && len(s.Owners) != s.Partitions {
		t.Fatalf("%d partitions, owners %+v", s.Partitions, s.Owners)
	}
	if len(runs.Merges) != 1 || runs.Merges[0].Trigger != "api" || runs.Merges[0].Outcome != "merged" || runs.Merges[0].Version != 1 || runs.Merges[0].Rows != 3 {
		t.Fatalf("merges of runs: %+v", runs.Merges)
	}
	if len(st.Tables[0].Merges) != 0 || st.Merger.Passes != 0 {
		t.Fatalf("state: %+v", st)
	}

	// A pass of the merger loop (the pending generation is open, so there
	// is nothing to merge): counted, not listed.
	e.srv.mergePass(ctx, false)
	st = state()
	if p := st.Merger.LastPass; st.Merger.Passes != 1 || p == nil || p.N != 1 || p.Tables != 2 || p.Merged != 0 {
		t.Fatalf("merger after a pass: %+v %+v", st.Merger, p)
	}
	if len(st.Tables[1].Merges) != 1 {
		t.Fatalf("an idle pass was listed: %+v", st.Tables[1].Merges)
	}
	// Sealed, the generation is merged by the next pass, listed first.
	tb, err := e.db.Table(ctx, "runs")
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	e.srv.mergePass(ctx, false)
	st = state()
	if m := st.Tables[1].Merges; len(m) != 2 || m[0].Trigger != "loop" || m[0].Version != 2 || m[1].Trigger != "api" {
		t.Fatalf("merges after a loop merge: %+v", m)
	}
	if p := st.Merger.LastPass; st.Merger.Passes != 2 || p.N != 2 || p.Merged != 1 {
		t.Fatalf("last pass: %+v", p)
	}

	// A dropped table's merges are forgotten.
	if err := e.client.DropTable(ctx, "runs"); err != nil {
		t.Fatal(err)
	}
	e.createTable("runs")
	if st := state(); len(st.Tables) != 2 || len(st.Tables[1].Merges) != 0 {
		t.Fatalf("after drop and create: %+v", st.Tables)
	}
}

// TestPassLog: the log keeps the last uiMergesPerTable merges of each
// table, newest first, lists failures and not idle or busy loop passes
// (they are counted in the pass), and forgets tables no longer listed.
func TestPassLog(t *testing.T) {
	var l passLog
	t0 := time.Now()
	for i := range 20 {
		l.recordMerge("a", "api", t0.Add(time.Duration(i)*time.Second), engine.MergeResult{Version: uint64(i + 1)}, nil)
	}
	l.recordPass(engine.MaintenancePass{N: 1, Start: t0, Listed: []string{"a", "b", "c", "d"}, Tables: []engine.TableMaintenance{
		{Table: "a"}, // idle
		{Table: "b", Busy: true, MergeErr: engine.ErrMergerBusy},
		{Table: "c", MergeErr: errors.New("store down")},
		{Table: "d", Merge: engine.MergeResult{Version: 3, Merged: make([]engine.GenRef, 2), Rows: 7}},
	}})
	passes, last, merges := l.snapshot()
	if passes != 1 || last.N != 1 || last.Tables != 4 || last.Merged != 1 || last.Busy != 1 || last.Failed != 1 {
		t.Fatalf("pass %d %+v", passes, last)
	}
	a := merges("a")
	if len(a) != uiMergesPerTable || a[0].Version != 20 || a[len(a)-1].Version != 20-uiMergesPerTable+1 {
		t.Fatalf("merges of a: %+v", a)
	}
	if b := merges("b"); len(b) != 0 {
		t.Fatalf("busy listed: %+v", b)
	}
	if c := merges("c"); len(c) != 1 || c[0].Outcome != "failed" || c[0].Error != "store down" {
		t.Fatalf("merges of c: %+v", c)
	}
	if d := merges("d"); len(d) != 1 || d[0].Outcome != "merged" || d[0].Generations != 2 || d[0].Rows != 7 || d[0].Trigger != "loop" {
		t.Fatalf("merges of d: %+v", d)
	}
	// A failed listing keeps everything; a listing without "a" forgets it.
	l.recordPass(engine.MaintenancePass{N: 2, ListErr: errors.New("no store")})
	if _, last, merges := l.snapshot(); last.Error == "" || len(merges("a")) != uiMergesPerTable {
		t.Fatalf("after a failed listing: %+v %d", last, len(merges("a")))
	}
	l.recordPass(engine.MaintenancePass{N: 3, Listed: []string{"c", "d"}})
	if _, _, merges := l.snapshot(); len(merges("a")) != 0 || len(merges("c")) != 1 {
		t.Fatal("a table no longer listed was kept, or a listed one forgotten")
	}
}

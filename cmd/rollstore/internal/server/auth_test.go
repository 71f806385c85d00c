package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestAuth(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.server.AuthTokens = []string{"s3cret", "next-token"} })
	for _, c := range []struct {
		auth   string
		status int
	}{
		{"", http.StatusUnauthorized},
		{"Bearer", http.StatusUnauthorized},
		{"Bearer ", http.StatusUnauthorized},
		{"Bearer wrong", http.StatusUnauthorized},
		{"Bearer s3cre", http.StatusUnauthorized}, // a prefix is not the token
		{"Bearer s3cret2", http.StatusUnauthorized},
		{"Basic czNjcmV0", http.StatusUnauthorized},
		{"s3cret", http.StatusUnauthorized},
		{"Bearer s3cret", http.StatusOK},
		{"bearer next-token", http.StatusOK}, // the scheme is case-insensitive; either token
	} {
		r := e.do("GET", "/v1/tables", nil, "Authorization", c.auth)
		if r.status != c.status {
			t.Errorf("Authorization %q: %d, want %d", c.auth, r.status, c.status)
		}
		if r.status == http.StatusUnauthorized && (r.errCode() != codeUnauthorized || r.header.Get("WWW-Authenticate") == "") {
			t.Errorf("Authorization %q: 401 without code or challenge: %v %s", c.auth, r.header, r.body)
		}
	}
	// Probes need no token; metrics do.
	want(t, e.do("GET", "/healthz", nil), http.StatusOK, "")
	want(t, e.do("GET", "/readyz", nil), http.StatusOK, "")
	want(t, e.do("GET", "/metrics", nil), http.StatusUnauthorized, codeUnauthorized)
	want(t, e.do("GET", "/metrics", nil, "Authorization", "Bearer s3cret"), http.StatusOK, "")
	// Writes too, before any body is read.
	want(t, e.do("PUT", "/v1/tables/t", nil), http.StatusUnauthorized, codeUnauthorized)
	want(t, e.do("PUT", "/v1/tables/t", nil, "Authorization", "Bearer s3cret"), http.StatusCreated, "")
}

func TestNewRejectsEmptyToken(t *testing.T) {
	if _, err := New(nil, Config{AuthTokens: []string{""}}); err == nil {
		t.Fatal("an empty token would let an empty bearer in")
	}
}

// TestMetricsListenerNeedsNoToken: with auth on, the metrics-only handler
// answers the scrape without a token and serves nothing else, while the
// API's /metrics still needs one.
func TestMetricsListenerNeedsNoToken(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.server.AuthTokens = []string{"s3cret"} })
	ms := httptest.NewServer(e.srv.MetricsHandler())
	t.Cleanup(ms.Close)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := ms.Client().Get(ms.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	status, body := get("/metrics")
	if status != http.StatusOK || !strings.Contains(body, "rollstore_build_info{") || !strings.Contains(body, "rollstore_reads_total") {
		t.Fatalf("metrics listener: %d\n%.300s", status, body)
	}
	for _, p := range []string{"/v1/tables", "/healthz", "/"} {
		if status, body := get(p); status != http.StatusNotFound || !strings.Contains(body, codeRouteNotFound) {
			t.Errorf("metrics listener %s: %d %s, want 404 %s", p, status, body, codeRouteNotFound)
		}
	}
	want(t, e.do("GET", "/metrics", nil), http.StatusUnauthorized, codeUnauthorized)
}

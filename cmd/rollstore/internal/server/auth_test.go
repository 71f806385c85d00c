package server

import (
	"net/http"
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

package server

import (
	"net/http"
	"path"
	"slices"
	"strings"
)

// Route options.
const (
	// public routes need no token.
	public = 1 << iota
	// internal routes (health, metrics) are neither refused while
	// draining nor counted against MaxConcurrentRequests.
	internal
	// upload routes also count against MaxConcurrentUploads.
	upload
	// waits routes (the feed) take their slot themselves: a request
	// slot, or for a long-poll a waiting slot (feedSlot).
	waits
)

// queryParams are the query parameters each API route takes; any other,
// or one given twice, is refused (see checkQuery).
var queryParams = map[string][]string{
	"GET /v1/tables/{table}/rollouts":              {"rollout_id", "problem_id", "policy_version", "prefix", "start_after", "page_token", "limit", "version"},
	"POST /v1/tables/{table}/lookup":               {"version"},
	"GET /v1/tables/{table}/rollouts/{id}":         {"version"},
	"GET /v1/tables/{table}/rollouts/{id}/payload": {"version"},
	"GET /v1/tables/{table}/scan":                  {"version", "payloads"},
	"PUT /v1/tables/{table}":                       {"partitions"},
	"GET /v1/tables/{table}/feed": {"cursor", "partitions", "max_rows", "max_bytes", "payloads", "wait",
		"rollout_id", "problem_id", "policy_version", "columns", "group", "member", "commit"},
}

func (s *Server) routes() {
	s.handle("GET /healthz", s.healthz, public|internal)
	s.handle("GET /readyz", s.readyz, public|internal)
	s.handle("GET /metrics", s.serveMetrics, internal)

	s.handle("GET /v1/tables", s.listTables, 0)
	s.handle("PUT /v1/tables/{table}", s.createTable, 0)
	s.handle("GET /v1/tables/{table}", s.tableStatus, 0)
	s.handle("DELETE /v1/tables/{table}", s.dropTable, 0)

	s.handle("PUT /v1/tables/{table}/rollouts/{id}", s.putRollout, upload)
	s.handle("POST /v1/tables/{table}/rollouts", s.postBatch, upload)
	s.handle("GET /v1/tables/{table}/rollouts", s.listRollouts, 0)
	s.handle("GET /v1/tables/{table}/rollouts/{id}", s.getRollout, 0)
	s.handle("GET /v1/tables/{table}/rollouts/{id}/payload", s.getPayload, 0)
	s.handle("POST /v1/tables/{table}/lookup", s.lookupRollouts, 0)

	s.handle("GET /v1/tables/{table}/scan", s.scan, 0)
	s.handle("POST /v1/tables/{table}/merge", s.merge, 0)
	s.handle("GET /v1/tables/{table}/versions", s.versions, 0)

	s.handle("GET /v1/tables/{table}/feed", s.feed, waits)
	s.handle("GET /v1/tables/{table}/consumers", s.listConsumers, 0)
	s.handle("GET /v1/tables/{table}/consumers/{group}", s.getConsumer, 0)
	s.handle("POST /v1/tables/{table}/consumers/{group}/commit", s.commitConsumer, 0)
	s.handle("DELETE /v1/tables/{table}/consumers/{group}/members/{member}", s.leaveConsumer, 0)
	s.handle("DELETE /v1/tables/{table}/consumers/{group}", s.deleteConsumer, 0)

	// Commits forwarded by other writer pods (forward.go): behind auth,
	// but not refused while draining (the partitions are this pod's until
	// its database closes) nor counted against the request slots (the
	// forwarding pod counted the request).
	s.handle("POST "+internalCommitPath, s.commitStaged, internal)
	// Waits relayed by other pods for their long-polls (feedrelay.go):
	// bounded by the pods' waiting tables, not by the request slots.
	s.handle("POST "+internalAwaitPath, s.awaitFeed, internal)
	s.uiRoutes() // the status page, ui.go

	// Everything else is answered in JSON too (404 or 405), and behind
	// auth like any API route, so probing reveals nothing without a token.
	s.handle("/", s.noRoute, 0)
	s.redirect = s.wrap("/", s.cleanPathRedirect, 0)
	s.connect = s.wrap("/", s.noConnect, 0)

	// The metrics listener serves only the metrics, to anyone who reaches
	// it: that port is meant for the cluster's scraper (deploy/k8s), which
	// then needs no API token.
	s.handleOn(s.metricsMux, "GET /metrics", s.serveMetrics, public|internal)
	s.handleOn(s.metricsMux, "/", s.noMetricsRoute, public|internal)
}

func (s *Server) noMetricsRoute(w http.ResponseWriter, r *http.Request) error {
	return newError(http.StatusNotFound, codeRouteNotFound, "the metrics listener serves only GET /metrics, not %s %s", r.Method, r.URL.EscapedPath())
}

// ServeHTTP sends a path that is not in canonical form (with ".", ".."
// or "//" segments) to cleanPathRedirect before the router sees it: the
// router would answer it with a redirect of its own, in HTML and without
// a request id or auth.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		// The router answers CONNECT itself, in plain text and before
		// auth: a CONNECT's target is an authority, not a path.
		s.connect.ServeHTTP(w, r)
		return
	}
	if p := r.URL.EscapedPath(); p != cleanPath(p) {
		s.redirect.ServeHTTP(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// cleanPathRedirect answers 307 to the canonical path, as the router
// would, in JSON. Segments stay escaped, so an id sent as %2E keeps its
// meaning.
func (s *Server) cleanPathRedirect(w http.ResponseWriter, r *http.Request) error {
	loc := cleanPath(r.URL.EscapedPath())
	if r.URL.RawQuery != "" {
		loc += "?" + r.URL.RawQuery
	}
	w.Header().Set("Location", loc)
	return newError(http.StatusTemporaryRedirect, codeRedirect,
		"%s is not a canonical path; see Location (ids made of dots travel as %%2E)", r.URL.EscapedPath())
}

// cleanPath is the router's canonical form of p: no "." or ".." segments,
// no empty ones, a trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// noRoute answers paths no route matches with 404, and known paths asked
// with the wrong method with 405 and Allow, in JSON like every error.
// noConnect answers a CONNECT: rollstore is no proxy.
func (s *Server) noConnect(w http.ResponseWriter, r *http.Request) error {
	return newError(http.StatusNotFound, codeRouteNotFound, "no route for CONNECT %s: rollstore is not a proxy", r.RequestURI)
}

func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) error {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, p := s.mux.Handler(probe); p != "/" && p != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		return newError(http.StatusNotFound, codeRouteNotFound, "no route for %s %s", r.Method, r.URL.EscapedPath())
	}
	if slices.Contains(allow, http.MethodGet) {
		allow = append(allow, http.MethodHead)
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	return newError(http.StatusMethodNotAllowed, codeMethodNotAllowed, "%s is not allowed here; allowed: %s", r.Method, strings.Join(allow, ", "))
}

package server

import (
	"net/http"
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
)

func (s *Server) routes() {
	s.handle("GET /healthz", s.healthz, public|internal)
	s.handle("GET /readyz", s.readyz, public|internal)
	s.handle("GET /metrics", s.serveMetrics, internal)

	s.handle("GET /v1/tables", s.listTables, 0)
	s.handle("PUT /v1/tables/{table}", s.createTable, 0)
	s.handle("GET /v1/tables/{table}", s.tableStatus, 0)
	s.handle("DELETE /v1/tables/{table}", s.dropTable, 0)

	s.handle("PUT /v1/tables/{table}/rollouts/{id}", s.putRollout, 0)
	s.handle("POST /v1/tables/{table}/rollouts", s.postBatch, 0)
	s.handle("GET /v1/tables/{table}/rollouts", s.listRollouts, 0)
	s.handle("GET /v1/tables/{table}/rollouts/{id}", s.getRollout, 0)
	s.handle("GET /v1/tables/{table}/rollouts/{id}/payload", s.getPayload, 0)

	s.handle("GET /v1/tables/{table}/scan", s.scan, 0)
	s.handle("POST /v1/tables/{table}/merge", s.merge, 0)
	s.handle("GET /v1/tables/{table}/versions", s.versions, 0)

	// Everything else is answered in JSON too (404 or 405).
	s.handle("/", s.noRoute, public)

	// The metrics listener serves only the metrics, to anyone who reaches
	// it: that port is meant for the cluster's scraper (deploy/k8s), which
	// then needs no API token.
	s.handleOn(s.metricsMux, "GET /metrics", s.serveMetrics, public|internal)
	s.handleOn(s.metricsMux, "/", s.noMetricsRoute, public|internal)
}

func (s *Server) noMetricsRoute(w http.ResponseWriter, r *http.Request) error {
	return newError(http.StatusNotFound, codeRouteNotFound, "the metrics listener serves only GET /metrics, not %s %s", r.Method, r.URL.EscapedPath())
}

// noRoute answers paths no route matches with 404, and known paths asked
// with the wrong method with 405 and Allow, in JSON like every error.
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

package server

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// jsonLines decodes what a JSON slog handler wrote.
func jsonLines(s *syncBuffer) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// TestLogLevelsSayWhoMustAct: ERROR only for what an operator must act
// on; load shedding is WARN; what a client caused, and the protocol doing
// its work (a drop stopping the table's writer), is INFO.
func TestLogLevelsSayWhoMustAct(t *testing.T) {
	for _, c := range []struct {
		route  string
		status int
		want   slog.Level
	}{
		{"/v1/tables/{table}/rollouts/{id}", http.StatusServiceUnavailable, slog.LevelWarn},
		{"/v1/tables/{table}/rollouts/{id}", http.StatusInternalServerError, slog.LevelError},
		{"/v1/tables/{table}/rollouts/{id}", http.StatusBadGateway, slog.LevelError},
		{"/v1/tables/{table}/rollouts/{id}", http.StatusNotFound, slog.LevelInfo},
		{"/v1/tables/{table}/rollouts/{id}/payload", http.StatusRequestTimeout, slog.LevelInfo},
		{"/v1/tables/{table}/rollouts/{id}", statusClientClosed, slog.LevelInfo},
		{"/readyz", http.StatusServiceUnavailable, slog.LevelDebug},
	} {
		if got := logLevel(c.route, c.status, errors.New("x")); got != c.want {
			t.Errorf("%s %d: %v, want %v", c.route, c.status, got, c.want)
		}
	}

	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnv(t, func(o *envOptions) {
		o.engine.Logger = logger
		o.server.Logger = logger
		o.server.MaxConcurrentRequests = 2
		o.server.MaxConcurrentUploads = 1
	})
	e.createTable("t")
	e.mustPut("t", "a", []byte("a"))
	want(t, e.do("DELETE", "/v1/tables/t", nil), http.StatusNoContent, "")
	want(t, e.do("GET", rolloutURL("t", "a"), nil), http.StatusNotFound, codeTableNotFound)
	var stopped bool
	for _, l := range jsonLines(&logs) {
		if l["level"] == "ERROR" {
			t.Errorf("an ERROR line for a normal drop: %v", l)
		}
		if l["msg"] == "shard writer stopped" {
			stopped = true
			if l["level"] != "INFO" {
				t.Errorf("the dropped table's writer stopped at %v", l["level"])
			}
		}
	}
	if !stopped {
		t.Error("the drop did not stop the table's writer (nothing logged)")
	}
}

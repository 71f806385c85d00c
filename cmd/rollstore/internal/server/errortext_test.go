package server

import (
	"net/http"
	"strings"
	"testing"
)

// TestRecordErrorsInTheAPIsWords: a malformed record is explained with the
// API's field names and JSON types, never encoding/json's Go types.
func TestRecordErrorsInTheAPIsWords(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	goWords := []string{"Go ", "server.", "int64", "float64", "json:", "recordHeader", "batchLine", "2006"}
	check := func(what string, r response, wants ...string) {
		t.Helper()
		want(t, r, http.StatusBadRequest, codeInvalidArgument)
		msg := r.errMessage()
		for _, w := range goWords {
			if strings.Contains(msg, w) {
				t.Errorf("%s: %q speaks Go (%q)", what, msg, w)
			}
		}
		for _, w := range wants {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %q does not say %q", what, msg, w)
			}
		}
	}
	for rec, wants := range map[string][]string{
		`[1,2]`:                                       {"JSON object", "array"},
		`{"rollout_id":5}`:                            {"rollout_id", "string", "number"},
		`{"sequence":"x","rollout_id":"r"}`:           {"sequence", "integer"},
		`{"reward":"high","rollout_id":"r"}`:          {"reward", "number"},
		`{"created_at":"yesterday","rollout_id":"r"}`: {"created_at", "RFC 3339", "yesterday"},
	} {
		check(rec, e.put("t", "x", rec, []byte("p")), wants...)
	}
	for line, wants := range map[string][]string{
		`[1]`:                       {"line 1", "JSON object"},
		`{"rollout_id":"r"}`:        {"id is required"},
		`{"id":5,"rollout_id":"r"}`: {"field id", "string"},
		`{"id":"a","rollout_id":"r","payload":"!!"}`: {"payload", "base64"},
	} {
		check(line, e.postBatch("t", mediaNDJSON, []byte(line+"\n")), wants...)
	}
	want(t, e.do("GET", rolloutURL("t", "x"), nil), http.StatusNotFound, codeNotFound)
}

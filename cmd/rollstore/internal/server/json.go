package server

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rollstore/rollstore/engine"
)

// writeJSON answers v as JSON. Encoding into a buffer first means an
// encoding failure is still a clean 500 rather than half a document; the
// failure is kept on the recorder, so the request's log line carries it.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		body := errorBody{Error: errorDetail{Code: codeInternal, Message: "encoding the response failed",
			RequestID: w.Header().Get("X-Request-Id")}}
		_ = json.NewEncoder(&buf).Encode(body)
		if rec, ok := w.(*recorder); ok {
			rec.encodeErr = err
		}
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// recordView is a record's metadata as the API shows it: every field of
// the engine's record, plus the payload checksum in hex and, for a payload
// stored as its own object, that object's full name in the store.
// created_at is shadowed by a type whose encoding cannot fail, so that no
// stored value (one written before its range was checked) can make a read
// fail.
type recordView struct {
	*engine.Record
	CreatedAt     anyTime `json:"created_at"`
	PayloadSHA256 string  `json:"payload_sha256"`
	PayloadRef    string  `json:"payload_ref,omitempty"`
}

func (s *Server) viewOf(rec *engine.Record) recordView {
	v := recordView{Record: rec, CreatedAt: anyTime(rec.CreatedAt), PayloadSHA256: hex.EncodeToString(rec.PayloadSHA256[:])}
	if rec.PayloadRef != "" {
		v.PayloadRef = objectName(s.cfg.StorePrefix, rec.PayloadRef)
	}
	return v
}

// anyTime encodes as RFC 3339 like time.Time, but also outside years
// 0..9999, where time.Time's MarshalJSON fails (the year is then written
// with as many digits as it has).
type anyTime time.Time

func (t anyTime) MarshalJSON() ([]byte, error) {
	return strconv.AppendQuote(nil, time.Time(t).Format(time.RFC3339Nano)), nil
}

// httpDate formats t as an HTTP date, unless it has no such form.
func httpDate(t time.Time) (string, bool) {
	t = t.UTC()
	if t.Year() < 1 || t.Year() > 9999 {
		return "", false
	}
	return t.Format(http.TimeFormat), true
}

func (s *Server) viewsOf(recs []*engine.Record) []recordView {
	out := make([]recordView, len(recs))
	for i, r := range recs {
		out[i] = s.viewOf(r)
	}
	return out
}

// objectName is the name in the container (Azure) or under the data
// folder (local) of the engine's key under the store prefix.
func objectName(prefix, key string) string {
	if prefix = strings.Trim(prefix, "/"); prefix != "" {
		return prefix + "/" + key
	}
	return key
}

// etag is the payload's strong validator: its SHA-256, which is what makes
// it stable across merges, replicas and pinned versions.
func etag(rec *engine.Record) string {
	return `"` + hex.EncodeToString(rec.PayloadSHA256[:]) + `"`
}

// readOptions parses ?version=N (a positive integer) for pinned reads.
func readOptions(r *http.Request) (engine.ReadOptions, error) {
	v, err := versionParam(r)
	return engine.ReadOptions{Version: v}, err
}

func versionParam(r *http.Request) (uint64, error) {
	q := r.URL.Query()
	if !q.Has("version") {
		return 0, nil
	}
	v, err := strconv.ParseUint(q.Get("version"), 10, 64)
	if err != nil || v == 0 {
		return 0, badRequest("version must be a positive integer, got %q", q.Get("version"))
	}
	return v, nil
}

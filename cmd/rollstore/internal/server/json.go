package server

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/rollstore/rollstore/engine"
)

// writeJSON answers v as JSON. Encoding into a buffer first means an
// encoding failure is still a clean 500 rather than half a document.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":{"code":"internal","message":"encoding the response failed"}}` + "\n")
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// recordView is a record's metadata as the API shows it: every field of
// the engine's record, plus the payload checksum in hex.
type recordView struct {
	*engine.Record
	PayloadSHA256 string `json:"payload_sha256"`
}

func viewOf(rec *engine.Record) recordView {
	return recordView{Record: rec, PayloadSHA256: hex.EncodeToString(rec.PayloadSHA256[:])}
}

func viewsOf(recs []*engine.Record) []recordView {
	out := make([]recordView, len(recs))
	for i, r := range recs {
		out[i] = viewOf(r)
	}
	return out
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

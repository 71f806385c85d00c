package server

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

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
// the engine's record, plus the payload checksum in hex and, for a payload
// stored as its own object, that object's full name in the store.
type recordView struct {
	*engine.Record
	PayloadSHA256 string `json:"payload_sha256"`
	PayloadRef    string `json:"payload_ref,omitempty"`
}

func (s *Server) viewOf(rec *engine.Record) recordView {
	v := recordView{Record: rec, PayloadSHA256: hex.EncodeToString(rec.PayloadSHA256[:])}
	if rec.PayloadRef != "" {
		v.PayloadRef = objectName(s.cfg.StorePrefix, rec.PayloadRef)
	}
	return v
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

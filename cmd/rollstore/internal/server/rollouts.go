package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/engine/rowfile"
)

// recordHeader is the Rollstore-Record header of a PUT: the record's fields
// except the id (from the path), the content type (Content-Type) and what
// the server computes (size, checksum).
type recordHeader struct {
	// ID may be repeated from the path; it must then be equal.
	ID            *string         `json:"id"`
	RolloutID     string          `json:"rollout_id"`
	ProblemID     string          `json:"problem_id"`
	Sequence      int64           `json:"sequence"`
	Role          string          `json:"role"`
	Reward        *float64        `json:"reward"`
	PolicyVersion string          `json:"policy_version"`
	Metadata      json.RawMessage `json:"metadata"`
	CreatedAt     time.Time       `json:"created_at"`
}

func (h *recordHeader) record(id, contentType string) engine.Record {
	rec := engine.Record{
		ID:            id,
		RolloutID:     h.RolloutID,
		ProblemID:     h.ProblemID,
		Sequence:      h.Sequence,
		Role:          h.Role,
		Reward:        h.Reward,
		PolicyVersion: h.PolicyVersion,
		ContentType:   contentType,
		CreatedAt:     h.CreatedAt,
	}
	if m := bytes.TrimSpace(h.Metadata); len(m) > 0 && string(m) != "null" {
		rec.Metadata = m
	}
	return rec
}

// decodeStrict decodes exactly one JSON object into v, a pointer to a
// struct, and refuses what encoding/json would let through: unknown
// fields (a misspelt field is an error instead of silently dropped data),
// field names in another case (Rollout_ID would fill rollout_id), keys
// repeated anywhere (the last would win), lone surrogates and invalid
// UTF-8 (they would become U+FFFD).
func decodeStrict(data []byte, v any) error {
	var known map[string]bool
	switch v.(type) {
	case *recordHeader:
		known = recordHeaderFields
	case *batchLine:
		known = batchLineFields
	default:
		known = jsonFields(reflect.TypeOf(v).Elem())
	}
	err := rowfile.CheckJSON(data, func(k string) error {
		if !known[k] {
			return fmt.Errorf("unknown field %q (field names are case-sensitive)", k)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// One value with known fields only, as CheckJSON proved: Unmarshal
	// needs no copy of data, which may be a batch line of many MiB.
	return apiJSONError(json.Unmarshal(data, v))
}

// apiJSONError says what is wrong with a record's JSON in the API's terms
// (field names and JSON types), not encoding/json's (Go types and struct
// names).
func apiJSONError(err error) error {
	var te *json.UnmarshalTypeError
	var pe *time.ParseError
	var ce base64.CorruptInputError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te) && te.Field == "":
		return fmt.Errorf("must be a JSON object, got %s", jsonKind(te.Value))
	case errors.As(err, &te):
		return fmt.Errorf("field %s must be %s, got %s", te.Field, apiType(te.Type), jsonKind(te.Value))
	case errors.As(err, &pe):
		return fmt.Errorf("created_at must be an RFC 3339 timestamp (2026-01-02T15:04:05Z), got %q", pe.Value)
	case errors.As(err, &ce):
		return fmt.Errorf("payload must be standard base64 with padding (invalid at byte %d)", int64(ce))
	}
	return err
}

// jsonKind names the JSON value encoding/json met ("number", "number
// 1.5", "array", …) with its article.
func jsonKind(v string) string {
	kind, val, _ := strings.Cut(v, " ")
	art := "a "
	switch kind {
	case "array", "object":
		art = "an "
	case "bool":
		kind = "boolean"
	}
	if val != "" {
		return art + kind + " (" + val + ")"
	}
	return art + kind
}

// apiType names the JSON a field takes.
func apiType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[time.Time]():
		return "an RFC 3339 timestamp string"
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		return "a base64 string"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "an integer"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "a number"
	}
	return "another JSON type"
}

// The fields of the record header and of a batch line, computed once.
var (
	recordHeaderFields = jsonFields(reflect.TypeFor[recordHeader]())
	batchLineFields    = jsonFields(reflect.TypeFor[batchLine]())
)

// jsonFields returns the JSON names of a struct's fields, embedded
// structs' included.
func jsonFields(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	for f := range t.Fields() {
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			maps.Copy(names, jsonFields(f.Type))
			continue
		}
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			names[name] = true
		}
	}
	return names
}

const recordHeaderName = "Rollstore-Record"

// putRollout stores one rollout. The body is the payload and streams to
// the store as it arrives; the record is durable before the answer.
func (s *Server) putRollout(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := rowfile.ValidateID(id); err != nil {
		return err
	}
	vals := r.Header.Values(recordHeaderName)
	switch {
	case len(vals) == 0:
		return badRequest("the %s header is required (record fields as JSON)", recordHeaderName)
	case len(vals) > 1:
		return badRequest("exactly one %s header is allowed", recordHeaderName)
	case len(vals[0]) > s.cfg.MaxRecordHeaderBytes:
		return newError(http.StatusRequestHeaderFieldsTooLarge, codeHeaderTooLarge,
			"%s header is %d bytes, limit %d", recordHeaderName, len(vals[0]), s.cfg.MaxRecordHeaderBytes)
	}
	var hdr recordHeader
	if err := decodeStrict([]byte(vals[0]), &hdr); err != nil {
		return &apiError{status: http.StatusBadRequest, code: codeInvalidArgument, msg: recordHeaderName + " header", err: err}
	}
	if err := validateMediaType(r.Header.Get("Content-Type")); err != nil {
		return badRequest("%v", err)
	}
	if hdr.ID != nil && *hdr.ID != id {
		return badRequest("%s id %q differs from the path's %q", recordHeaderName, *hdr.ID, id)
	}
	// A request without framing has no body by HTTP's rules; for a PUT of
	// a payload that is more likely a client bug than an empty payload.
	if r.ContentLength == 0 && r.Header.Get("Content-Length") == "" && len(r.TransferEncoding) == 0 && r.ProtoMajor == 1 {
		return newError(http.StatusLengthRequired, codeLengthRequired, "Content-Length or chunked transfer encoding is required")
	}
	if r.ContentLength > s.cfg.MaxBodyBytes {
		return newError(http.StatusRequestEntityTooLarge, codePayloadTooLarge,
			"body of %d bytes exceeds the limit of %d", r.ContentLength, s.cfg.MaxBodyBytes)
	}
	tb, err := s.table(r)
	if err != nil {
		return err
	}
	digest, err := newDigestCheck(r)
	if err != nil {
		return badRequest("%v", err)
	}
	if digest != nil && r.ContentLength == 0 {
		// An empty body may never be read: check it here.
		if err := digest.verify(false); err != nil {
			return err
		}
	}
	body := s.newUploadBody(w, r, s.cfg.MaxBodyBytes)
	body.digest = digest
	res, err := s.appendOne(r.Context(), tb, hdr.record(id, r.Header.Get("Content-Type")), body, r.ContentLength)
	body.done()
	if err != nil {
		return body.explain(err)
	}
	status := http.StatusOK // an identical retry: nothing new was written
	if res.Created {
		s.metrics.payloadBytes.WithLabelValues("written").Add(float64(res.Record.PayloadSize))
		status = http.StatusCreated
		w.Header().Set("Location", rolloutPath(tb.Name(), id))
	}
	w.Header().Set("ETag", etag(res.Record))
	writeJSON(w, status, s.viewOf(res.Record))
	return nil
}

// rolloutPath is where a rollout is read. An id made only of dots is
// escaped as %2E, or clients and the router would take it for a dot
// segment and read another path.
func rolloutPath(table, id string) string {
	seg := url.PathEscape(id)
	if seg == "." || seg == ".." {
		seg = strings.Repeat("%2E", len(seg))
	}
	return "/v1/tables/" + table + "/rollouts/" + seg
}

func (s *Server) getRollout(w http.ResponseWriter, r *http.Request) error {
	opts, err := readOptions(r)
	if err != nil {
		return err
	}
	tb, err := s.table(r)
	if err != nil {
		return err
	}
	rec, err := tb.Get(r.Context(), r.PathValue("id"), opts)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.viewOf(rec))
	return nil
}

// getPayload streams a payload, whole or one byte range of it.
//
// The payload is described first (Stat: no request beyond finding the
// row) only when the answer depends on it before any byte is read (a
// suffix range or a malformed one needs the size, conditional requests
// need the validators, HEAD needs only headers); otherwise the payload is
// opened directly and its description comes with it. Either way the
// payload's bytes are the only request to the store. Conditional requests are decided as net/http's
// ServeContent decides them (see evaluate).
func (s *Server) getPayload(w http.ResponseWriter, r *http.Request) error {
	opts, err := readOptions(r)
	if err != nil {
		return err
	}
	tb, err := s.table(r)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	br, kind := parseRange(r.Header.Get("Range"))
	var rec *engine.Record
	if br.isSuffix || kind == rangeInvalid || hasConditions(r.Header) || r.Method == http.MethodHead {
		if rec, err = tb.Stat(r.Context(), id, opts); err != nil {
			return err
		}
		mod, _ := lastModified(rec)
		switch evaluate(r.Header, etag(rec), mod) {
		case condPreconditionFailed:
			w.Header().Set("ETag", etag(rec))
			return newError(http.StatusPreconditionFailed, codePrecondFailed, "a precondition (If-Match, If-Unmodified-Since) does not hold")
		case condNotModified:
			// Only the validator, as RFC 9110 §15.4.5 has it.
			w.Header().Set("ETag", etag(rec))
			w.WriteHeader(http.StatusNotModified)
			return nil
		case condIgnoreRange:
			kind = rangeNone
		}
		if kind == rangeInvalid {
			return &engine.RangeError{Size: rec.PayloadSize}
		}
	}

	off, n := int64(0), int64(-1)
	if kind == rangeOne {
		off, n = br.first, br.length()
		if rec != nil {
			var ok bool
			if off, n, ok = br.resolve(rec.PayloadSize); !ok {
				return &engine.RangeError{Size: rec.PayloadSize}
			}
		}
	}
	if r.Method == http.MethodHead {
		if kind == rangeOne {
			writeRangeHeaders(w, rec, off, n)
		} else {
			setPayloadHeaders(w.Header(), rec)
			w.Header().Set("Content-Length", strconv.FormatInt(rec.PayloadSize, 10))
			w.WriteHeader(http.StatusOK)
		}
		return nil
	}

	p, err := tb.OpenPayload(r.Context(), id, off, n, opts)
	if err != nil {
		return err
	}
	defer p.Close()
	if rec != nil && !engine.SamePayload(rec, p.Record) {
		// The conditions and the range were decided on the payload Stat
		// described; the open found another under the id (two copies of
		// it exist, and a merge or reclaim came between the two reads).
		return fmt.Errorf("payload of %q: the open found another payload than the one its conditions were decided on: %w", id, engine.ErrRowChanged)
	}
	rec = p.Record
	if !p.Cached {
		// The engine reserved the payload's bytes from the server-wide
		// budget; one client may hold only its share of it.
		release, err := s.clients.reserve(s.clientKey(r), p.Length)
		if err != nil {
			s.metrics.clientRefusals.Inc()
			return newError(http.StatusServiceUnavailable, codeOverloaded, "%v (--max-client-share)", err)
		}
		defer release()
	}
	if kind == rangeOne && p.Offset >= rec.PayloadSize {
		// The engine opens an empty window at the very end; HTTP calls
		// that unsatisfiable.
		return &engine.RangeError{Size: rec.PayloadSize}
	}
	if kind == rangeOne {
		writeRangeHeaders(w, rec, p.Offset, p.Length)
	} else {
		setPayloadHeaders(w.Header(), rec)
		w.Header().Set("Content-Length", strconv.FormatInt(p.Length, 10))
		w.WriteHeader(http.StatusOK)
	}
	// Read with the request's context, so a resumed read (the file was
	// reclaimed mid-stream) stops when the client goes away.
	src := readerFunc(func(b []byte) (int, error) { return p.ReadContext(r.Context(), b) })
	buf := make([]byte, 64<<10)
	dw := s.newDownload(w)
	_, err = io.CopyBuffer(dw, src, buf)
	s.metrics.payloadBytes.WithLabelValues("read").Add(float64(dw.n))
	if err != nil {
		if dw.cause != nil {
			return dw.cause // the client's slowness, not the store's
		}
		return err // headers are out: the wrapper aborts the connection
	}
	return nil
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(b []byte) (int, error) { return f(b) }

func writeRangeHeaders(w http.ResponseWriter, rec *engine.Record, off, n int64) {
	h := w.Header()
	setPayloadHeaders(h, rec)
	h.Set("Content-Range", "bytes "+strconv.FormatInt(off, 10)+"-"+strconv.FormatInt(off+n-1, 10)+"/"+strconv.FormatInt(rec.PayloadSize, 10))
	h.Set("Content-Length", strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusPartialContent)
}

// setPayloadHeaders sets what describes the payload whatever part of it is
// sent. nosniff because the content type is the writer's word and the
// bytes are arbitrary.
func setPayloadHeaders(h http.Header, rec *engine.Record) {
	ct := rec.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	h.Set("Content-Type", ct)
	h.Set("ETag", etag(rec))
	h.Set("Accept-Ranges", "bytes")
	if _, d := lastModified(rec); d != "" {
		h.Set("Last-Modified", d)
	}
	h.Set("X-Content-Type-Options", "nosniff")
	// A payload is the writer's bytes under the writer's media type: a
	// browser that opens its URL must not run it in the API's origin.
	// The sandbox policy holds whatever the type; types a browser would
	// render actively are also sent as attachments, so they download.
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	if activeContent(ct) {
		h.Set("Content-Disposition", "attachment")
	}
}

// activeContent reports whether a browser would render a media type as a
// document or run it as script: HTML, XML (SVG and XHTML included),
// JavaScript and XSLT. A type that does not parse counts as active.
func activeContent(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return true
	}
	switch mt {
	case "text/html", "text/xml", "application/xml", "text/xsl", "application/xslt+xml",
		"text/javascript", "application/javascript", "application/x-javascript",
		"text/ecmascript", "application/ecmascript", "text/jscript", "application/x-ecmascript":
		return true
	}
	return strings.HasSuffix(mt, "+xml")
}

// lastModified is a payload's modification time, its record's creation,
// at whole seconds and as an HTTP date; zero and "" when HTTP dates cannot
// express it.
func lastModified(rec *engine.Record) (time.Time, string) {
	d, ok := httpDate(rec.CreatedAt)
	if !ok {
		return time.Time{}, ""
	}
	return rec.CreatedAt.UTC().Truncate(time.Second), d
}

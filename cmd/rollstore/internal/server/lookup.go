package server

import (
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/engine/rowfile"
)

// lookupRequest is the body of a multi-id get.
type lookupRequest struct {
	IDs []string `json:"ids"`
}

// lookupResult answers one id of a multi-id get: its record, or found
// false.
type lookupResult struct {
	ID     string      `json:"id"`
	Found  bool        `json:"found"`
	Record *recordView `json:"record,omitempty"`
}

// lookupRollouts answers many ids in one request, in request order, each
// found or not (an absent id is never a 404 of the whole request). Each
// lookup is the engine's Get, with its recovery from files reclaimed
// under the read, run at most LookupParallelism at once. ?version pins
// every lookup to one base version, as for a single get.
func (s *Server) lookupRollouts(w http.ResponseWriter, r *http.Request) error {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return newError(http.StatusUnsupportedMediaType, codeUnsupportedMedia,
			"Content-Type must be application/json, got %q", r.Header.Get("Content-Type"))
	}
	if err := checkContentEncoding(w, r); err != nil {
		return err
	}
	if r.ContentLength > s.cfg.MaxLookupBytes {
		return newError(http.StatusRequestEntityTooLarge, codePayloadTooLarge,
			"body of %d bytes exceeds the limit of %d", r.ContentLength, s.cfg.MaxLookupBytes)
	}
	opts, err := readOptions(r)
	if err != nil {
		return err
	}
	body := s.newUploadBody(w, r, s.cfg.MaxLookupBytes)
	data, err := io.ReadAll(body)
	body.done()
	if err != nil {
		return body.explain(err)
	}
	var req lookupRequest
	if err := decodeStrict(data, &req); err != nil {
		return &apiError{status: http.StatusBadRequest, code: codeInvalidArgument, msg: "invalid JSON body", err: err}
	}
	if req.IDs == nil {
		return badRequest(`the body must have "ids", an array of record ids`)
	}
	if len(req.IDs) > s.cfg.MaxLookupIDs {
		return newError(http.StatusRequestEntityTooLarge, codePayloadTooLarge,
			"%d ids exceed the limit of %d per request; split them", len(req.IDs), s.cfg.MaxLookupIDs)
	}
	for i, id := range req.IDs {
		if err := rowfile.ValidateID(id); err != nil {
			return badRequest("ids[%d]: %v", i, err)
		}
	}
	tb, err := s.table(r)
	if err != nil {
		return err
	}
	recs, err := tb.GetMany(r.Context(), req.IDs, engine.GetManyOptions{ReadOptions: opts, Parallelism: s.cfg.LookupParallelism})
	if err != nil {
		if errors.Is(err, engine.ErrNotFound) {
			// Absent rows are answered per id; a not-found that got here
			// is not about a row (never expected, but never a 404 of the
			// whole request either).
			return &apiError{status: http.StatusInternalServerError, code: codeInternal, err: err}
		}
		return err
	}
	out := struct {
		Results []lookupResult `json:"results"`
	}{Results: make([]lookupResult, len(req.IDs))}
	for i, id := range req.IDs {
		out.Results[i] = lookupResult{ID: id}
		if rec := recs[i]; rec != nil {
			v := s.viewOf(rec)
			out.Results[i].Found, out.Results[i].Record = true, &v
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

package server

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strings"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/engine/rowfile"
)

const (
	mediaNDJSON = "application/x-ndjson"
	mediaArrow  = "application/vnd.apache.arrow.stream"
)

// batchLine is one NDJSON line: the record's fields and the payload in
// base64 (standard alphabet, padded, as encoding/json reads []byte).
type batchLine struct {
	ID          string `json:"id"`
	ContentType string `json:"content_type"`
	Payload     []byte `json:"payload"`
	recordHeader
}

// batchResult reports one item of an accepted batch.
type batchResult struct {
	ID            string `json:"id"`
	Created       bool   `json:"created"`
	PayloadSize   int64  `json:"payload_size"`
	PayloadSHA256 string `json:"payload_sha256"`
}

// postBatch appends a batch all-or-nothing. The body is decoded whole
// first (a bad record anywhere rejects the batch, naming its line or row,
// before anything is written), so decoding is bounded as it goes: by
// MaxBatchBytes of body and of decoded data, and by the rows one batch may
// hold (the engine's segment limit), refused with 413 at the first row
// beyond it rather than after decoding the rest.
func (s *Server) postBatch(w http.ResponseWriter, r *http.Request) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || (mt != mediaNDJSON && mt != mediaArrow) {
		return newError(http.StatusUnsupportedMediaType, codeUnsupportedMedia,
			"Content-Type must be %s or %s, got %q", mediaNDJSON, mediaArrow, r.Header.Get("Content-Type"))
	}
	if r.ContentLength > s.cfg.MaxBatchBytes {
		return newError(http.StatusRequestEntityTooLarge, codePayloadTooLarge,
			"batch of %d bytes exceeds the limit of %d", r.ContentLength, s.cfg.MaxBatchBytes)
	}
	tb, err := s.table(r)
	if err != nil {
		return err
	}
	body := s.newUploadBody(w, r, s.cfg.MaxBatchBytes)
	lim := batchLimits{bytes: s.cfg.MaxBatchBytes, rows: s.cfg.MaxBatchRows}
	var items []engine.BatchItem
	var pos func(i int) *positionError
	if mt == mediaNDJSON {
		items, pos, err = decodeNDJSON(body, lim)
	} else {
		items, pos, err = decodeArrow(body, r.ContentLength, lim)
	}
	body.done()
	if err != nil {
		return body.explain(err)
	}
	if len(items) == 0 {
		return badRequest("empty batch")
	}
	got := s.appendItems(r.Context(), tb, items)
	if got.err != nil {
		var err error = got.err
		if got.failed >= 0 && got.failed < len(items) {
			p := pos(got.failed)
			p.err = got.err
			err = p
		}
		var done []committedItem
		for i, x := range got.res {
			if x == nil {
				continue
			}
			c := committedItem{ID: x.Record.ID, Created: x.Created}
			if p := pos(i); p.what == "line" {
				c.Line = ptr(p.n)
			} else {
				c.Row = ptr(p.n)
			}
			done = append(done, c)
			if x.Created {
				s.metrics.payloadBytes.WithLabelValues("written").Add(float64(x.Record.PayloadSize))
			}
		}
		if done != nil {
			err = &partialError{err: err, committed: done}
		}
		return err
	}
	out := struct {
		Created  int           `json:"created"`
		Existing int           `json:"existing"`
		Records  []batchResult `json:"records"`
	}{Records: make([]batchResult, len(got.res))}
	for i, x := range got.res {
		if x.Created {
			out.Created++
			s.metrics.payloadBytes.WithLabelValues("written").Add(float64(x.Record.PayloadSize))
		} else {
			out.Existing++
		}
		out.Records[i] = batchResult{ID: x.Record.ID, Created: x.Created, PayloadSize: x.Record.PayloadSize,
			PayloadSHA256: hex.EncodeToString(x.Record.PayloadSHA256[:])}
	}
	status := http.StatusOK // every item was an identical retry
	if out.Created > 0 {
		status = http.StatusCreated
	}
	writeJSON(w, status, out)
	return nil
}

// batchLimits bound what decoding one batch may hold.
type batchLimits struct {
	bytes int64 // body bytes, and decoded bytes
	rows  int
}

func (l batchLimits) tooManyRows(where string) error {
	return newError(http.StatusRequestEntityTooLarge, codePayloadTooLarge,
		"batch has more than %d rows (%s); split it", l.rows, where)
}

// decodeNDJSON reads one record per line; blank lines are skipped but
// counted, so line numbers match what an editor shows. Lines are read
// into one buffer reused for all of them, and decoded items copy what they
// keep, so memory is the items plus the longest line.
func decodeNDJSON(r io.Reader, lim batchLimits) ([]engine.BatchItem, func(int) *positionError, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), int(min(lim.bytes, math.MaxInt32))+1)
	var items []engine.BatchItem
	var lines []int
	line := 0
	for sc.Scan() {
		line++
		t := bytes.TrimSpace(sc.Bytes())
		if len(t) == 0 {
			continue
		}
		if len(items) == lim.rows {
			return nil, nil, lim.tooManyRows(fmt.Sprintf("line %d", line))
		}
		var l batchLine
		if derr := decodeStrict(t, &l); derr != nil {
			return nil, nil, &positionError{what: "line", n: line, err: badRequest("invalid JSON: %v", derr)}
		}
		if err := validateMediaType(l.ContentType); err != nil {
			return nil, nil, &positionError{what: "line", n: line, err: badRequest("%v", err)}
		}
		rec := l.record(l.ID, l.ContentType)
		if l.Payload == nil {
			l.Payload = []byte{}
		}
		items = append(items, engine.BatchItem{Record: rec, Payload: l.Payload})
		lines = append(lines, line)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("%w: line %d is longer than the batch limit of %d bytes", errBodyLimit, line+1, lim.bytes)
		}
		return nil, nil, err
	}
	return items, func(i int) *positionError { return &positionError{what: "line", n: lines[i]} }, nil
}

// decodeArrow reads an Arrow IPC stream whose columns are matched to the
// table schema by name (a subset in any order; id and rollout_id required).
// The stream is read whole (size is its declared length, or -1) and checked
// under the limits before the engine's reader decodes it; rows are then
// decoded batch by batch, and each row keeps copies of its strings rather
// than the message buffer they point into, so decoded batches are garbage
// once their rows are taken.
func decodeArrow(r io.Reader, size int64, lim batchLimits) ([]engine.BatchItem, func(int) *positionError, error) {
	var buf bytes.Buffer
	if size > 0 {
		buf.Grow(int(size) + bytes.MinRead) // one allocation, no growth
	}
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, nil, err
	}
	data := buf.Bytes()
	invalid := func(err error) error {
		// The stream is the client's: a malformed one is a bad request,
		// not the corrupt-file 500 ErrCorrupt means for stored files.
		return &apiError{status: http.StatusBadRequest, code: codeInvalidArgument, msg: "invalid Arrow IPC stream", err: err}
	}
	comp, err := checkArrowStream(data, lim.bytes, lim.rows)
	switch {
	case errors.Is(err, errArrowBudget):
		return nil, nil, newError(http.StatusRequestEntityTooLarge, codePayloadTooLarge, "%v", err)
	case errors.Is(err, errArrowRows):
		return nil, nil, lim.tooManyRows(err.Error())
	case err != nil:
		return nil, nil, invalid(err)
	}
	var items []engine.BatchItem
	err = rowfile.ReadStream(bytes.NewReader(data), func(row int, rec rowfile.Record) error {
		if row >= lim.rows {
			return lim.tooManyRows(fmt.Sprintf("row %d", row))
		}
		if err := validateMediaType(rec.ContentType); err != nil {
			return &positionError{what: "row", n: row, err: badRequest("%v", err)}
		}
		p := rec.Payload
		if err := comp.check(row, p); err != nil {
			return &positionError{what: "row", n: row, err: badRequest("%v", err)}
		}
		rec.Payload = nil
		rec.ID, rec.RolloutID, rec.ProblemID = strings.Clone(rec.ID), strings.Clone(rec.RolloutID), strings.Clone(rec.ProblemID)
		rec.Role, rec.ContentType, rec.PolicyVersion = strings.Clone(rec.Role), strings.Clone(rec.ContentType), strings.Clone(rec.PolicyVersion)
		items = append(items, engine.BatchItem{Record: rec, Payload: p})
		return nil
	})
	var ae *apiError
	if errors.As(err, &ae) {
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, invalid(err)
	}
	return items, func(i int) *positionError { return &positionError{what: "row", n: i} }, nil
}

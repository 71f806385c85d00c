package server

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"mime"
	"net/http"

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
// first (bounded by MaxBatchBytes): a bad record anywhere rejects the batch,
// naming its line or row, before anything is written.
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
	body := newUploadBody(w, r, s.cfg.UploadIdleTimeout, s.cfg.MaxBatchBytes)
	var items []engine.BatchItem
	var pos func(i int) *positionError
	if mt == mediaNDJSON {
		items, pos, err = decodeNDJSON(body)
	} else {
		items, pos, err = decodeArrow(body, s.cfg.MaxBatchBytes)
	}
	body.done()
	if err != nil {
		return body.explain(err)
	}
	if len(items) == 0 {
		return badRequest("empty batch")
	}
	res, err := tb.AppendBatch(r.Context(), items)
	var be *engine.BatchError
	if errors.As(err, &be) && be.Index >= 0 && be.Index < len(items) {
		p := pos(be.Index)
		p.err = be.Err
		return p
	}
	if err != nil {
		return err
	}
	out := struct {
		Created  int           `json:"created"`
		Existing int           `json:"existing"`
		Records  []batchResult `json:"records"`
	}{Records: make([]batchResult, len(res))}
	for i, x := range res {
		if x.Created {
			out.Created++
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

// decodeNDJSON reads one record per line; blank lines are skipped but
// counted, so line numbers match what an editor shows.
func decodeNDJSON(r io.Reader) ([]engine.BatchItem, func(int) *positionError, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var items []engine.BatchItem
	var lines []int
	for line := 1; ; line++ {
		data, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return nil, nil, err
		}
		if t := bytes.TrimSpace(data); len(t) > 0 {
			var l batchLine
			if derr := decodeStrict(t, &l); derr != nil {
				return nil, nil, &positionError{what: "line", n: line, err: badRequest("invalid JSON: %v", derr)}
			}
			rec := l.record(l.ID, l.ContentType)
			if l.Payload == nil {
				l.Payload = []byte{}
			}
			items = append(items, engine.BatchItem{Record: rec, Payload: l.Payload})
			lines = append(lines, line)
		}
		if err == io.EOF {
			break
		}
	}
	return items, func(i int) *positionError { return &positionError{what: "line", n: lines[i]} }, nil
}

// decodeArrow reads an Arrow IPC stream whose columns are matched to the
// table schema by name (a subset in any order; id and rollout_id required).
// The stream is read whole first (it is bounded by MaxBatchBytes and held
// in memory as items anyway) and checked under limits before decoding.
func decodeArrow(r io.Reader, limit int64) ([]engine.BatchItem, func(int) *positionError, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, nil, err
	}
	invalid := func(err error) error {
		// The stream is the client's: a malformed one is a bad request,
		// not the corrupt-file 500 ErrCorrupt means for stored files.
		return &apiError{status: http.StatusBadRequest, code: codeInvalidArgument, msg: "invalid Arrow IPC stream", err: err}
	}
	if err := checkArrowStream(data, 4*limit); err != nil {
		return nil, nil, invalid(err)
	}
	var items []engine.BatchItem
	err = rowfile.ReadStream(bytes.NewReader(data), func(row int, rec rowfile.Record) error {
		p := rec.Payload
		rec.Payload = nil
		items = append(items, engine.BatchItem{Record: rec, Payload: p})
		return nil
	})
	if err != nil {
		return nil, nil, invalid(err)
	}
	return items, func(i int) *positionError { return &positionError{what: "row", n: i} }, nil
}

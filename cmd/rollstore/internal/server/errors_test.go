package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/objstore"
)

// classifyCase is an error and the answer classify must give it.
type classifyCase struct {
	err    error
	status int
	code   string
	retry  bool
}

func wrapped(err error) error { return fmt.Errorf("context: %w", err) }

// classifyCases are every error the server maps: the engine's, the
// store's, and its own.
func classifyCases() []classifyCase {
	wrap := wrapped
	return []classifyCase{
		{engine.ErrTableNotFound, 404, codeTableNotFound, false},
		{engine.ErrNotFound, 404, codeNotFound, false},
		{engine.ErrNoVersion, 404, codeVersionNotFound, false},
		{engine.ErrVersionGone, 410, codeVersionGone, false},
		// A collected version wraps the store's not-found: still 410.
		{fmt.Errorf("%w: version 3: %w", engine.ErrVersionGone, objstore.ErrNotFound), 410, codeVersionGone, false},
		{engine.ErrTableExists, 409, codeTableExists, false},
		{engine.ErrConflict, 409, codeConflict, false},
		{engine.ErrInvalid, 400, codeInvalidArgument, false},
		{engine.ErrInvalidName, 400, codeInvalidArgument, false},
		{engine.ErrTooLarge, 413, codePayloadTooLarge, false},
		{&http.MaxBytesError{Limit: 5}, 413, codePayloadTooLarge, false},
		{&engine.RangeError{Size: 3}, 416, codeRangeNotSatisfy, false},
		{engine.ErrOverloaded, 503, codeOverloaded, true},
		{objstore.ErrThrottled, 503, codeThrottled, true},
		{engine.ErrNoWriter, 503, codeReadOnly, true},
		{engine.ErrFenced, 503, codeFenced, true},
		{engine.ErrShardOwned, 503, codeShardOwned, true},
		{engine.ErrMergerBusy, 503, codeMergerBusy, true},
		{engine.ErrClosed, 503, codeUnavailable, true},
		{fmt.Errorf("%w: its payload upload began long ago", engine.ErrTooSlow), 503, codeTimeout, true},
		// A write that may have landed says so, whatever store error it
		// wraps (a lost condition or a missing head would otherwise be a
		// 500).
		{fmt.Errorf("%w: swapping the head: %w", engine.ErrOutcomeUnknown, objstore.ErrPrecondition), 503, codeOutcomeUnknown, true},
		{fmt.Errorf("%w: swapping the head: %w", engine.ErrOutcomeUnknown, objstore.ErrNotFound), 503, codeOutcomeUnknown, true},
		{fmt.Errorf("%w: swapping the head: %w", engine.ErrOutcomeUnknown, objstore.ErrUnavailable), 503, codeOutcomeUnknown, true},
		{fmt.Errorf("%w: %w", engine.ErrOutcomeUnknown, context.Canceled), statusClientClosed, codeCanceled, false},
		// A missing file is a 500 that says so, never a 404, even though
		// it wraps the store's not-found.
		{fmt.Errorf("%w: k after 3 attempts: %w", engine.ErrMissingFile, objstore.ErrNotFound), 500, codeMissingFile, false},
		{objstore.ErrNotFound, 500, codeMissingFile, false},
		// The engine may report every attempt's failure under its verdict.
		{fmt.Errorf("%w: k after 3 attempts: %w", engine.ErrMissingFile, errors.Join(objstore.ErrThrottled, context.DeadlineExceeded, objstore.ErrNotFound)),
			500, codeMissingFile, false},
		// Before any byte, a read that met two copies of an id is retried.
		{fmt.Errorf("payload of %q: %w", "x", engine.ErrRowChanged), 503, codeRowChanged, true},
		{rowfile.ErrCorrupt, 500, codeCorrupt, false},
		{fmt.Errorf("%w: base manifest 3 claims version 4", engine.ErrCorruptObject), 500, codeCorrupt, false},
		{objstore.ErrAuth, 502, codeStoreAuth, false},
		{objstore.ErrContainerNotFound, 502, codeStoreNotFound, false},
		{context.DeadlineExceeded, 503, codeTimeout, true},
		{objstore.ErrUnavailable, 503, codeStoreDown, true},
		{context.Canceled, statusClientClosed, codeCanceled, false},
		{errUploadIdle, 408, codeTimeout, false},
		{errUploadSlow, 408, codeTimeout, false},
		{errMalformedBody, 400, codeMalformedBody, false},
		{errClientGone, statusClientClosed, codeCanceled, false},
		{errTruncated, 400, codeTruncatedBody, false},
		{errBodyLimit, 413, codePayloadTooLarge, false},
		{errors.New("boom"), 500, codeInternal, false},
		// Batch errors keep the cause's answer.
		{&engine.BatchError{Index: 2, Err: wrap(engine.ErrConflict)}, 409, codeConflict, false},
		{&positionError{what: "line", n: 3, err: engine.ErrInvalid}, 400, codeInvalidArgument, false},
		{badRequest("x"), 400, codeInvalidArgument, false},
		{newError(503, codeDraining, "x"), 503, codeDraining, true},
		// The feed's and its consumer groups'.
		{fmt.Errorf("table t: %w", engine.ErrNoFeed), 409, codeFeedUnsupported, false},
		{fmt.Errorf("%w: checksum", engine.ErrBadCursor), 400, codeBadCursor, false},
		{&engine.CursorExpiredError{Reason: "reclaimed"}, 410, codeCursorExpired, false},
		{engine.ErrCursorExpired, 410, codeCursorExpired, false},
		{fmt.Errorf("commit: %w", engine.ErrRebalanced), 409, codeRebalanced, false},
		{engine.ErrGroupNotFound, 404, codeGroupNotFound, false},
	}
}

func TestClassify(t *testing.T) {
	for _, c := range classifyCases() {
		for _, err := range []error{c.err, wrapped(c.err)} {
			o := classify(err)
			if o.status != c.status || o.code != c.code || o.retry != c.retry {
				t.Errorf("classify(%v) = %+v, want %d %s retry=%v", err, o, c.status, c.code, c.retry)
			}
		}
	}
}

func TestParseRange(t *testing.T) {
	for _, c := range []struct {
		h       string
		kind    rangeKind
		size    int64
		off, n  int64
		satisfy bool
	}{
		{"", rangeNone, 10, 0, 0, false},
		{"bytes=0-4", rangeOne, 10, 0, 5, true},
		{"bytes=5-", rangeOne, 10, 5, 5, true},
		{"bytes=-3", rangeOne, 10, 7, 3, true},
		{"bytes=-30", rangeOne, 10, 0, 10, true},
		{"bytes=8-100", rangeOne, 10, 8, 2, true},
		{"bytes=10-", rangeOne, 10, 0, 0, false},
		{"bytes=-0", rangeOne, 10, 0, 0, false},
		{"bytes=0-0", rangeOne, 0, 0, 0, false},
		{"BYTES = 1-2", rangeOne, 10, 1, 2, true},
		{"bytes=1-2,4-5", rangeNone, 10, 0, 0, false},
		{"pages=1-2", rangeNone, 10, 0, 0, false},
		{"bytes=2-1", rangeInvalid, 10, 0, 0, false},
		{"bytes=+1-2", rangeInvalid, 10, 0, 0, false},
		{"bytes=1", rangeInvalid, 10, 0, 0, false},
		{"bytes=a-b", rangeInvalid, 10, 0, 0, false},
		{"bytes=99999999999999999999-", rangeOne, 10, 0, 0, false},
		{"bytes=3-99999999999999999999", rangeOne, 10, 3, 7, true},
		{"bytes=-99999999999999999999", rangeOne, 10, 0, 10, true},
	} {
		br, kind := parseRange(c.h)
		if kind != c.kind {
			t.Errorf("%q: kind %d, want %d", c.h, kind, c.kind)
			continue
		}
		if kind != rangeOne {
			continue
		}
		off, n, ok := br.resolve(c.size)
		if ok != c.satisfy || (ok && (off != c.off || n != c.n)) {
			t.Errorf("%q on %d bytes: %d+%d %v, want %d+%d %v", c.h, c.size, off, n, ok, c.off, c.n, c.satisfy)
		}
	}
}

// TestEncodingFailureIsExplained: an answer that cannot be encoded is a
// 500 that carries the request id, and the request's log line its cause.
func TestEncodingFailureIsExplained(t *testing.T) {
	rw := httptest.NewRecorder()
	rw.Header().Set("X-Request-Id", "req-1")
	rec := &recorder{ResponseWriter: rw}
	writeJSON(rec, http.StatusOK, map[string]any{"x": make(chan int)})
	var b errorBody
	if err := json.Unmarshal(rw.Body.Bytes(), &b); err != nil || rw.Code != http.StatusInternalServerError ||
		b.Error.Code != codeInternal || b.Error.RequestID != "req-1" || rec.encodeErr == nil {
		t.Fatalf("%d %s (cause %v)", rw.Code, rw.Body, rec.encodeErr)
	}
}

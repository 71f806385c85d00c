package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/objstore"
)

// Error codes. They are part of the API: clients branch on them, so a code
// is never renamed, only added.
const (
	codeInvalidArgument  = "invalid_argument"
	codeNotFound         = "not_found"
	codeTableNotFound    = "table_not_found"
	codeVersionNotFound  = "version_not_found"
	codeRouteNotFound    = "route_not_found"
	codeRedirect         = "redirect"
	codeMalformedRequest = "malformed_request"
	codeMethodNotAllowed = "method_not_allowed"
	codeTableExists      = "table_exists"
	codeConflict         = "conflict"
	codeVersionGone      = "version_gone"
	codeLengthRequired   = "length_required"
	codePayloadTooLarge  = "payload_too_large"
	codeHeaderTooLarge   = "header_too_large"
	codeUnsupportedMedia = "unsupported_media_type"
	codeRangeNotSatisfy  = "range_not_satisfiable"
	codePrecondFailed    = "precondition_failed"
	codeTruncatedBody    = "truncated_body"
	codeMalformedBody    = "malformed_body"
	codeTimeout          = "timeout"
	codeUnauthorized     = "unauthorized"
	codeOverloaded       = "overloaded"
	codeThrottled        = "throttled"
	codeDraining         = "draining"
	codeNotReady         = "not_ready"
	codeReadOnly         = "read_only"
	codeShardOwned       = "shard_owned"
	codeNotOwner         = "not_owner"
	codeOwnerUnreachable = "owner_unreachable"
	codeMergerBusy       = "merger_busy"
	codeFenced           = "fenced"
	codeUnavailable      = "unavailable"
	codeMissingFile      = "missing_file"
	codeRowChanged       = "row_changed"
	codeCorrupt          = "corrupt"
	codeStoreAuth        = "store_auth"
	codeStoreNotFound    = "store_not_found"
	codeStoreDown        = "store_unavailable"
	codeOutcomeUnknown   = "outcome_unknown"
	codeCanceled         = "canceled"
	codeInternal         = "internal"
	codeBadCursor        = "bad_cursor"
	codeCursorExpired    = "cursor_expired"
	codeFeedUnsupported  = "feed_unsupported"
	codeRebalanced       = "rebalanced"
	codeGroupNotFound    = "group_not_found"
)

// statusClientClosed is logged (never sent) when the client went away
// before the answer; nginx's convention.
const statusClientClosed = 499

// apiError is an error whose answer the handler already decided.
type apiError struct {
	status int
	code   string
	msg    string
	err    error // optional cause, for errors.Is and logs
}

func (e *apiError) Error() string {
	if e.err != nil && e.msg == "" {
		return e.err.Error()
	}
	if e.err != nil {
		return e.msg + ": " + e.err.Error()
	}
	return e.msg
}

func (e *apiError) Unwrap() error { return e.err }

func newError(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, codeInvalidArgument, format, args...)
}

// positionError names the line (NDJSON, from 1) or row (Arrow, from 0) of
// a batch that failed; the status comes from the wrapped error.
type positionError struct {
	what string // "line" or "row"
	n    int
	err  error
}

func (e *positionError) Error() string { return fmt.Sprintf("%s %d: %v", e.what, e.n, e.err) }
func (e *positionError) Unwrap() error { return e.err }

// Sentinels of the upload path; see upload.go.
var (
	errUploadIdle    = errors.New("upload stalled: no body bytes within the idle timeout")
	errUploadSlow    = errors.New("upload too slow: below the minimum upload rate")
	errTruncated     = errors.New("request body ended before its declared length")
	errBodyLimit     = errors.New("request body exceeds the limit")
	errMalformedBody = errors.New("malformed request body framing")
	errClientGone    = errors.New("client went away during the upload")
)

// outcome is how an error is answered.
type outcome struct {
	status int
	code   string
	retry  bool // 503: send Retry-After
}

// classify maps an error from the engine, the store or a handler to its
// answer. It is the one place that does so. Order matters where errors
// wrap others: a missing file or a collected version wraps the store's
// ErrNotFound, which alone would be a different answer.
func classify(err error) outcome {
	var ae *apiError
	var re *engine.RangeError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return outcome{ae.status, ae.code, ae.status == http.StatusServiceUnavailable}
	case errors.Is(err, errUploadIdle), errors.Is(err, errUploadSlow), errors.Is(err, errDownloadIdle), errors.Is(err, errDownloadSlow):
		return outcome{http.StatusRequestTimeout, codeTimeout, false}
	case errors.Is(err, errTruncated):
		return outcome{http.StatusBadRequest, codeTruncatedBody, false}
	case errors.Is(err, errDigestMismatch):
		return outcome{http.StatusBadRequest, codeInvalidArgument, false}
	case errors.Is(err, errMalformedBody):
		return outcome{http.StatusBadRequest, codeMalformedBody, false}
	case errors.Is(err, errClientGone):
		return outcome{statusClientClosed, codeCanceled, false}
	case errors.Is(err, errBodyLimit), errors.As(err, &mbe), errors.Is(err, engine.ErrTooLarge):
		return outcome{http.StatusRequestEntityTooLarge, codePayloadTooLarge, false}
	case errors.As(err, &re):
		return outcome{http.StatusRequestedRangeNotSatisfiable, codeRangeNotSatisfy, false}
	case errors.Is(err, engine.ErrTableNotFound):
		return outcome{http.StatusNotFound, codeTableNotFound, false}
	case errors.Is(err, engine.ErrGroupNotFound):
		return outcome{http.StatusNotFound, codeGroupNotFound, false}
	case errors.Is(err, engine.ErrNoFeed):
		return outcome{http.StatusConflict, codeFeedUnsupported, false}
	case errors.Is(err, engine.ErrBadCursor):
		return outcome{http.StatusBadRequest, codeBadCursor, false}
	case errors.Is(err, engine.ErrCursorExpired):
		return outcome{http.StatusGone, codeCursorExpired, false}
	case errors.Is(err, engine.ErrRebalanced):
		return outcome{http.StatusConflict, codeRebalanced, false}
	case errors.Is(err, engine.ErrNotFound):
		return outcome{http.StatusNotFound, codeNotFound, false}
	case errors.Is(err, engine.ErrNoVersion):
		return outcome{http.StatusNotFound, codeVersionNotFound, false}
	case errors.Is(err, engine.ErrVersionGone):
		return outcome{http.StatusGone, codeVersionGone, false}
	case errors.Is(err, engine.ErrTableExists):
		return outcome{http.StatusConflict, codeTableExists, false}
	case errors.Is(err, engine.ErrConflict):
		return outcome{http.StatusConflict, codeConflict, false}
	case errors.Is(err, engine.ErrInvalidName), errors.Is(err, engine.ErrInvalid):
		return outcome{http.StatusBadRequest, codeInvalidArgument, false}
	case errors.Is(err, engine.ErrRowChanged):
		// Two copies of the id exist (two shards acknowledged it at once)
		// and the read met both: a new read finds one of them.
		return outcome{http.StatusServiceUnavailable, codeRowChanged, true}
	case errors.Is(err, engine.ErrMissingFile) && !errors.Is(err, context.Canceled):
		// The engine's verdict after its bounded retries, which may carry
		// every attempt's failure (a throttled or timed-out one among
		// them): the file stayed missing, whatever else went wrong.
		return outcome{http.StatusInternalServerError, codeMissingFile, false}
	case errors.Is(err, engine.ErrOverloaded):
		return outcome{http.StatusServiceUnavailable, codeOverloaded, true}
	case errors.Is(err, engine.ErrTooSlow):
		// Nothing was written and the append may be retried: the server
		// took too long, not the client.
		return outcome{http.StatusServiceUnavailable, codeTimeout, true}
	case errors.Is(err, engine.ErrOutcomeUnknown) && !errors.Is(err, context.Canceled):
		// Before the store's errors it wraps: what the client must know
		// is that the write may have landed, and that an identical retry
		// is answered from what did.
		return outcome{http.StatusServiceUnavailable, codeOutcomeUnknown, true}
	case errors.Is(err, objstore.ErrThrottled):
		return outcome{http.StatusServiceUnavailable, codeThrottled, true}
	case errors.Is(err, objstore.ErrUnavailable):
		return outcome{http.StatusServiceUnavailable, codeStoreDown, true}
	case errors.Is(err, engine.ErrNoWriter):
		return outcome{http.StatusServiceUnavailable, codeReadOnly, true}
	case errors.Is(err, engine.ErrFenced):
		return outcome{http.StatusServiceUnavailable, codeFenced, true}
	case errors.Is(err, engine.ErrNotOwner):
		// The partition moved between routing and committing (or no
		// writer is live for it): retry, and it is routed anew.
		return outcome{http.StatusServiceUnavailable, codeNotOwner, true}
	case errors.Is(err, engine.ErrShardOwned):
		return outcome{http.StatusServiceUnavailable, codeShardOwned, true}
	case errors.Is(err, engine.ErrMergerBusy):
		return outcome{http.StatusServiceUnavailable, codeMergerBusy, true}
	case errors.Is(err, engine.ErrClosed):
		return outcome{http.StatusServiceUnavailable, codeUnavailable, true}
	case errors.Is(err, objstore.ErrNotFound):
		// The engine turns a reclaimed file into a retry, and one that
		// stays missing into ErrMissingFile; a bare store ErrNotFound that
		// got this far is the same condition and never a 404.
		return outcome{http.StatusInternalServerError, codeMissingFile, false}
	case errors.Is(err, rowfile.ErrCorrupt), errors.Is(err, engine.ErrCorruptObject):
		return outcome{http.StatusInternalServerError, codeCorrupt, false}
	case errors.Is(err, objstore.ErrAuth):
		return outcome{http.StatusBadGateway, codeStoreAuth, false}
	case errors.Is(err, objstore.ErrContainerNotFound):
		return outcome{http.StatusBadGateway, codeStoreNotFound, false}
	case errors.Is(err, context.DeadlineExceeded):
		// A store call that timed out: as retryable as one that failed.
		return outcome{http.StatusServiceUnavailable, codeTimeout, true}
	case errors.Is(err, context.Canceled):
		return outcome{statusClientClosed, codeCanceled, false}
	default:
		return outcome{http.StatusInternalServerError, codeInternal, false}
	}
}

// errorBody is the JSON of every error answer.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"request_id,omitempty"`
	// Line (NDJSON, from 1) or Row (Arrow, from 0) of a rejected batch.
	Line *int `json:"line,omitempty"`
	Row  *int `json:"row,omitempty"`
	// Index of the failing item of an internal commit (forwarded writes).
	Index *int `json:"index,omitempty"`
	// Committed: the items of a failed batch that were committed
	// nevertheless (rows of other partitions commit independently).
	Committed []committedItem `json:"committed,omitempty"`
	// OldestCursor (cursor_expired): where the feed can resume now.
	OldestCursor string `json:"oldest_cursor,omitempty"`
}

// writeError answers err. It reports the outcome for logs and metrics.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) outcome {
	o := classify(err)
	if o.status == statusClientClosed {
		return o // nobody is listening
	}
	d := errorDetail{Code: o.code, Message: err.Error(), RequestID: requestID(r.Context())}
	var pe *positionError
	if errors.As(err, &pe) {
		n := pe.n
		switch pe.what {
		case "line":
			d.Line = &n
		case "index":
			d.Index = &n
		default:
			d.Row = &n
		}
	}
	var part *partialError
	if errors.As(err, &part) {
		d.Committed = part.committed
	}
	var expired *engine.CursorExpiredError
	if errors.As(err, &expired) {
		d.OldestCursor = engine.EncodeCursor(expired.Oldest)
	}
	h := w.Header()
	for _, k := range []string{"Content-Range", "Content-Length", "ETag", "Last-Modified", "Accept-Ranges", "Content-Encoding", "Content-Disposition", "Content-Security-Policy"} {
		if k == "ETag" && o.status == http.StatusPreconditionFailed {
			continue // the validator the precondition was held against
		}
		h.Del(k)
	}
	if r.ContentLength != 0 {
		// The body may be unread, partly read or stalled: close the
		// connection after the answer rather than let net/http drain it
		// (which would wait on a stalled client).
		h.Set("Connection", "close")
	}
	if o.retry {
		h.Set("Retry-After", strconv.Itoa(max(1, int(s.cfg.RetryAfter.Seconds()+0.5))))
	}
	var re *engine.RangeError
	if errors.As(err, &re) {
		h.Set("Content-Range", "bytes */"+strconv.FormatInt(re.Size, 10))
	}
	if o.status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="rollstore"`)
	}
	writeJSON(w, o.status, errorBody{Error: d})
	return o
}
